"""The bytes each partition holds, in a topic's description (`GET /v1/topics/{topic}`,
`stored_bytes`): 0 for an empty partition, grown by exactly what each message adds, and the
same after a clean restart, a crash (the queue index is summed again from its files) and a
compaction, on a real node."""

from __future__ import annotations

import itertools
import random
import signal
from typing import Any

import requests

TOPIC = "sized"
SEQ = itertools.count(10)  # message IDs of one length (up to 99)


def sizes(node: Any) -> list[int]:
    doc = requests.get(node.url(f"/v1/topics/{TOPIC}"), timeout=30).json()
    return [p["stored_bytes"] for p in doc["partition_offsets"]]


def produce(node: Any, messages: list[dict[str, Any]]) -> None:
    resp = requests.post(
        node.url(f"/v1/topics/{TOPIC}/messages"), json={"messages": messages}, timeout=60
    )
    assert resp.status_code == 200, resp.text


def message(partition: int, body: int, **more: Any) -> dict[str, Any]:
    """A message whose key, tag and ID lengths are those of every other: only the body's
    length (and headers, when given) differ."""
    return {
        "key": "order-1",
        "tag": "paid",
        "msg_id": f"shop-7f000001-1-{next(SEQ)}",
        "partition": partition,
        "value": "x" * body,
        **more,
    }


def test_partition_sizes_count_every_messages_bytes_and_survive_restarts(node_factory):
    node = node_factory("sized")
    created = requests.post(node.url("/v1/topics"), json={"name": TOPIC, "partitions": 3})
    assert created.status_code == 201, created.text
    assert sizes(node) == [0, 0, 0]

    produce(node, [message(1, 100)])
    one = sizes(node)
    produce(node, [message(1, 1100)])
    two = sizes(node)
    assert one[0] == one[2] == two[0] == two[2] == 0
    base = one[1] - 100  # the row header, key, tag and ID of such a message
    assert base > len("order-1") + len("paid") + len("shop-7f000001-1-10")
    assert two[1] - one[1] == base + 1100  # the body's bytes exactly, nothing else

    produce(node, [message(2, 100, headers=[["trace", "t" * 50]])])
    assert sizes(node)[2] > base + 100 + 50  # headers are stored bytes too

    # a batch to partition 0: the sum of what each message adds
    rnd = random.Random(7)
    bodies = [rnd.randint(0, 3000) for _ in range(9)]
    produce(node, [message(0, b) for b in bodies])
    held = sizes(node)
    assert held[0] == sum(base + b for b in bodies)

    node.stop()  # a clean stop: the sums are read again from the index files
    node.start()
    assert sizes(node) == held
    produce(node, [message(0, 10)])  # kept up to date after being summed from the files
    held[0] += base + 10
    assert sizes(node) == held

    node.stop(signal.SIGKILL)  # a crash: recovery rebuilds the index past the checkpoint
    node.start()
    produce(node, [message(1, 20)])  # (before the first describe: in the files' sum)
    held[1] += base + 20
    assert sizes(node) == held

    assert requests.post(node.url("/v1/admin/compact"), timeout=120).status_code == 200
    assert sizes(node) == held  # compressed files hold the same records
