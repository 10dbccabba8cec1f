"""The client's fast paths against real node processes: multi-partition fetch (route and
client), the prefetching consumer, produce from columns (Arrow, pandas, dicts) and the
shared core behind both clients."""

from __future__ import annotations

import asyncio
import threading
import time

import pandas as pd
import pyarrow as pa
import pytest
import requests

from storage_node.client import AsyncClient, Client
from storage_node.errors import InvalidArgument, NotOwner
from storage_node.wire.batch_codec import CONTENT_TYPE
from storage_node.wire.fetch_codec import decode_fetch_answer

BINARY = {"Accept": CONTENT_TYPE}


@pytest.fixture(scope="module")
def loaded(node):
    """Topic ``fetch3``: 3 partitions, 30 keyed messages in each."""
    client = Client(node.address)
    client.create_topic("fetch3", 3)
    client.produce(
        "fetch3",
        [
            {"value": f"v{p}-{i}", "key": f"k{i}", "partition": p}
            for p in range(3)
            for i in range(30)
        ],
    )
    client.close()
    return node


def test_fetch_route_answers_each_partition_as_its_read(loaded):
    body = {"partitions": [{"partition": 0, "offset": 5}, {"partition": 2}], "max_messages": 7}
    resp = requests.post(loaded.url("/v1/topics/fetch3/fetch"), json=body, headers=BINARY)
    assert resp.status_code == 200, resp.text
    pages = decode_fetch_answer(resp.content)
    assert sorted(pages) == [0, 2]
    for p, start in ((0, 5), (2, 0)):
        single = requests.get(
            loaded.url(f"/v1/topics/fetch3/partitions/{p}/messages"),
            params={"offset": start, "max_messages": 7},
            headers=BINARY,
        )
        assert pages[p].to_rows("fetch3") == Client(loaded.address).read_columns(
            "fetch3", p, start, max_messages=7
        ).to_rows("fetch3")
        assert single.status_code == 200
        assert pages[p].next_offset == start + 7
    as_json = requests.post(loaded.url("/v1/topics/fetch3/fetch"), json=body).json()
    assert [p["partition"] for p in as_json["partitions"]] == [0, 2]
    assert [m["value"] for m in as_json["partitions"][0]["messages"]] == [
        f"v0-{i}" for i in range(5, 12)
    ]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({}, "missing field 'partitions'"),
        ({"partitions": []}, "partitions: List should have at least 1 item"),
        ({"partitions": [{"partition": 3}]}, "partition 3 does not exist"),
        ({"partitions": [{"partition": 0, "offset": -1}]}, "partitions[0].offset"),
        ({"partitions": [{"partition": 0}, {"partition": 0}]}, "named twice"),
        ({"partitions": [{"partition": 0}], "max_messages": 0}, "max_messages"),
        ({"partitions": [{"partition": 0}], "wait_ms": 10**9}, "wait_ms"),
        ({"partitions": [{"partition": 0}], "tag": ""}, "tag"),
        ({"partitions": [{"partition": 0}], "speed": 1}, "unknown field 'speed'"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_fetch_route_refuses_bad_input_clearly(loaded, body, words):
    before = requests.get(loaded.url("/v1/topics/fetch3")).json()["partition_offsets"]
    resp = requests.post(loaded.url("/v1/topics/fetch3/fetch"), json=body)
    assert resp.status_code == 400, resp.text
    assert words in resp.json()["error"]["message"]
    assert requests.get(loaded.url("/v1/topics/fetch3")).json()["partition_offsets"] == before


def test_fetch_long_poll_wakes_on_an_append_to_any_partition(node):
    client = Client(node.address)
    client.create_topic("fetchwait", 2)
    got: list = []
    thread = threading.Thread(
        target=lambda: got.append(client.fetch("fetchwait", {0: 0, 1: 0}, wait_ms=20_000))
    )
    started = time.monotonic()
    thread.start()
    # Part of what is tested: the append comes while the fetch waits (no state to wait on).
    time.sleep(0.3)
    Client(node.address).produce("fetchwait", [{"value": "late", "partition": 1}])
    thread.join(30)
    assert time.monotonic() - started < 15  # woken by the append, not the 20 s wait
    assert [r["value"] for r in got[0].pages[1].to_rows("fetchwait")] == [b"late"]
    assert len(got[0].pages[0]) == 0


def test_client_fetch_across_owners_and_after_a_move(cluster):
    client = Client(cluster.addresses)
    client.create_topic("fetchspread", 6)
    client.produce(
        "fetchspread", [{"value": f"{p}:{i}", "partition": p} for p in range(6) for i in range(4)]
    )
    answer = client.fetch("fetchspread", dict.fromkeys(range(6), 0))
    assert {p: [r["value"] for r in c.to_rows("x")] for p, c in answer.pages.items()} == {
        p: [f"{p}:{i}".encode() for i in range(4)] for p in range(6)
    }
    # a node asked for partitions it does not own answers 421 for the whole fetch
    table = client.routing.table
    route = table.topics["fetchspread"]
    foreign = next(p for p in range(6) if route.owners[p] != table.nodes[0].id)
    resp = requests.post(
        cluster.addresses[0] + "/v1/topics/fetchspread/fetch",
        json={"partitions": [{"partition": foreign}]},
    )
    assert resp.status_code == NotOwner.status


def test_consumer_prefetches_every_page_in_order(loaded):
    client = Client(loaded.address)
    with client.consumer("fetch3", page=4) as consumer:
        pages = list(consumer)
        positions = dict(consumer.positions)
    assert all(len(p) <= 4 for p in pages)
    values = {}
    for cols in pages:
        for row in cols.to_rows("fetch3"):
            values.setdefault(row["partition"], []).append(row["value"])
    assert values == {p: [f"v{p}-{i}".encode() for i in range(30)] for p in range(3)}
    assert positions == {0: 30, 1: 30, 2: 30}
    # resumed from positions: nothing more; from offsets: the rest, as Arrow and as dicts
    assert list(client.consumer("fetch3", offsets=positions)) == []
    batches = list(client.consumer("fetch3", partitions=[1], offsets={1: 25}).batches())
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == [25, 26, 27, 28, 29]
    assert table.column("topic").to_pylist() == ["fetch3"] * 5
    rows = list(client.consumer("fetch3", partitions=[2], offsets={2: 28}).messages())
    assert [r["value"] for r in rows] == [b"v2-28", b"v2-29"]


def test_consumer_refuses_bad_arguments(loaded):
    client = Client(loaded.address)
    with pytest.raises(InvalidArgument, match="no partition 9"):
        client.consumer("fetch3", partitions=[9])
    with pytest.raises(InvalidArgument, match="page must be at least 1"):
        client.consumer("fetch3", page=0)


def test_following_consumer_gets_messages_produced_later(node):
    client = Client(node.address)
    client.create_topic("tail", 2)
    seen: list[bytes] = []
    consumer = client.consumer("tail", follow=True, wait_ms=500)

    def follow() -> None:
        for cols in consumer:
            seen.extend(cols.value_list())
            if len(seen) >= 3:
                return

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    # Part of what is tested: the messages are produced after the consumer reached the end.
    time.sleep(0.3)
    producer = Client(node.address)
    for i in range(3):
        producer.produce("tail", [f"m{i}"])
    thread.join(30)
    consumer.close()
    assert sorted(seen) == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("kind", ["arrow", "pandas", "dict", "dicts"])
def test_produce_from_columns_stores_what_produce_would(node, kind):
    client = Client(node.address)
    topic = f"cols-{kind}"
    client.create_topic(topic, 3)
    n = 12_000  # more than one frame and one piece
    keys = [f"k{i % 50}" if i % 4 else None for i in range(n)]
    values = [f"value {i}".encode() for i in range(n)]
    tags = ["t" if i % 3 == 0 else None for i in range(n)]
    columns = {"value": values, "key": keys, "tag": tags}
    if kind == "arrow":
        done = client.produce_columns(topic, pa.table(columns), frame_messages=5000)
        results = done.to_rows()
    elif kind == "pandas":
        results = client.produce_columns(topic, pd.DataFrame(columns), 5000).to_rows()
    elif kind == "dict":
        results = client.produce_columns(topic, columns, 5000).to_rows()
    else:
        dicts = [
            {k: v for k, v in (("value", x), ("key", y), ("tag", z)) if v is not None}
            for x, y, z in zip(values, keys, tags, strict=True)
        ]
        results = client.produce(topic, dicts)
    assert len(results) == n and len({r["msg_id"] for r in results}) == n
    stored = {}
    for cols in client.consumer(topic):
        for row in cols.to_rows(topic):
            stored[(row["partition"], row["offset"])] = row
    assert len(stored) == n
    for i, r in enumerate(results):
        row = stored[(r["partition"], r["offset"])]
        assert (row["value"], row["key"], row["tag"], row["msg_id"]) == (
            values[i],
            keys[i],
            tags[i],
            r["msg_id"],
        )
    # keyed messages land where the node itself puts a message with that key
    by_key: dict = {}
    for i, r in enumerate(results):
        if keys[i] is not None:
            by_key.setdefault(keys[i], set()).add(r["partition"])
    node_choice = requests.post(
        node.url(f"/v1/topics/{topic}/messages"),
        json={"messages": [{"value": "probe", "key": k} for k in sorted(by_key)]},
    ).json()["results"]
    assert {k: {r["partition"]} for k, r in zip(sorted(by_key), node_choice, strict=True)} == by_key


@pytest.mark.parametrize(
    ("columns", "words"),
    [
        ({"key": ["a"]}, "value column is missing"),
        ({"value": [b"a", None]}, "holds nulls"),
        ({"value": [b"a"], "colour": ["red"]}, "unknown message column"),
        ({"value": [b"a", b"b"], "key": ["k"]}, "has 1 entries for 2 values"),
        ({"value": [b"a"], "partition": [-5]}, "partition is negative"),
        ({"value": [b"a"], "partition": [7]}, "partition 7 does not exist"),
        ({"value": [b"a"], "timestamp": ["noon"]}, "must hold integers"),
        ({"value": [b"a"], "key": [5]}, "column key must hold text"),
        ({"value": [b"a", b"b"], "tag": ["t", 5]}, "column tag must hold text"),
    ],
)
def test_produce_columns_refuses_bad_input_and_stores_nothing(node, columns, words):
    client = Client(node.address)
    client.create_topic("cols-bad", 2)
    before = client.describe_topic("cols-bad")["partition_offsets"]
    with pytest.raises(InvalidArgument, match=words):
        client.produce_columns("cols-bad", columns)
    assert client.describe_topic("cols-bad")["partition_offsets"] == before


def test_produce_of_dicts_refuses_a_non_text_key_and_stores_nothing(node):
    client = Client(node.address)
    client.create_topic("dicts-bad", 2)
    before = client.describe_topic("dicts-bad")["partition_offsets"]
    with pytest.raises(InvalidArgument):
        client.produce("dicts-bad", [{"value": "a", "key": "k"}, {"value": "b", "key": 7}])
    assert client.describe_topic("dicts-bad")["partition_offsets"] == before


def test_async_client_runs_the_same_operations(loaded):
    async def go() -> tuple:
        async with AsyncClient(loaded.address) as client:
            fetched = await client.fetch("fetch3", {0: 0, 1: 28})
            produced = await client.produce_columns(
                "fetch3", {"value": [b"x", b"y"], "key": ["a", "a"]}
            )
            return fetched, produced

    fetched, produced = asyncio.run(go())
    assert len(fetched.pages[0]) == 30 and len(fetched.pages[1]) == 2
    assert len(produced) == 2 and len(set(produced.partitions.tolist())) == 1


def test_async_consumer_reads_what_the_sync_consumer_reads(loaded):
    async def go() -> tuple:
        async with AsyncClient(loaded.address) as client:
            async with client.consumer("fetch3", page=4) as consumer:
                pages = [cols async for cols in consumer]
                positions = dict(consumer.positions)
            rest = [cols async for cols in client.consumer("fetch3", offsets=positions)]
            one = client.consumer(
                "fetch3", partitions=[1], offsets={1: 25}, ends={1: 30}, prefetch=False
            )
            batches = [b async for b in one.batches()]
            two = client.consumer("fetch3", partitions=[2], offsets={2: 28}, ends={2: 30})
            rows = [r async for r in two.messages()]
            return pages, positions, rest, batches, rows

    pages, positions, rest, batches, rows = asyncio.run(go())
    sync_pages = list(Client(loaded.address).consumer("fetch3", page=4))
    assert [c.to_rows("fetch3") for c in pages] == [c.to_rows("fetch3") for c in sync_pages]
    assert all(len(p) <= 4 for p in pages)
    values: dict[int, list[bytes]] = {}
    for cols in pages:
        for row in cols.to_rows("fetch3"):
            values.setdefault(row["partition"], []).append(row["value"])
    # the module's earlier tests may have appended to the topic: its first 30 per partition
    assert {p: v[:30] for p, v in values.items()} == {
        p: [f"v{p}-{i}".encode() for i in range(30)] for p in range(3)
    }
    ends = Client(loaded.address).describe_topic("fetch3")["partition_offsets"]
    assert positions == {e["partition"]: e["next_offset"] for e in ends}
    assert rest == []
    assert pa.Table.from_batches(batches).column("offset").to_pylist() == [25, 26, 27, 28, 29]
    assert [r["value"] for r in rows] == [b"v2-28", b"v2-29"]


def test_async_consumer_refuses_bad_arguments(loaded):
    async def go() -> None:
        async with AsyncClient(loaded.address) as client:
            with pytest.raises(InvalidArgument, match="page must be at least 1"):
                client.consumer("fetch3", page=0)
            with pytest.raises(InvalidArgument, match="no partition 9"):
                async with client.consumer("fetch3", partitions=[9]):
                    pass
            with pytest.raises(InvalidArgument, match="no partition 9"):
                async for _cols in client.consumer("fetch3", partitions=[9]):
                    pass

    asyncio.run(go())


def test_following_async_consumer_gets_messages_produced_later(node):
    Client(node.address).create_topic("atail", 2)

    async def go() -> list[bytes]:
        seen: list[bytes] = []
        async with AsyncClient(node.address) as client:
            consumer = client.consumer("atail", follow=True, wait_ms=500)
            await consumer.start()

            async def follow() -> None:
                async for cols in consumer:
                    seen.extend(cols.value_list())
                    if len(seen) >= 3:
                        return

            task = asyncio.ensure_future(follow())
            await asyncio.sleep(0.3)
            async with AsyncClient(node.address) as producer:
                for i in range(3):
                    await producer.produce("atail", [f"m{i}"])
            await asyncio.wait_for(task, 30)
            await consumer.close()
        return seen

    assert sorted(asyncio.run(go())) == [b"m0", b"m1", b"m2"]
