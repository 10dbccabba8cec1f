"""Where a consumer of a topic stands and what it asks next, without I/O: the blocking
``Consumer`` and the asyncio ``AsyncConsumer`` both run it (through ``ClientCore``), so
their paging, end and resume rules exist once."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from storage_node.client.fetch import FetchAnswer
from storage_node.errors import InvalidArgument
from storage_node.wire.read_answer import ReadColumns


class ConsumerState:
    """A consumer's positions. ``positions`` continue after the pages handed out so far (what
    a group would commit); fetch positions continue after the pages fetched (the next fetch
    is on the wire before the caller has the last page). Without ``follow`` each partition
    is read to its end as it was when the consumer started (or to ``ends``)."""

    def __init__(
        self,
        topic: str,
        partitions: Iterable[int] | None,
        offsets: Mapping[int, int] | None,
        ends: Mapping[int, int] | None,
        page: int,
        follow: bool,
        wait_ms: int,
        tag: str | None,
        max_bytes: int,
    ) -> None:
        if page < 1:
            raise InvalidArgument(f"page must be at least 1, got {page}")
        if ends is not None and follow:
            raise InvalidArgument("a following consumer has no end offsets")
        self.topic = topic
        self.page = page
        self.follow = follow
        self.wait_ms = wait_ms
        self.tag = tag
        self.max_bytes = max_bytes
        self._given = dict(offsets or {})
        self._chosen = None if partitions is None else list(partitions)
        self._stop = dict(ends) if ends is not None else None
        self.positions: dict[int, int] = {}
        self._ends: dict[int, int] = {}
        self._fetch_positions: dict[int, int] = {}
        self.placed = False
        chosen, stop = self._chosen, self._stop
        if chosen is not None and stop is not None and set(chosen) <= set(self._given) & set(stop):
            # a planned range (a Spark task): no need to ask the cluster where things are
            self.positions = {p: int(self._given[p]) for p in chosen}
            self._ends = {p: int(stop[p]) for p in chosen}
            self._fetch_positions = dict(self.positions)
            self.placed = True

    def place(self, layout: Mapping[int, Mapping[str, Any]]) -> None:
        """Positions and ends from the topic's partition offsets (``describe_topic``)."""
        chosen = sorted(layout) if self._chosen is None else self._chosen
        missing = [p for p in chosen if p not in layout]
        if missing:
            raise InvalidArgument(f"topic {self.topic!r} has no partition {missing[0]}")
        given, stop = self._given, self._stop or {}
        self.positions = {p: int(given.get(p, layout[p]["first_offset"])) for p in chosen}
        self._ends = {p: int(stop.get(p, layout[p]["next_offset"])) for p in chosen}
        self._fetch_positions = dict(self.positions)
        self.placed = True

    def next_fetch(self) -> tuple[dict[int, int], int] | None:
        """({partition: offset}, page) of the next fetch; None when every range is read."""
        if self.follow:
            return dict(self._fetch_positions), self.page
        wanted = {p: o for p, o in self._fetch_positions.items() if o < self._ends[p]}
        if not wanted:
            return None
        # never more than the rest of each partition's range
        rest = max(e - wanted[p] for p, e in self._ends.items() if p in wanted)
        return wanted, min(self.page, rest)

    def fetched(self, answer: FetchAnswer) -> None:
        """Move the fetch positions past an answer's pages."""
        for p, cols in answer.pages.items():
            if cols.next_offset is not None:
                self._fetch_positions[p] = cols.next_offset
            elif not self.follow:
                self._ends[p] = self._fetch_positions[p]
            if not len(cols) and not self.follow:
                self._ends[p] = min(self._ends[p], self._fetch_positions[p])

    def hand_out(self, answer: FetchAnswer) -> Iterator[ReadColumns]:
        """An answer's non-empty pages, ``positions`` moving past each as it is handed out."""
        for p, cols in answer.pages.items():
            if len(cols):
                self.positions[p] = int(cols.offsets[-1]) + 1
                yield cols
            if cols.next_offset is not None:
                self.positions[p] = max(self.positions[p], cols.next_offset)
