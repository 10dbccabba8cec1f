"""The binary append answer codec: round trip and malformed bodies (no node; the live
node answering it is tests/integration/node/test_append_answer.py)."""

from __future__ import annotations

import numpy as np
import pytest

from storage_node.store import AppendColumns
from storage_node.wire.append_answer import (
    HEADER,
    MAGIC,
    decode_append_answer,
    encode_append_answer,
)
from storage_node.wire.read_answer import MalformedAnswer


def test_round_trip_keeps_every_result() -> None:
    ids = [f"orders-0a000001-491234-{i}" for i in range(98, 105)]
    done = AppendColumns([0, 2, 1, 0, 2, 1, 0], [5, 9, 1, 6, 10, 2, 7], ids)
    answer = decode_append_answer(encode_append_answer(done))
    assert answer.partitions.tolist() == done.partitions
    assert answer.offsets.tolist() == done.offsets
    assert answer.msg_ids == ids and len(answer) == 7
    empty = decode_append_answer(encode_append_answer(AppendColumns([], [], [])))
    assert len(empty) == 0 and empty.msg_ids == []


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"XXXX" + bytes(4),
        HEADER.pack(MAGIC, 2) + bytes(10),  # truncated columns
        HEADER.pack(MAGIC, 1) + np.array([0], "<i4").tobytes() + np.array([3], "<i8").tobytes()
        + np.array([5], "<i4").tobytes() + b"abc",  # IDs shorter than their lengths
        HEADER.pack(MAGIC, 1) + np.array([-1], "<i4").tobytes() + np.array([3], "<i8").tobytes()
        + np.array([1], "<i4").tobytes() + b"a",  # negative partition
        HEADER.pack(MAGIC, 1) + np.array([0], "<i4").tobytes() + np.array([3], "<i8").tobytes()
        + np.array([2], "<i4").tobytes() + "é".encode(),  # not ASCII
    ],
)  # fmt: skip
def test_malformed_answers_are_refused(body: bytes) -> None:
    with pytest.raises(MalformedAnswer):
        decode_append_answer(body)
