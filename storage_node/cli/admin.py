"""``msgstore group ...`` (list consumer groups, show their lag, move their positions) and
``msgstore topic delete|alter`` (delete a topic, add partitions to one)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from storage_node.errors import InvalidArgument


def _spans(client: Any, topic: str) -> dict[int, tuple[int | None, int | None, str]]:
    info = client.describe_topic(topic)
    return {
        p["partition"]: (p["first_offset"], p["next_offset"], p["owner"])
        for p in info["partition_offsets"]
    }


def group_rows(client: Any, group: str, topic: str | None) -> list[dict[str, Any]]:
    """One row per partition the group committed in: committed, first, next offset, lag."""
    committed = client.committed_offsets(group, topic)
    rows = []
    for t in sorted(committed):
        spans = _spans(client, t)
        for p in sorted(spans):
            first, nxt, owner = spans[p]
            offset = committed[t].get(p)
            lag = None
            if nxt is not None:
                lag = nxt - max(offset if offset is not None else 0, first or 0)
            rows.append(
                {
                    "topic": t,
                    "partition": p,
                    "owner": owner,
                    "committed": offset,
                    "first_offset": first,
                    "next_offset": nxt,
                    "lag": lag,
                }
            )
    return rows


def cmd_group_list(args: argparse.Namespace) -> int:
    from storage_node.cli.common import client_of

    with client_of(args) as client:
        for name in client.list_groups():
            print(name)
    return 0


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def cmd_group_describe(args: argparse.Namespace) -> int:
    from storage_node.cli.common import client_of

    with client_of(args) as client:
        rows = group_rows(client, args.group, args.topic)
    if args.json:
        print(json.dumps({"group": args.group, "partitions": rows}, indent=2))
        return 0
    if not rows:
        print(f"group {args.group!r} has no committed offsets", file=sys.stderr)
        return 0
    print(f"{'TOPIC':<20} {'PART':>4} {'COMMITTED':>10} {'FIRST':>10} {'NEXT':>10} {'LAG':>8}")
    for r in rows:
        print(
            f"{r['topic']:<20} {r['partition']:>4} {_cell(r['committed']):>10} "
            f"{_cell(r['first_offset']):>10} {_cell(r['next_offset']):>10} {_cell(r['lag']):>8}"
        )
    unknown = [r["partition"] for r in rows if r["next_offset"] is None]
    if unknown:
        print(f"(partitions {unknown}: owner unreachable, lag unknown)", file=sys.stderr)
    total = sum(r["lag"] or 0 for r in rows)
    print(f"total lag: {total}")
    return 0


def cmd_group_reset(args: argparse.Namespace) -> int:
    from storage_node.cli.common import UsageError, client_of
    from storage_node.cli.consume import parse_time

    targets = [
        args.to_earliest,
        args.to_latest,
        args.to_datetime is not None,
        args.shift_by is not None,
        args.to_offset is not None,
    ]
    if sum(targets) != 1:
        raise UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --shift-by, --to-offset"
        )
    if args.to_offset is not None and len(args.partition or []) != 1:
        raise UsageError("--to-offset needs exactly one --partition")
    when = parse_time(args.to_datetime, "--to-datetime") if args.to_datetime else None
    with client_of(args) as client:
        spans = _spans(client, args.topic)
        committed = client.committed_offsets(args.group, args.topic).get(args.topic, {})
        partitions = args.partition or sorted(spans)
        bad = [p for p in partitions if p not in spans]
        if bad:
            raise InvalidArgument(f"topic {args.topic!r} has no partition {bad[0]}")
        down = [p for p in partitions if spans[p][1] is None]
        if down:
            raise InvalidArgument(
                f"partitions {down} are unreachable (their owner does not answer); "
                "nothing was changed"
            )
        plan = []
        for p in partitions:
            first, nxt, _owner = spans[p]
            assert first is not None and nxt is not None
            current = committed.get(p, first)
            if args.to_earliest:
                target = first
            elif args.to_latest:
                target = nxt
            elif when is not None:
                page = client.read(args.topic, p, start_time=when, max_messages=1)
                target = page["messages"][0]["offset"] if page["messages"] else page["next_offset"]
            elif args.shift_by is not None:
                target = current + args.shift_by
            else:
                target = args.to_offset
            plan.append((p, current, min(max(target, first), nxt)))
        for p, current, target in plan:
            if not args.dry_run:
                client.commit_offset(args.group, args.topic, p, target)
            print(f"{args.topic}\t{p}\t{current} -> {target}")
    if args.dry_run:
        print("(dry run: nothing committed)", file=sys.stderr)
    return 0


def register_group(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("group", help="consumer groups: list, describe (lag), reset")
    gsub = p.add_subparsers(dest="group_command", required=True)
    lst = gsub.add_parser("list", parents=[parent], help="every group with committed offsets")
    lst.set_defaults(func=cmd_group_list)
    desc = gsub.add_parser(
        "describe", parents=[parent], help="committed offset, end and lag per partition"
    )
    desc.add_argument("group", help="consumer group name")
    desc.add_argument("--topic", help="only this topic")
    desc.add_argument("--json", action="store_true", help="print JSON instead of a table")
    desc.set_defaults(func=cmd_group_describe)
    reset = gsub.add_parser(
        "reset",
        parents=[parent],
        help="move a group's position in a topic",
        description="Commit new positions for a group; targets outside a partition's kept "
        "range are clamped to it. Stop the group's consumers first.",
    )
    reset.add_argument("group", help="consumer group name")
    reset.add_argument("--topic", required=True, help="the topic whose positions move")
    reset.add_argument(
        "--partition", type=int, action="append", help="only this partition (repeatable)"
    )
    reset.add_argument("--to-earliest", action="store_true", help="to the first kept message")
    reset.add_argument("--to-latest", action="store_true", help="to the end (skip everything)")
    reset.add_argument(
        "--to-datetime",
        metavar="TIME",
        help="to the first message stored at or after TIME (epoch ms or ISO)",
    )
    reset.add_argument(
        "--shift-by", type=int, metavar="N", help="move by N (negative: re-read N messages)"
    )
    reset.add_argument("--to-offset", type=int, metavar="N", help="to offset N (one --partition)")
    reset.add_argument("--dry-run", action="store_true", help="print the plan, commit nothing")
    reset.set_defaults(func=cmd_group_reset)


def _note_pending(doc: dict[str, Any], what: str) -> None:
    for node, why in sorted((doc.get("pending_nodes") or {}).items()):
        print(
            f"note: {node} did not answer ({why}); it {what} when it next reads the routing table",
            file=sys.stderr,
        )


def cmd_topic_delete(args: argparse.Namespace) -> int:
    from storage_node.cli.common import client_of, print_json

    with client_of(args) as client:
        doc = client.delete_topic(args.name)
    print_json(doc)
    _note_pending(doc, "deletes its copy")
    return 0


def cmd_topic_alter(args: argparse.Namespace) -> int:
    from storage_node.cli.common import client_of, print_json

    with client_of(args) as client:
        doc = client.add_partitions(args.name, args.partitions)
    print_json(doc)
    if doc["previous_partitions"] == doc["partitions"]:
        print(f"note: {args.name!r} already has {doc['partitions']} partitions", file=sys.stderr)
    _note_pending(doc, "adds the partitions")
    for node, why in sorted((doc.get("skipped_nodes") or {}).items()):
        print(f"note: no new partition placed on {node}: it is not ready ({why})", file=sys.stderr)
    return 0


def register_topic_admin(tsub: Any, parent: argparse.ArgumentParser) -> None:
    """``topic delete`` and ``topic alter`` (kafka-topics --delete / --alter)."""
    delete = tsub.add_parser(
        "delete",
        parents=[parent],
        help="delete a topic and its messages",
        description="Delete a topic on every node: it leaves the listings, its messages are "
        "no longer found by offset, key, message ID or time, and consumer groups' offsets for "
        "it are dropped. A topic created again under the name starts empty at offset 0. The "
        "disk space is reclaimed when retention or compaction removes the old segments.",
    )
    delete.add_argument("name", help="topic name")
    delete.set_defaults(func=cmd_topic_delete)
    alter = tsub.add_parser(
        "alter",
        parents=[parent],
        help="add partitions to a topic",
        description="Raise a topic's partition count (it never goes down). New partitions "
        "start at offset 0; existing messages stay where they are. Keyed messages produced "
        "afterwards go to key_hash(key) % the new count, so a key's new messages may land in "
        "another partition than its old ones (as in Kafka); lookups by key still find both.",
    )
    alter.add_argument("name", help="topic name")
    alter.add_argument(
        "--partitions", type=int, required=True, help="the new partition count (total)"
    )
    alter.set_defaults(func=cmd_topic_alter)
