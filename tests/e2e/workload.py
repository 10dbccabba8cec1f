"""A msgstore client workload, run inside a pod (or on the host) by the end-to-end tests.

It uses only the standard library and msgstore's own Python client, so it runs in the node
image as it is: `kubectl exec -i POD -- python3 - COMMAND ARGS < workload.py`. Every command
prints one JSON document on stdout.

  produce  --topic T --run R --count N [--batch B] [--seconds S [--stop-file F]] [--key K]
           produces N messages (or keeps going for S seconds, or until the file F exists)
           with one idempotent producer;
           values are "R:<n>", keys "key-<n % 97>" (or K for every message). Prints which
           values were acknowledged (with partition, offset and message ID) and which batches
           failed (outcome unknown).
  values   --topic T --prefix P
           every stored value starting with P, with its partition and offset.
  digest   --topic T
           message count per partition and a SHA-256 over every record's partition, offset,
           key, tag, message ID, timestamp and value: equal digests mean equal answers.
  ends     --topic T
           the sum of the topic's partition end offsets: how many messages were written.
  lookups  --topic T --keys K,K --msg-ids I,I [--offsets P:O,P:O]
           answers by key (newest first), by message ID, by offset and by time range.
  groups   --topic T --caught-up G --lagging L --seconds S [--stop-file F]
           consumer groups for the monitoring test: every second G commits every partition's
           end and reads a few messages; L commits offset 1 once per partition (as soon as it
           holds a message) and nothing after, so its lag grows while messages come in.
           Prints how many rounds it made.
  files    every node's files and their states (unsealed, compacted, uploaded).
  cluster  the routing table as every node serves it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from typing import Any

from storage_node.client import Client
from storage_node.errors import MsgStoreError

PAGE = 5000


def _client(args: argparse.Namespace) -> Client:
    endpoint = args.endpoint or os.environ["MSGSTORE_ENDPOINT"]
    token = os.environ.get("MSGSTORE_TOKEN") or None
    # Enough retries to ride out a node restart (backoff is capped at 2 s per attempt).
    return Client(endpoint, token=token, producer_id=args.producer_id, max_retries=60)


def produce(args: argparse.Namespace) -> dict[str, Any]:
    client = _client(args)
    acked: list[list[Any]] = []
    unknown: list[str] = []
    errors: list[str] = []
    deadline = time.monotonic() + args.seconds if args.seconds else None
    n = 0
    while (deadline is None and n < args.count) or (deadline and time.monotonic() < deadline):
        if args.stop_file and os.path.exists(args.stop_file):
            break
        size = args.batch if deadline else min(args.batch, args.count - n)
        values = [f"{args.run}:{i}" for i in range(n, n + size)]
        batch = [
            {"key": args.key or f"key-{i % 97}", "value": v}
            for i, v in zip(range(n, n + size), values, strict=True)
        ]
        n += size
        try:
            results = client.produce(args.topic, batch)
        except MsgStoreError as exc:
            # Not acknowledged: it may or may not have been written. Never sent again, so
            # it can appear at most once.
            unknown.extend(values)
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            continue
        for value, res in zip(values, results, strict=True):
            acked.append([value, res["partition"], res["offset"], res["msg_id"]])
        if args.pause_ms:
            time.sleep(args.pause_ms / 1000)
    client.close()
    return {"acked": acked, "unknown": unknown, "errors": errors}


def _partitions(client: Client, topic: str) -> int:
    client.refresh_routing()
    count = client.routing.partitions(topic)
    if count is None:
        raise SystemExit(f"topic {topic!r} is not in the routing table")
    return count


def _rows(client: Client, topic: str, partition: int) -> Any:
    offset = 0
    while True:
        cols = client.read_columns(topic, partition, offset, max_messages=PAGE)
        rows = cols.to_rows(topic)
        if not rows:
            return
        yield from rows
        offset = rows[-1]["offset"] + 1


def values(args: argparse.Namespace) -> dict[str, Any]:
    client = _client(args)
    prefix = args.prefix.encode()
    found: list[list[Any]] = []
    for partition in range(_partitions(client, args.topic)):
        for row in _rows(client, args.topic, partition):
            if row["value"].startswith(prefix):
                found.append([row["value"].decode(), partition, row["offset"]])
    return {"values": found}


def digest(args: argparse.Namespace) -> dict[str, Any]:
    client = _client(args)
    counts: dict[str, int] = {}
    total = hashlib.sha256()
    for partition in range(_partitions(client, args.topic)):
        count = 0
        for row in _rows(client, args.topic, partition):
            count += 1
            fields = (
                row["partition"],
                row["offset"],
                row["key"],
                row["tag"],
                row["msg_id"],
                row["timestamp"],
            )
            total.update(json.dumps(fields).encode())
            total.update(row["value"])
        counts[str(partition)] = count
    return {"counts": counts, "total": sum(counts.values()), "sha256": total.hexdigest()}


def ends(args: argparse.Namespace) -> dict[str, Any]:
    info = _client(args).describe_topic(args.topic)
    return {"total": sum(int(p["next_offset"]) for p in info["partition_offsets"])}


def lookups(args: argparse.Namespace) -> dict[str, Any]:
    client = _client(args)
    out: dict[str, Any] = {"by_key": {}, "by_id": {}, "by_offset": {}, "by_time": {}}
    for key in filter(None, args.keys.split(",")):
        got = client.lookup_key(args.topic, key, max_count=1000)
        out["by_key"][key] = [m.get("msg_id") for m in got["messages"]]
    for msg_id in filter(None, args.msg_ids.split(",")):
        got = client.get_message(msg_id)
        out["by_id"][msg_id] = {k: got.get(k) for k in ("partition", "offset", "key", "value")}
    for spec in filter(None, args.offsets.split(",")):
        partition, offset = (int(x) for x in spec.split(":"))
        page = client.read(args.topic, partition, offset, max_messages=3)
        out["by_offset"][spec] = [
            (m["offset"], m.get("key"), m.get("msg_id")) for m in page["messages"]
        ]
    # By time (store time): partition 0's messages stored in the middle third of its span.
    rows = list(_rows(client, args.topic, 0))
    if rows:
        stamps = sorted(r["store_timestamp"] for r in rows)
        lo, hi = stamps[len(stamps) // 3], stamps[2 * len(stamps) // 3]
        page = client.read(args.topic, 0, None, max_messages=10000, start_time=lo, end_time=hi)
        expected = sorted(r["offset"] for r in rows if lo <= r["store_timestamp"] <= hi)
        out["by_time"] = {
            "begin": lo,
            "end": hi,
            "offsets": [m["offset"] for m in page["messages"]],
            "expected": expected[:10000],
        }
    return out


def groups(args: argparse.Namespace) -> dict[str, Any]:
    client = _client(args)
    lagging: set[int] = set()  # partitions where L has committed (once it holds a message)
    deadline = time.monotonic() + args.seconds
    rounds = 0
    while time.monotonic() < deadline:
        if args.stop_file and os.path.exists(args.stop_file):
            break
        try:
            for p in client.describe_topic(args.topic)["partition_offsets"]:
                partition, end = p["partition"], p["next_offset"]
                client.commit_offset(args.caught_up, args.topic, partition, end)
                if partition not in lagging and end >= 1:
                    client.commit_offset(args.lagging, args.topic, partition, 1)
                    lagging.add(partition)
            client.read(args.topic, 0, 0, max_messages=10)
            rounds += 1
        except MsgStoreError:
            pass  # a node is down on purpose part of the time
        time.sleep(1)
    client.close()
    return {"rounds": rounds, "lagging_partitions": sorted(lagging)}


def files(args: argparse.Namespace) -> dict[str, Any]:
    return _client(args).files()


def cluster(args: argparse.Namespace) -> dict[str, Any]:
    """The routing table as every node of the table serves it."""
    return _client(args).each_node("GET", "/v1/cluster")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="workload")
    parser.add_argument("--endpoint", help="default: $MSGSTORE_ENDPOINT")
    parser.add_argument("--producer-id")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--topic", required=True)
    p.add_argument("--run", required=True)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--seconds", type=float, default=0.0)
    p.add_argument("--pause-ms", type=float, default=0.0)
    p.add_argument("--stop-file", help="with --seconds: stop early once this file exists")
    p.add_argument("--key", help='the key of every message (default: "key-<n %% 97>")')
    p.set_defaults(func=produce)
    v = sub.add_parser("values")
    v.add_argument("--topic", required=True)
    v.add_argument("--prefix", required=True)
    v.set_defaults(func=values)
    d = sub.add_parser("digest")
    d.add_argument("--topic", required=True)
    d.set_defaults(func=digest)
    e = sub.add_parser("ends")
    e.add_argument("--topic", required=True)
    e.set_defaults(func=ends)
    lk = sub.add_parser("lookups")
    lk.add_argument("--topic", required=True)
    lk.add_argument("--keys", default="")
    lk.add_argument("--msg-ids", default="")
    lk.add_argument("--offsets", default="")
    lk.set_defaults(func=lookups)
    g = sub.add_parser("groups")
    g.add_argument("--topic", required=True)
    g.add_argument("--caught-up", required=True)
    g.add_argument("--lagging", required=True)
    g.add_argument("--seconds", type=float, required=True)
    g.add_argument("--stop-file")
    g.set_defaults(func=groups)
    sub.add_parser("files").set_defaults(func=files)
    sub.add_parser("cluster").set_defaults(func=cluster)
    args = parser.parse_args(argv)
    json.dump(args.func(args), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
