"""A topic's messages stored in a time range, newest first, a page at a time: per
partition, the offsets of the range's ends (a read from a store time answers the first
offset at or after it), then a forward read of the last ``limit + 1`` offsets below the
page's upper end, merged by store time. The cursor of the next page is, per partition,
the oldest offset shown (or the upper end, when none of it was shown): store times grow
with offsets in a partition, so the pages neither skip nor repeat a message."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from storage_node.client import AsyncClient
from storage_node.console.views import Message, message_of
from storage_node.errors import InvalidArgument, MsgStoreError

MAX_TIME = 2**63 - 1


@dataclass(frozen=True)
class TimePage:
    messages: list[Message]  # newest first, at most the limit
    cursor: str | None  # the next page's ``before``; None when nothing older is in range
    unreachable: list[str]


def parse_cursor(text: str, partitions: list[int]) -> dict[int, int] | None:
    """``P:O,P:O``: the upper end (exclusive) of each partition's next page."""
    if not text:
        return None
    out: dict[int, int] = {}
    for part in text.split(","):
        p, _, o = part.partition(":")
        if not (p.isdigit() and o.isdigit()) or int(p) not in partitions:
            raise InvalidArgument(f"before must be PARTITION:OFFSET,..., got {text!r}")
        out[int(p)] = int(o)
    return out


async def offset_at(client: AsyncClient, topic: str, partition: int, when: int) -> int:
    """The first offset stored at or after ``when`` (the partition's next offset when
    none is)."""
    doc = await client.read(topic, partition, max_messages=1, start_time=when)
    return int(doc["messages"][0]["offset"] if doc["messages"] else doc["next_offset"])


async def _partition(
    client: AsyncClient, topic: str, p: int, begin: int, end: int, limit: int, upper: int | None
) -> tuple[list[Message], int, bool]:
    """The newest ``limit + 1`` messages of partition ``p`` in [begin, end] below
    ``upper``; the page's upper end, and whether older ones in range remain."""
    low = await offset_at(client, topic, p, begin)
    if upper is None:
        upper = await offset_at(client, topic, p, min(end + 1, MAX_TIME))
    start = max(low, upper - (limit + 1))
    if start >= upper:
        return [], upper, False
    doc = await client.read(topic, p, start, max_messages=upper - start)
    found = [message_of(m) for m in doc["messages"] if m["offset"] < upper]
    found = [m for m in found if begin <= m.store_timestamp <= end]
    return found, upper, start > low


async def newest_first(
    client: AsyncClient,
    topic: str,
    partitions: list[int],
    begin: int,
    end: int,
    limit: int,
    cursor: dict[int, int] | None,
) -> TimePage:
    async def one(p: int) -> tuple[list[Message], int, bool] | MsgStoreError:
        try:
            upper = cursor.get(p, 0) if cursor is not None else None
            return await _partition(client, topic, p, begin, end, limit, upper)
        except MsgStoreError as exc:
            if exc.status != 503:
                raise
            return exc

    answers = await asyncio.gather(*(one(p) for p in partitions))
    unreachable: list[str] = []
    merged: list[Message] = []
    uppers: dict[int, int] = {}
    older = False
    for p, answer in zip(partitions, answers, strict=True):
        if isinstance(answer, MsgStoreError):
            owner = client.routing.owner(topic, p)
            name = owner[0] if owner else f"partition {p}"
            if name not in unreachable:
                unreachable.append(name)
            continue
        found, uppers[p], rest = answer
        merged += found
        older = older or rest
    merged.sort(key=lambda m: (m.store_timestamp, m.partition, m.offset), reverse=True)
    shown = merged[:limit]
    if not (older or len(merged) > limit):
        return TimePage(shown, None, unreachable)
    for m in shown:
        uppers[m.partition] = min(uppers[m.partition], m.offset)
    cursor_text = ",".join(f"{p}:{o}" for p, o in sorted(uppers.items()))
    return TimePage(shown, cursor_text, unreachable)
