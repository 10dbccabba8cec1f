"""Long polls: an event per partition, set at its next append, so a read or fetch that
found nothing waits for new messages instead of asking again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class AppendEvents:
    def __init__(self) -> None:
        self._appended: dict[tuple[str, int], asyncio.Event] = {}

    def event(self, topic: str, partition: int) -> asyncio.Event:
        """An event set at the next append to the partition (take it before reading)."""
        key = (topic, partition)
        event = self._appended.get(key)
        if event is None:
            event = self._appended[key] = asyncio.Event()
        return event

    def notify(self, topic: str, partitions: Iterable[int]) -> None:
        """Wake the reads waiting on these partitions (called once a batch is stored)."""
        for p in set(int(p) for p in partitions):
            event = self._appended.pop((topic, p), None)
            if event is not None:
                event.set()
