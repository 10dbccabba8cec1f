"""``make run``: a local 3-node cluster, the sample order events, compaction, example queries.

Loading runs the Spark ingest job (spark/jobs/ingest.py) and compaction the Spark compact
job (spark/jobs/compact.py), both on local[*]; MSGSTORE_DEMO_LOADER=client loads through the
Python client and lets the nodes compact by themselves instead (no Spark needed).

Environment: MSGSTORE_DEMO_EXIT=1 exits after printing; MSGSTORE_DEMO_ROWS sets the sample
size (default 300000); MSGSTORE_DEMO_DIR keeps the cluster in that directory instead of a
temporary one; MSGSTORE_DEMO_NODES sets the node count (default 3).

Paths (options, else environment, else relative to the current directory, which for
``make run`` is the repository): ``--sample-dir`` / MSGSTORE_DEMO_SAMPLE_DIR where the
generated sample file is kept (default data/sample), ``--jobs-dir`` / MSGSTORE_SPARK_JOBS_DIR
the Spark job scripts (default spark/jobs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from storage_node.cli.local import LocalCluster
from storage_node.cli.local_console import LocalConsole
from storage_node.client import Client
from storage_node.demo.sample_data import DEFAULT_ROWS, ensure_sample_file
from storage_node.demo.spark import check_jobs_dir, run_job
from storage_node.demo.tables import MESSAGE_HEADERS, human_ms, message_rows, table
from storage_node.errors import InvalidArgument

TOPIC = "orders"
PARTITIONS = 6


def say(text: str) -> None:
    print(text, flush=True)


def show(title: str, doc: Any) -> None:
    """Lists print one compact JSON line per item; anything else as indented JSON."""
    say(f"\n== {title}")
    if isinstance(doc, list):
        for item in doc:
            say("  " + json.dumps(item, sort_keys=True, ensure_ascii=False))
        if not doc:
            say("  (none)")
    else:
        say(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False))


def sample_path(sample_dir: Path, rows: int) -> Path:
    return sample_dir / f"orders-{rows}.jsonl"


def use_spark() -> bool:
    return os.environ.get("MSGSTORE_DEMO_LOADER", "spark").lower() != "client"


def node_env() -> dict[str, str]:
    """With Spark, the nodes leave sealed files to the compact job for the first hour."""
    return {"MSGSTORE_COMPACT_AFTER_S": "3600"} if use_spark() else {}


def load_sample_data(
    cluster: LocalCluster, path: Path, topic: str, jobs_dir: Path
) -> dict[str, Any]:
    """Load JSON lines into the topic: key = order id, tag = event type, born time = ts."""
    if not use_spark():
        return load_with_client(cluster, path, topic)

    args = ["--endpoints", ",".join(cluster.addresses), "--topic", topic, "--input", str(path)]
    args += ["--format", "json", "--key-column", "order_id", "--tag-column", "event_type"]
    args += ["--timestamp-column", "ts", "--partitions", str(PARTITIONS)]
    summary = run_job(jobs_dir, "ingest", args)["ingest"]
    return {
        "messages": summary["rows"],
        "seconds": summary["seconds"],
        "msgs_per_s": summary["rows_per_s"],
        "via": "spark/jobs/ingest.py",
    }


def load_with_client(cluster: LocalCluster, path: Path, topic: str) -> dict[str, Any]:
    """The same load through the Python client, without Spark."""
    started = time.perf_counter()
    count = 0
    batch: list[dict[str, Any]] = []
    with Client(cluster.addresses) as client, open(path, encoding="utf-8") as fh:
        for line in fh:
            event = json.loads(line)
            batch.append(
                {
                    "value": line.rstrip("\n"),
                    "key": event["order_id"],
                    "tag": event["event_type"],
                    "timestamp": event["ts"],
                }
            )
            if len(batch) >= 5000:
                count += len(client.produce(topic, batch))
                batch = []
        if batch:
            count += len(client.produce(topic, batch))
    seconds = time.perf_counter() - started
    return {"messages": count, "seconds": round(seconds, 2), "msgs_per_s": round(count / seconds)}


def compact_cluster(cluster: LocalCluster, jobs_dir: Path) -> dict[str, Any]:
    """Seal every node's active files, then compact them on Spark executors."""
    if not use_spark():
        return compact_with_nodes(cluster)

    summary = run_job(jobs_dir, "compact", ["--endpoints", ",".join(cluster.addresses), "--seal"])
    return {**summary["compact"], "via": "spark/jobs/compact.py"}


def compact_with_nodes(cluster: LocalCluster) -> dict[str, Any]:
    """Seal and compact every node by the nodes themselves."""
    started = time.perf_counter()
    with Client(cluster.addresses) as client:
        reports = client.compact()
    return {"seconds": round(time.perf_counter() - started, 2), "nodes": sorted(reports)}


def file_summary(client: Client) -> dict[str, dict[str, int]]:
    summary: dict[str, dict[str, int]] = {}
    for node_id, doc in client.files().items():
        per_state: dict[str, int] = {}
        for f in doc["files"]:
            name = f"{f['kind']}/{f['state']}"
            per_state[name] = per_state.get(name, 0) + 1
        summary[node_id] = per_state
    return summary


