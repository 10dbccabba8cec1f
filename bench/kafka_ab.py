"""A/B of two source trees on the Kafka produce path: Apache Kafka's ProducerPerformance
against a msgstore node started from tree A, then from tree B, interleaved (ABBA...), a
fresh node and data directory per run, so that a change to the node is measured against the
code it would replace on the same machine in the same minutes (these 2-core machines swing
by a fifth between runs; bench/kafka.py compares with Apache Kafka instead).

Each run: a topic of --partitions partitions, --warmup-messages produced and not counted,
then --messages × 100 B with the bench's producer settings (acks=1, linger.ms=5,
batch.size=65536), timed by ProducerPerformance; the node's CPU over the counted run. Prints
one JSON line per run and a summary line with the medians per tree.

A tree is a checkout of this repository with its compiled extensions built (``make venv``
builds them in place; a ``git worktree`` needs them built or copied there); the node runs
with this interpreter, from the tree (its working directory and ``PYTHONPATH``).

Usage: python bench/kafka_ab.py TREE_A TREE_B [--rounds 4] [--messages 2000000]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any


def _load_bench_kafka() -> Any:
    """bench/kafka.py (the broker tools and the node launcher), by path: a module named
    ``kafka`` on ``sys.path`` could be a Kafka client library."""
    path = Path(__file__).resolve().parent / "kafka.py"
    spec = importlib.util.spec_from_file_location("msgstore_bench_kafka", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _load_bench_kafka()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree_a", type=Path)
    parser.add_argument("tree_b", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--warmup-messages", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    trees = {"a": args.tree_a.resolve(), "b": args.tree_b.resolve()}
    for tree in trees.values():
        if not (tree / "storage_node" / "cli" / "__main__.py").exists():
            parser.error(f"{tree} is not a checkout of this repository")
    runs: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    with tempfile.TemporaryDirectory(prefix="msgstore-kafka-ab-") as tmp:
        java = bench.Java(bench.kafka_classpath(), Path(tmp))
        for i in range(args.rounds):
            for name in ("a", "b") if i % 2 == 0 else ("b", "a"):
                workdir = Path(tmp) / f"{name}{i}"
                workdir.mkdir()
                server = bench.start_msgstore(workdir, "page-cache", code=trees[name])
                try:
                    bench.create_topic(java, server, "ab", args.partitions)
                    bench.produce(java, server, "ab", args.warmup_messages)
                    rate, cpu = bench.measured(
                        server,
                        args.messages,
                        lambda s=server: bench.produce(java, s, "ab", args.messages),
                    )
                finally:
                    bench.stop(server.proc)
                runs[name].append((rate, cpu))
                print(
                    json.dumps(
                        {
                            "bench": "kafka_ab_run",
                            "tree": str(trees[name]),
                            "round": i,
                            "msgs_per_s": round(rate),
                            "cpu_s_per_million": round(cpu, 3),
                        }
                    ),
                    flush=True,
                )
    summary: dict[str, object] = {"bench": "kafka_ab", "messages": args.messages}
    for name, tree in trees.items():
        summary[name] = {
            "tree": str(tree),
            "median_msgs_per_s": round(statistics.median(r for r, _ in runs[name])),
            "median_cpu_s_per_million": round(statistics.median(c for _, c in runs[name]), 3),
            "rounds": [round(r) for r, _ in runs[name]],
        }
    a, b = (statistics.median(r for r, _ in runs[n]) for n in ("a", "b"))
    summary["ratio_b_vs_a"] = round(b / a, 3)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
