"""What the web console adds to the cluster's own answer: server-side time of the search
and topic pages (the ``Server-Timing`` header a console page carries: its time in the
console process, its calls to the nodes included) against the time of the same question
asked through the client (``msgstore query``'s call for a key; for a time range the
same reads one after another), over a topic of N messages on a 3-node local
cluster, in one run.

    python bench/console.py [--messages 1000000] [--runs 200]

Prints one JSON document: per page, p50 and p99 of the page's server time and of the
client's call, and what the page adds at p50 (page p50 less client p50).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage_node.cli.local import LocalCluster  # noqa: E402
from storage_node.cli.local_console import LocalConsole  # noqa: E402
from storage_node.client import Client  # noqa: E402

TOPIC = "orders"
PARTITIONS = 6
PER_KEY = 10  # messages per order key
FRAME = 100_000


def load(client: Client, messages: int) -> float:
    """N order events, PER_KEY per order, through the client's column path; seconds."""
    started = time.perf_counter()
    orders = max(1, messages // PER_KEY)
    for at in range(0, messages, FRAME):
        ids = range(at, min(messages, at + FRAME))
        keys = [f"ord-{i % orders:08d}" for i in ids]
        values = [f'{{"order": {i % orders}, "event": {i // orders}, "amount": 42.5}}' for i in ids]
        client.produce_columns(TOPIC, {"key": keys, "value": values})
    return time.perf_counter() - started


def newest_by_reads(client: Client) -> list[dict]:
    """The reads a newest-first time page needs, done by the blocking client one after
    another: per partition the offsets of the range's ends, then its last 51 messages."""
    out = []
    for p in range(PARTITIONS):
        client.read(TOPIC, p, max_messages=1, start_time=0)
        end = client.read(TOPIC, p, max_messages=1, start_time=2**63 - 1)["next_offset"]
        out += client.read(TOPIC, p, max(0, end - 51), max_messages=51)["messages"]
    return out


def quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
    }


def page_ms(url: str) -> float:
    answer = requests.get(url, timeout=60)
    answer.raise_for_status()
    timing = answer.headers["Server-Timing"]  # page;dur=12.34
    return float(timing.split("dur=")[1])


def call_ms(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def measure(runs: int, page: Callable[[int], str], call: Callable[[int], object]) -> dict:
    pages, calls = [], []
    for i in range(runs):  # interleaved: both see the same machine load
        pages.append(page_ms(page(i)))
        calls.append(call_ms(lambda i=i: call(i)))
    p, c = quantiles(pages), quantiles(calls)
    return {"page": p, "client": c, "page_adds_p50_ms": round(p["p50_ms"] - c["p50_ms"], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=200, help="requests per page (default 200)")
    args = parser.parse_args()
    orders = max(1, args.messages // PER_KEY)
    report: dict[str, object] = {"messages": args.messages, "nodes": 3, "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="msgstore-bench-console-") as tmp:
        with LocalCluster(tmp) as cluster:
            cluster.up(nodes=3, env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0"})
            console = LocalConsole(tmp)
            try:
                with Client(cluster.addresses) as client:
                    client.create_topic(TOPIC, PARTITIONS)
                    report["load_s"] = round(load(client, args.messages), 1)
                    base = console.start(cluster.addresses).url
                    key = lambda i: f"ord-{(i * 7919) % orders:08d}"  # noqa: E731
                    report["search by key (50 newest)"] = measure(
                        args.runs,
                        lambda i: f"{base}/search?topic={TOPIC}&key={key(i)}",
                        lambda i: client.lookup_key(TOPIC, key(i), max_count=51),
                    )
                    report["search by time (50 newest)"] = measure(
                        args.runs,
                        lambda i: f"{base}/search?topic={TOPIC}&from=0",
                        lambda i: newest_by_reads(client),
                    )
                    report["topic page"] = measure(
                        args.runs,
                        lambda i: f"{base}/topics/{TOPIC}",
                        lambda i: client.describe_topic(TOPIC),
                    )
            finally:
                console.stop()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
