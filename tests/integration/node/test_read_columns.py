"""Binary read answers from real node processes: content negotiation on the read and key
lookup routes, equality with the JSON answers, and the clients' columnar reads."""

from __future__ import annotations

import asyncio
import base64
import socket

import pytest
import requests

from storage_node.client import AsyncClient, Client
from storage_node.errors import InvalidArgument, UnknownTopic
from storage_node.wire.batch_codec import CONTENT_TYPE
from storage_node.wire.read_answer import decode_read_answer

BINARY = {"Accept": CONTENT_TYPE}


def json_value(doc: dict) -> bytes:
    if "value" in doc:
        return doc["value"].encode("utf-8")
    return base64.b64decode(doc["value_base64"])


def as_rows(docs: list[dict]) -> list[dict]:
    """JSON answer messages in the shape of ReadColumns.to_rows (value as bytes)."""
    out = []
    for d in docs:
        row = {k: v for k, v in d.items() if k not in ("value", "value_base64")}
        out.append({**row, "value": json_value(d)})
    return out


@pytest.fixture(scope="module")
def filled(node):
    """A topic with text, binary (non-UTF-8) and empty values, some keys and tags absent."""
    requests.post(node.url("/v1/topics"), json={"name": "cols", "partitions": 2})
    messages = []
    for i in range(60):
        item: dict = {"partition": i % 2, "key": f"k{i % 7}" if i % 3 else None}
        if i % 4 == 0:
            item["value_base64"] = base64.b64encode(bytes([0xFF, 0xFE, i])).decode()
        elif i % 4 == 1:
            item["value"] = ""
        else:
            item["value"] = f"caf\u00e9 {i}"
        if i % 5 == 0:
            item["tag"] = "paid"
        if i == 9:
            item["key"] = "cl\u00e9"
        messages.append({k: v for k, v in item.items() if v is not None})
    resp = requests.post(node.url("/v1/topics/cols/messages"), json={"messages": messages})
    assert resp.status_code == 200, resp.text
    requests.post(node.url("/v1/topics"), json={"name": "cols-empty", "partitions": 1})
    return node


def read(node, path, params, headers=None):
    resp = requests.get(node.url(path), params=params, headers=headers or {})
    assert resp.status_code == 200, resp.text
    return resp


@pytest.mark.parametrize(
    "params",
    [
        {"offset": 0, "max_messages": 1000},
        {"offset": 4, "max_messages": 7},
        {"offset": 0, "tag": "paid"},
        {"offset": 0, "max_bytes": 20},
    ],
)
def test_binary_read_equals_json_read(filled, params):
    for partition in (0, 1):
        path = f"/v1/topics/cols/partitions/{partition}/messages"
        doc = read(filled, path, params).json()
        resp = read(filled, path, params, BINARY)
        assert resp.headers["Content-Type"] == CONTENT_TYPE
        assert "Accept" in resp.headers["Vary"]
        cols = decode_read_answer(resp.content)
        assert cols.to_rows("cols") == as_rows(doc["messages"])
        assert cols.next_offset == doc["next_offset"]
        assert len(cols) > 0


def test_non_utf8_values_come_back_byte_exact(filled):
    values = []
    for partition in (0, 1):
        path = f"/v1/topics/cols/partitions/{partition}/messages"
        values.append(decode_read_answer(read(filled, path, {"offset": 0}, BINARY).content))
    even, odd = values[0].value_list(), values[1].value_list()
    assert even[:2] == [bytes([0xFF, 0xFE, 0]), "caf\u00e9 2".encode()]  # messages 0 and 2
    assert odd[:2] == [b"", "caf\u00e9 3".encode()]  # messages 1 and 3


def test_json_stays_the_default(filled):
    path = "/v1/topics/cols/partitions/0/messages"
    for headers in (
        {},
        {"Accept": "*/*"},
        {"Accept": "application/json"},
        {"Accept": f"{CONTENT_TYPE};q=0"},
    ):
        resp = read(filled, path, {"offset": 0}, headers)
        assert resp.headers["Content-Type"].startswith("application/json")
        assert resp.json()["messages"]


def test_empty_answers(filled):
    resp = read(filled, "/v1/topics/cols-empty/partitions/0/messages", {}, BINARY)
    cols = decode_read_answer(resp.content)
    assert len(cols) == 0 and cols.next_offset == 0
    at_end = read(filled, "/v1/topics/cols/partitions/0/messages", {"offset": 30}, BINARY)
    cols = decode_read_answer(at_end.content)
    assert len(cols) == 0 and cols.next_offset == 30
    none = read(filled, "/v1/topics/cols/keys/no-such-key", {}, BINARY)
    cols = decode_read_answer(none.content)
    assert len(cols) == 0 and cols.next_offset is None and not cols.limit_reached


def test_end_time_sets_end_reached(filled):
    path = "/v1/topics/cols/partitions/1/messages"
    doc = read(filled, path, {"offset": 0}).json()
    stop = doc["messages"][0]["store_timestamp"] - 1
    cols = decode_read_answer(read(filled, path, {"offset": 0, "end_time": stop}, BINARY).content)
    json_doc = read(filled, path, {"offset": 0, "end_time": stop}).json()
    assert len(cols) == 0 and cols.end_reached and json_doc["end_reached"]
    assert cols.next_offset == json_doc["next_offset"] == doc["messages"][0]["offset"]


def test_key_lookup_binary_equals_json(filled):
    for key, params in (("k1", {}), ("k1", {"max": 2}), ("cl\u00e9", {})):
        path = f"/v1/topics/cols/keys/{key}"
        doc = read(filled, path, params).json()
        resp = read(filled, path, params, BINARY)
        assert resp.headers["Content-Type"] == CONTENT_TYPE
        cols = decode_read_answer(resp.content)
        assert cols.to_rows("cols") == as_rows(doc["messages"])
        assert cols.limit_reached == doc["limit_reached"]
        assert cols.meta.get("unreachable_nodes", []) == doc["unreachable_nodes"]


