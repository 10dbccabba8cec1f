"""Leader epochs of one log (Kafka KIP-101): the position where each epoch's leader began.

A follower keeps the same history as its leader. A node that returns after a failover asks
the new leader where its own last epoch ended and truncates its log there, dropping the
un-replicated tail an old leader wrote before it was replaced.
"""

from __future__ import annotations

import json
import os

from storage_node.backend.files import atomic_write
from storage_node.errors import Fenced
from storage_node.formats.filenames import EPOCHS


class LeaderEpochs:
    """``[(epoch, start position), ...]`` in increasing order, persisted atomically."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, EPOCHS)
        self.entries: list[tuple[int, int]] = []
        if os.path.exists(self.path):
            with open(self.path, "rb") as fh:
                self.entries = [(int(e), int(p)) for e, p in json.loads(fh.read())]

    @property
    def latest(self) -> int:
        """The newest epoch this copy of the log knows (0: none yet)."""
        return self.entries[-1][0] if self.entries else 0

    def begin(self, epoch: int, position: int) -> None:
        """Record that ``epoch`` starts at ``position`` (no-op if it is known)."""
        if self.entries and epoch <= self.entries[-1][0]:
            return
        self.entries.append((epoch, position))
        self._save()

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """Take a leader's history (a follower's copy of it)."""
        if entries != self.entries:
            self.entries = list(entries)
            self._save()

    def end_of(self, epoch: int, log_end: int) -> int:
        """Where ``epoch`` ended in this log: the start of the next newer epoch, else the
        log end (``epoch`` is the current one)."""
        for e, start in self.entries:
            if e > epoch:
                return start
        return log_end

    def truncate(self, position: int) -> None:
        """Forget epochs that begin beyond ``position`` (after truncating the log there)."""
        kept = [(e, p) for e, p in self.entries if p <= position]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def _save(self) -> None:
        atomic_write(self.path, json.dumps(self.entries).encode())


def check_epoch(given: int, current: int, what: str) -> None:
    """Refuse a request made under an older epoch than ``current`` (409 ``fenced``)."""
    if given < current:
        raise Fenced(
            f"{what} carries leader epoch {given}, older than the current {current}",
            epoch=current,
        )
