"""Compact every node's sealed files on Spark executors.

    python spark/jobs/compact.py --endpoints http://127.0.0.1:7100 [--seal]

The driver asks each node for its sealed, not yet compacted files; one task per file
fetches it from its node, rewrites it with the engine's format code (LZ4 blocks for
segments, slot-contiguous arrays for key indexes) and sends it back with its CRC-32; the
node verifies it and moves it into compacted/ atomically while appends go on. ``--seal``
seals the active files first so everything written so far is covered. Prints each file
with its bytes before and after, and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from _bootstrap import ensure_importable

ensure_importable()

from msgstore_spark.compaction import plan, run_task  # noqa: E402
from msgstore_spark.options import connection_options  # noqa: E402
from msgstore_spark.session import job_session  # noqa: E402

from storage_node.errors import MsgStoreError  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoints", "--endpoint", required=True, help="node URLs, comma-separated")
    p.add_argument("--seal", action="store_true", help="seal the active files first")
    p.add_argument("--token", default=os.environ.get("MSGSTORE_TOKEN"))
    p.add_argument("--master", help="Spark master (default local[*] outside spark-submit)")
    return p.parse_args(argv)


def compact(spark: object, args: argparse.Namespace) -> dict:
    options = {"endpoints": args.endpoints}
    if args.token:
        options["token"] = args.token
    conn = connection_options(options)
    started = time.perf_counter()
    tasks = plan(conn, args.seal)
    reports: list[dict] = []
    if tasks:
        sc = spark.sparkContext  # type: ignore[attr-defined]
        # biggest first, one file per task
        ordered = sorted(tasks, key=lambda t: -t.size)
        reports = (
            sc.parallelize(ordered, numSlices=len(ordered))
            .map(lambda task: run_task(conn, task))
            .collect()
        )
    done = [r for r in reports if r["status"] == "compacted"]
    return {
        "files": len(tasks),
        "compacted": len(done),
        "skipped": len(reports) - len(done),
        "bytes_before": sum(r["bytes_before"] for r in done),
        "bytes_after": sum(r["bytes_after"] for r in done),
        "seconds": round(time.perf_counter() - started, 3),
        "reports": reports,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = job_session("msgstore-compact", args.master)
    try:
        summary = compact(spark, args)
    except MsgStoreError as err:
        print(f"compaction failed: {err}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    for r in summary["reports"]:
        if r["status"] == "compacted":
            print(
                f"{r['node_id']} {r['kind']} {r['name']}: "
                f"{r['bytes_before']} -> {r['bytes_after']} bytes"
            )
        else:
            print(f"{r['node_id']} {r['kind']} {r['name']}: skipped ({r.get('reason')})")
    print(
        f"compacted {summary['compacted']} of {summary['files']} sealed files: "
        f"{summary['bytes_before']} -> {summary['bytes_after']} bytes in {summary['seconds']} s"
    )
    print(json.dumps({"compact": {k: v for k, v in summary.items() if k != "reports"}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
