"""Where each message of a columns produce went (``Client.produce_columns``' answer)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from storage_node.wire.append_answer import AppendAnswer


@dataclass
class Produced:
    """Where each message of a columns produce went, in the caller's row order."""

    partitions: np.ndarray  # int64
    offsets: np.ndarray  # int64
    msg_ids: list[str]

    def __len__(self) -> int:
        return len(self.offsets)

    @classmethod
    def assemble(cls, count: int, parts: list[tuple[np.ndarray, AppendAnswer]]) -> Produced:
        partitions = np.empty(count, np.int64)
        offsets = np.empty(count, np.int64)
        ids: list[str] = [""] * count
        if (
            len(parts) == 1
            and len(parts[0][0]) == count
            and (parts[0][0] == np.arange(count)).all()
        ):
            answer = parts[0][1]
            return cls(answer.partitions, answer.offsets, answer.msg_ids)
        for rows, answer in parts:
            partitions[rows] = answer.partitions
            offsets[rows] = answer.offsets
            lo = int(rows[0]) if len(rows) else 0
            if len(rows) and int(rows[-1]) - lo + 1 == len(rows) and (np.diff(rows) == 1).all():
                ids[lo : lo + len(rows)] = answer.msg_ids  # a run of rows (one owner)
                continue
            for row, msg_id in zip(rows.tolist(), answer.msg_ids, strict=True):
                ids[row] = msg_id
        return cls(partitions, offsets, ids)

    def to_rows(self) -> list[dict[str, Any]]:
        """One {"partition", "offset", "msg_id"} per message, as ``produce`` answers."""
        return [
            {"partition": p, "offset": o, "msg_id": i}
            for p, o, i in zip(
                self.partitions.tolist(), self.offsets.tolist(), self.msg_ids, strict=True
            )
        ]
