"""A live node answering in the binary append answer when the producer asks for it (JSON
otherwise); the codec itself is tests/unit/wire/test_append_answer_codec.py."""

from __future__ import annotations

import requests

from storage_node.wire.append_answer import decode_append_answer
from storage_node.wire.batch_codec import CONTENT_TYPE, encode_batch


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
