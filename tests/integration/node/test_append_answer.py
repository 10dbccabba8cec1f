"""The binary append answer: codec round trip, malformed bodies, and a live node answering
it when the producer asks for it (JSON otherwise)."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from storage_node.store import AppendColumns
from storage_node.wire.append_answer import (
    HEADER,
    MAGIC,
    decode_append_answer,
    encode_append_answer,
)
from storage_node.wire.batch_codec import CONTENT_TYPE, MalformedAnswer, encode_batch


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


def test_node_answers_in_columns_when_asked(node) -> None:
    url = node.url("/v1/topics")
    assert requests.post(url, json={"name": "answers", "partitions": 3}).status_code == 201
    values = [b"v%d" % i for i in range(300)]
    keys = [f"k{i % 11}" for i in range(300)]
    post = node.url("/v1/topics/answers/messages")
    binary = requests.post(
        post,
        data=encode_batch(values, keys=keys, producer_id="p", sequence=1),
        headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE},
    )
    assert binary.status_code == 200 and binary.headers["Content-Type"] == CONTENT_TYPE
    answer = decode_append_answer(binary.content)
    # a retry of the same batch asking for JSON gets the same results, written once
    again = requests.post(
        post,
        data=encode_batch(values, keys=keys, producer_id="p", sequence=1),
        headers={"Content-Type": CONTENT_TYPE},
    ).json()
    assert again["partitions"] == answer.partitions.tolist()
    assert again["offsets"] == answer.offsets.tolist()
    assert again["msg_ids"] == answer.msg_ids
    for i in (0, 150, 299):
        got = requests.get(node.url(f"/v1/messages/{answer.msg_ids[i]}")).json()
        assert got["offset"] == answer.offsets[i] and got["value"] == values[i].decode()