def test_errors_stay_json_with_a_binary_accept(filled):
    resp = requests.get(filled.url("/v1/topics/nope/partitions/0/messages"), headers=BINARY)
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "unknown_topic"
    bad = requests.get(
        filled.url("/v1/topics/cols/partitions/0/messages"),
        params={"max_messages": 0},
        headers=BINARY,
    )
    assert bad.status_code == 400 and "error" in bad.json()
    past = requests.get(
        filled.url("/v1/topics/cols/partitions/0/messages"),
        params={"offset": 10_000},
        headers=BINARY,
    )
    assert past.status_code == 400 and past.json()["error"]["code"] == "offset_out_of_range"


def test_sync_client_columns(filled):
    with Client(filled.address) as client:
        cols = client.read_columns("cols", 1, 0, max_messages=1000)
        doc = client.read("cols", 1, 0, max_messages=1000)
        assert cols.to_rows("cols") == as_rows(doc["messages"])
        found = client.lookup_key_columns("cols", "k2", max_count=3)
        assert found.to_rows("cols") == as_rows(
            client.lookup_key("cols", "k2", max_count=3)["messages"]
        )
        with pytest.raises(UnknownTopic):
            client.read_columns("nope", 0)
        with pytest.raises(InvalidArgument):
            client.read_columns("cols", 0, offset=0, start_time=1)


def test_async_client_columns(filled):
    async def go():
        async with AsyncClient(filled.address) as client:
            cols = await client.read_columns("cols", 0, 0, max_messages=1000)
            doc = await client.read("cols", 0, 0, max_messages=1000)
            assert cols.to_rows("cols") == as_rows(doc["messages"])
            found = await client.lookup_key_columns("cols", "cl\u00e9")
            assert found.key_text() == ["cl\u00e9"]
            with pytest.raises(UnknownTopic):
                await client.read_columns("nope", 0)

    asyncio.run(go())


def test_cluster_key_lookup_merges_peers_in_binary(cluster):
    """scope=cluster: peers answer JSON, the asked node merges and frames the columns."""
    with Client(cluster.addresses[0]) as client:
        client.create_topic("cols-spread", 6)
        client.produce(
            "cols-spread",
            [
                {
                    "key": "shared",
                    "value_base64": base64.b64encode(bytes([255, i])).decode(),
                    "partition": i % 6,
                }
                for i in range(12)
            ],
        )
    for address in cluster.addresses:
        with Client(address) as client:
            doc = client.lookup_key("cols-spread", "shared", max_count=100)
            cols = client.lookup_key_columns("cols-spread", "shared", max_count=100)
            assert len(cols) == 12 and len(set(cols.partitions.tolist())) == 6
            assert cols.to_rows("cols-spread") == as_rows(doc["messages"])
            limited = client.lookup_key_columns("cols-spread", "shared", max_count=5)
            assert len(limited) == 5 and limited.limit_reached


@pytest.fixture(scope="module")
def large(node):
    """24,000 messages of about 120 bytes: a partition's binary answer runs to megabytes."""
    requests.post(node.url("/v1/topics"), json={"name": "large", "partitions": 2})
    for b in range(4):
        messages = [
            {"partition": i % 2, "key": f"k{b}-{i}", "value": f"{b}-{i}-".ljust(120, "v")}
            for i in range(6000)
        ]
        resp = requests.post(node.url("/v1/topics/large/messages"), json={"messages": messages})
        assert resp.status_code == 200, resp.text
    return node


LARGE_READ = {"offset": 0, "max_messages": 10_000, "max_bytes": 64 << 20}


def test_a_large_binary_answer_arrives_whole(large):
    """Answers of megabytes leave the node as pieces (views of the body, one MiB each): one
    Content-Length, no chunked framing, and the same messages as the JSON answer; the
    multi-partition fetch through the client's consumer reads every message once."""
    path = "/v1/topics/large/partitions/1/messages"
    resp = read(large, path, LARGE_READ, BINARY)
    assert len(resp.content) > 1024 * 1024  # more than one piece
    assert int(resp.headers["Content-Length"]) == len(resp.content)
    assert "Transfer-Encoding" not in resp.headers
    cols = decode_read_answer(resp.content)
    assert len(cols) == 10_000
    assert cols.to_rows("large") == as_rows(read(large, path, LARGE_READ).json()["messages"])
    with Client(large.address) as client, client.consumer("large", page=10_000) as consumer:
        keys = [k for page in consumer for k in page.key_text()]
    assert len(keys) == len(set(keys)) == 24_000


def test_a_client_that_leaves_mid_answer_does_not_hurt_the_node(large):
    """Clients that hang up with megabytes of their answer unsent: the node stops writing
    to them and goes on answering everyone else."""
    request = (
        "GET /v1/topics/large/partitions/0/messages?offset=0&max_messages=10000"
        f"&max_bytes={64 << 20} HTTP/1.1\r\nHost: node\r\nAccept: {CONTENT_TYPE}\r\n\r\n"
    ).encode()
    logged = large.log.stat().st_size
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", large.port)) as sock:
            sock.sendall(request)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")  # the answer has begun
    assert requests.get(large.url("/healthz")).status_code == 200
    with open(large.log, "rb") as log:  # a hang-up is no error of the node's
        log.seek(logged)
        assert b"Traceback" not in log.read()
    path = "/v1/topics/large/partitions/0/messages"
    cols = decode_read_answer(read(large, path, LARGE_READ, BINARY).content)
    assert len(cols) == 10_000