def example_queries(cluster: LocalCluster, topic: str) -> None:
    """Answer one query of each kind: offset, key, message ID, time range."""
    with Client(cluster.addresses) as client:
        info = client.describe_topic(topic)
        show_table(
            "partitions: owner, first and next offset",
            ("PART", "OWNER", "FIRST", "NEXT", "MESSAGES"),
            [
                [
                    p["partition"],
                    p["owner"],
                    p["first_offset"],
                    p["next_offset"],
                    None
                    if p["first_offset"] is None or p["next_offset"] is None
                    else p["next_offset"] - p["first_offset"],
                ]
                for p in info["partition_offsets"]
            ],
        )
        page = client.read(topic, 0, offset=100, max_messages=3)
        show_messages("by offset: partition 0, offsets 100..102", page["messages"])
        key = json.loads(page["messages"][0]["value"])["order_id"]
        history = client.lookup_key(topic, key, max_count=16)
        show_messages(f"by key: every event of order {key}, newest first", history["messages"])
        msg_id = history["messages"][-1]["msg_id"]
        show_messages(f"by message ID: {msg_id}", [client.get_message(msg_id)])
        begin = page["messages"][0]["store_timestamp"]
        end = begin + 500
        in_window: list[dict[str, Any]] = []
        counts = []
        for part in info["partition_offsets"]:
            found = client.read(
                topic, part["partition"], start_time=begin, end_time=end, max_messages=10_000
            )["messages"]
            counts.append(f"p{part['partition']}: {len(found)}")
            in_window.extend(found[:1])
        show_messages(
            f"by time range: stored from {human_ms(begin)} to {human_ms(end)} (500 ms); "
            f"per partition {', '.join(counts)}; the first of each",
            in_window,
        )
        shipped = client.read(topic, 2, offset=0, max_messages=2, tag="shipped")
        show_messages("by tag: first 'shipped' events of partition 2", shipped["messages"])
        files = file_summary(client)
        kinds = sorted({k for per in files.values() for k in per})
        show_table(
            "files per node after compaction (kind/state: count)",
            ("NODE", *kinds),
            [[node, *(per.get(k, 0) for k in kinds)] for node, per in sorted(files.items())],
        )


def show_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    say(f"\n== {title}")
    for line in table(headers, rows):
        say("  " + line)


def show_messages(title: str, messages: Sequence[dict[str, Any]]) -> None:
    show_table(title, MESSAGE_HEADERS, message_rows(messages))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m storage_node.demo", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--sample-dir",
        type=Path,
        default=Path(os.environ.get("MSGSTORE_DEMO_SAMPLE_DIR", "data/sample")),
        help="where the generated sample file is kept (default %(default)s)",
    )
    parser.add_argument(
        "--jobs-dir",
        type=Path,
        default=Path(os.environ.get("MSGSTORE_SPARK_JOBS_DIR", "spark/jobs")),
        help="the Spark job scripts ingest.py and compact.py (default %(default)s)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if use_spark():
        try:
            check_jobs_dir(args.jobs_dir)
        except InvalidArgument as err:
            print(f"error: {err.message}", file=sys.stderr)
            return 2
    rows = int(os.environ.get("MSGSTORE_DEMO_ROWS", DEFAULT_ROWS))
    nodes = int(os.environ.get("MSGSTORE_DEMO_NODES", "3"))
    keep_dir = os.environ.get("MSGSTORE_DEMO_DIR")
    exit_after = os.environ.get("MSGSTORE_DEMO_EXIT", "") not in ("", "0")
    workdir = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="msgstore-demo-"))
    if keep_dir and (workdir / "routing.json").exists():
        shutil.rmtree(workdir)  # a fresh cluster each run: the demo loads the data once
    say(f"sample data: {rows} order events")
    path = ensure_sample_file(sample_path(args.sample_dir, rows), rows)
    say(f"  {path} ({path.stat().st_size // (1 << 20)} MiB)")
    cluster = LocalCluster(workdir)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        say(f"starting a local {nodes}-node cluster in {workdir}")
        for n in cluster.up(nodes=nodes, env=node_env()):
            say(f"  {n.id} {n.address} (Kafka: {cluster.kafka_address(n)})")
        with Client(cluster.addresses) as client:
            client.create_topic(TOPIC, PARTITIONS)
        say(f"loading {path.name} into topic '{TOPIC}' ({PARTITIONS} partitions)")
        show("load", load_sample_data(cluster, path, TOPIC, args.jobs_dir))
        say("compacting (seal, LZ4 blocks, compacted key indexes)")
        show("compaction", compact_cluster(cluster, args.jobs_dir))
        example_queries(cluster, TOPIC)
        console = LocalConsole(workdir).start(cluster.addresses)
        say(f"web console: {console.url}")
        if exit_after:
            return 0
        say(
            f"\nserving at {', '.join(cluster.addresses)} — try:\n"
            f"  the web console: {console.url}/search?topic={TOPIC}&key=ord-00000042"
            " (docs/CONSOLE.md)\n"
            f"  .venv/bin/msgstore query {TOPIC} ord-00000042 --endpoint {cluster.addresses[0]}\n"
            f"  kcat -b {cluster.kafka_address(cluster.nodes[0])} -C -t {TOPIC} -o -5 -e"
            " -f '%k %s\\n'   (any Kafka client works: docs/KAFKA.md)\n"
            "press Ctrl-C to stop"
        )
        while not stop.wait(1.0):
            pass
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        say("stopping the cluster")
        LocalConsole(workdir).stop()
        cluster.down()
        if not keep_dir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
