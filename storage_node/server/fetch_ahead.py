"""Read-ahead for consumers: the next page of a binary fetch is read while this one travels.

A consumer asks next for the pages right after the ones it just got (its positions advance
with each answer). So when every page of a binary fetch stopped at its limits, not at the
end of its partition, the node starts reading the following pages at once, in the read
pool, and keeps the answer for a fetch with exactly those positions and limits. The node
then reads page N+1 while the kernel sends page N and the consumer decodes it, instead of
after the consumer asked (a scan costs the larger of the two, not their sum).

A kept answer is served only where it equals a fresh read: written offsets do not change,
and a page that stopped at the end of its partition is served only while that end has not
moved (``Ahead.short``: else it is read anew, with the messages appended since). Deleting
the topic changes its incarnation (the log position its records start from), which is part
of the key, so an answer of the old topic is never served for a new one. Entries are few,
small and short-lived: at most ``CAPACITY`` answers of at most ``MAX_BODY`` bytes, each
dropped after ``TTL_S`` (a consumer that went away) or when taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

CAPACITY = 4  # concurrent scanning consumers served ahead
MAX_BODY = 32 << 20  # larger answers are not read ahead (memory)
TTL_S = 5.0

Key = tuple[object, ...]


@dataclass(frozen=True)
class Ahead:
    """A fetch answer: the partitions whose page stopped at the partition's end (not at
    its limits), the pages' next offsets, and the binary body."""

    short: tuple[int, ...]
    next_offsets: dict[int, int]
    found: int
    body: bytes


def fetch_key(
    store_id: int,
    topic: str,
    incarnation: int,
    positions: Mapping[int, int | None],
    limits: tuple[int, int, str | None],
) -> Key:
    return (store_id, topic, incarnation, tuple(sorted(positions.items())), limits)


class FetchAhead:
    """The answers read ahead, by fetch key (event loop only)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[Key, tuple[float, asyncio.Future[Ahead]]] = OrderedDict()

    def take(self, key: Key) -> asyncio.Future[Ahead] | None:
        """The answer read ahead for ``key`` (perhaps still being read), once."""
        self._expire()
        got = self._kept.pop(key, None)
        return None if got is None else got[1]

    def start(self, key: Key, read: Callable[[], Awaitable[Ahead]]) -> None:
        """Read the answer for ``key`` now, for the fetch expected next."""
        self._expire()
        if key in self._kept:
            return
        while len(self._kept) >= CAPACITY:
            _key, (_at, old) = self._kept.popitem(last=False)
            _drop(old)
        task = asyncio.ensure_future(read())
        task.add_done_callback(_quiet)
        self._kept[key] = (time.monotonic(), task)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._kept:
            key, (at, fut) = next(iter(self._kept.items()))
            if now - at <= TTL_S:
                break
            del self._kept[key]
            _drop(fut)

    def __len__(self) -> int:
        return len(self._kept)


def worth_reading_ahead(answer: Ahead) -> bool:
    """Every page stopped at its limits: the next pages hold messages already written."""
    return not answer.short and answer.found > 0 and len(answer.body) <= MAX_BODY


def still_fresh(answer: Ahead, end_of: Callable[[int], int]) -> bool:
    """What a fresh read would answer: no partition whose page reached its end grew since."""
    return all(end_of(p) == answer.next_offsets[p] for p in answer.short)


def _drop(fut: asyncio.Future[Ahead]) -> None:
    if not fut.done():
        fut.cancel()  # a read already running in the pool finishes; its answer is dropped


def _quiet(fut: asyncio.Future[Ahead]) -> None:
    """A failed read-ahead is nobody's error: the fetch that would take it reads anew."""
    with contextlib.suppress(asyncio.CancelledError, Exception):
        fut.exception()
