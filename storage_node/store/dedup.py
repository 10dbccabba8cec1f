"""Idempotent batches: the first answer of every recent (producer_id, sequence).

The records of a batch carry its producer id and sequence, so the table is rebuilt from the
log after a crash; the checkpoint also saves it to ``producers.json``.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict

from storage_node.backend.files import atomic_write
from storage_node.store.types import AppendResult

MAX_BATCHES = 100_000
MAX_RESULTS = 1_000_000  # bound memory and the size of producers.json


class DedupTable:
    def __init__(self, path: str) -> None:
        self.path = path
        self.batches: OrderedDict[tuple[str, int], list[AppendResult]] = OrderedDict()
        self.results = 0
        self.dirty = False
        if os.path.exists(path):
            with open(path, "rb") as fh:
                for pid, seq, results in json.loads(fh.read()):
                    self.batches[(pid, seq)] = [AppendResult(*r) for r in results]
                    self.results += len(results)

    def get(self, producer_id: str, sequence: int) -> list[AppendResult] | None:
        return self.batches.get((producer_id, sequence))

    def put(self, producer_id: str, sequence: int, results: list[AppendResult]) -> None:
        self.batches[(producer_id, sequence)] = results
        self.results += len(results)
        self.dirty = True
        while len(self.batches) > MAX_BATCHES or self.results > MAX_RESULTS:
            self.results -= len(self.batches.popitem(last=False)[1])

    def extend(self, producer_id: str, sequence: int, result: AppendResult) -> None:
        """Replay: add one record's result to its batch."""
        self.batches.setdefault((producer_id, sequence), []).append(result)
        self.results += 1
        self.dirty = True

    def snapshot(self) -> bytes | None:
        """The table as JSON, or None when nothing changed since the last snapshot."""
        if not self.dirty and os.path.exists(self.path):
            return None
        self.dirty = False
        rows = [
            [p, s, [[r.partition, r.offset, r.msg_id] for r in rs]]
            for (p, s), rs in self.batches.items()
        ]
        return json.dumps(rows).encode()

    def save(self, data: bytes | None) -> None:
        if data is not None:
            atomic_write(self.path, data)
