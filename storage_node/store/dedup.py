"""Idempotent batches: the first answer of every recent (producer_id, sequence).

The records of a batch carry its producer id and sequence, so the table is rebuilt from the
log after a crash; the checkpoint also saves it to ``producers.json``. ``last`` keeps, per
producer id, the highest sequence remembered and its batch's record count, so a front end
that requires gap-free sequences (Kafka's idempotent producers) can check the next one; a
producer whose batches were all forgotten has no entry.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict

from storage_node.backend.files import atomic_write
from storage_node.store.types import AppendColumns

MAX_BATCHES = 100_000
MAX_RESULTS = 1_000_000  # bound memory and the size of producers.json


def _count(found: AppendColumns | list[list]) -> int:
    return len(found[0]) if isinstance(found, list) else len(found)


class DedupTable:
    def __init__(self, path: str) -> None:
        self.path = path
        # an answer is AppendColumns, or during replay a [partitions, offsets, ids] triple
        self.batches: OrderedDict[tuple[str, int], AppendColumns | list[list]] = OrderedDict()
        self.results = 0
        self.dirty = False
        self._replayed: set[tuple[str, int]] = set()  # batches rebuilt by the current replay
        self.last: dict[str, int] = {}  # producer id -> highest sequence remembered
        if os.path.exists(path):
            with open(path, "rb") as fh:
                for pid, seq, results in json.loads(fh.read()):
                    self.batches[(pid, seq)] = [list(c) for c in zip(*results, strict=True)]
                    self.results += len(results)
                    self._note(pid, seq)

    def _note(self, producer_id: str, sequence: int) -> None:
        if sequence >= self.last.get(producer_id, -1):
            self.last[producer_id] = sequence

    def last_batch(self, producer_id: str) -> tuple[int, int] | None:
        """(sequence, record count) of the producer's highest remembered batch."""
        seq = self.last.get(producer_id)
        if seq is None:
            return None
        found = self.batches.get((producer_id, seq))
        return None if found is None else (seq, _count(found))

    def get(self, producer_id: str, sequence: int) -> AppendColumns | None:
        found = self.batches.get((producer_id, sequence))
        if isinstance(found, list):
            found = self.batches[(producer_id, sequence)] = AppendColumns(
                found[0], found[1], found[2]
            )
        return found

    def put(self, producer_id: str, sequence: int, results: AppendColumns) -> None:
        self.batches[(producer_id, sequence)] = results
        self.results += len(results)
        self.dirty = True
        self._note(producer_id, sequence)
        while len(self.batches) > MAX_BATCHES or self.results > MAX_RESULTS:
            (pid, seq), gone = self.batches.popitem(last=False)
            self.results -= _count(gone)
            if self.last.get(pid) == seq:
                del self.last[pid]

    def extend(
        self, producer_id: str, sequence: int, partition: int, offset: int, msg_id: str
    ) -> None:
        """Replay: add one record's result to its batch.

        A batch's answer is rebuilt from its records alone: the saved table may already hold
        it (saved just before a crash that left the previous checkpoint, so the log is
        replayed from before that batch), and adding its records again would double it."""
        key = (producer_id, sequence)
        found = self.batches.get(key)
        if key not in self._replayed:
            self._replayed.add(key)
            if found is not None:
                self.results -= _count(found)
            found = self.batches[key] = [[], [], []]
        assert isinstance(found, list)  # a replayed batch stays a triple until the replay ends
        found[0].append(partition)
        found[1].append(offset)
        found[2].append(msg_id)
        self.results += 1
        self.dirty = True
        self._note(producer_id, sequence)

    def end_replay(self) -> None:
        """Recovery is over: later answers come from appends."""
        self._replayed.clear()

    def snapshot(self) -> bytes | None:
        """The table as JSON, or None when nothing changed since the last snapshot."""
        if not self.dirty and os.path.exists(self.path):
            return None
        self.dirty = False
        rows = []
        for (p, s), found in self.batches.items():
            columns = (
                found
                if isinstance(found, list)
                else [found.partitions, found.offsets, found.msg_ids]
            )
            rows.append([p, s, [list(r) for r in zip(*columns, strict=True)]])
        return json.dumps(rows).encode()

    def save(self, data: bytes | None) -> None:
        if data is not None:
            atomic_write(self.path, data)
