"""Wall time of the ``msgstore`` command a user waits for: ``msgstore --version`` (no
cluster) and ``msgstore topic list`` (against a 1-node local cluster started here).

    python bench/cli.py [--runs 10]

Prints one JSON document: per command the median, min and max wall seconds of ``--runs``
runs of a fresh interpreter (``python -m storage_node.cli``), the way a shell starts it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage_node.cli.local import LocalCluster  # noqa: E402

CLI = [sys.executable, "-m", "storage_node.cli"]


def wall(args: list[str], runs: int, env: dict[str, str]) -> dict[str, float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([*CLI, *args], check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - started)
    return {
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "max_s": round(max(times), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per command (default 10)")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGSTORE_")}
    report: dict[str, object] = {"runs": args.runs, "python": sys.version.split()[0]}
    report["msgstore --version"] = wall(["--version"], args.runs, env)
    with tempfile.TemporaryDirectory(prefix="msgstore-bench-cli-") as tmp:
        with LocalCluster(tmp) as cluster:
            cluster.up(nodes=1)
            endpoint = ["--endpoint", cluster.addresses[0]]
            create = [*CLI, "topic", "create", "t", *endpoint]
            subprocess.run(create, check=True, env=env, capture_output=True)
            report["msgstore topic list"] = wall(["topic", "list", *endpoint], args.runs, env)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
