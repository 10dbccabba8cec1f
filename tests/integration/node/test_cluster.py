"""A local 3-node cluster: shared routing, 421 redirects, clients that route, fan-out reads."""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import quote

import pytest
import requests

from storage_node.client import AsyncClient, Client
from storage_node.errors import NotOwner
from storage_node.server.routing_state import read_routing_file, write_routing_file
from storage_node.wire.routing_table import parse_routing
from tests.waiting import wait_until


def test_every_node_serves_the_same_routing(cluster):
    docs = [requests.get(a + "/v1/cluster").json() for a in cluster.addresses]
    assert all(d == docs[0] for d in docs)
    assert docs[0]["managed_by"] == "local"
    assert [n["address"] for n in docs[0]["nodes"]] == cluster.addresses


def test_topic_created_on_one_node_is_routed_everywhere(cluster):
    resp = requests.post(
        cluster.addresses[1] + "/v1/topics", json={"name": "spread", "partitions": 6}
    )
    assert resp.status_code == 201
    owners = resp.json()["owners"]
    assert sorted(set(owners)) == ["node-0", "node-1", "node-2"]
    for address in cluster.addresses:
        doc = requests.get(address + "/v1/topics/spread").json()
        assert doc["owners"] == owners
    again = requests.post(
        cluster.addresses[2] + "/v1/topics", json={"name": "spread", "partitions": 6}
    )
    assert again.status_code == 200
    conflict = requests.post(
        cluster.addresses[0] + "/v1/topics", json={"name": "spread", "partitions": 2}
    )
    assert conflict.status_code == 409


def test_wrong_node_answers_421_with_owner(cluster):
    with Client(cluster.addresses[0]) as client:
        client.create_topic("redirect", 3)
        table = client.cluster()
    owners = table["topics"]["redirect"]["owners"]
    addr = {n["id"]: n["address"] for n in table["nodes"]}
    for partition, owner in enumerate(owners):
        wrong = next(a for i, a in addr.items() if i != owner)
        before = requests.get(addr[owner] + "/v1/topics/redirect").json()["partition_offsets"][
            partition
        ]
        resp = requests.post(
            wrong + "/v1/topics/redirect/messages",
            json={"messages": [{"value": "x", "partition": partition}]},
        )
        assert resp.status_code == 421
        err = resp.json()["error"]
        assert (
            err["code"] == "wrong_node" and err["owner"] == addr[owner] and err["owner_id"] == owner
        )
        read = requests.get(wrong + f"/v1/topics/redirect/partitions/{partition}/messages")
        assert read.status_code == 421 and read.json()["error"]["owner"] == addr[owner]
        commit = requests.post(
            wrong + "/v1/consumer-groups/g/offsets",
            json={"topic": "redirect", "partition": partition, "offset": 0},
        )
        assert commit.status_code == 421
        after = requests.get(addr[owner] + "/v1/topics/redirect").json()["partition_offsets"][
            partition
        ]
        assert after == before  # the rejected write changed nothing


def test_client_routes_by_key_and_reads_from_any_node(cluster):
    with Client(cluster.addresses[2]) as client:
        client.create_topic("routed", 6)
        msgs = [{"key": f"order-{i % 40}", "value": f"event {i}", "tag": "t"} for i in range(600)]
        results = client.produce("routed", msgs)
        assert len({r["msg_id"] for r in results}) == 600
        from storage_node.formats.partitioning import partition_for_key

        for m, r in zip(msgs, results, strict=True):
            assert r["partition"] == partition_for_key(m["key"], 6)
        info = client.describe_topic("routed")
        assert sum(p["next_offset"] for p in info["partition_offsets"]) == 600
        assert info["unreachable_nodes"] == []
        keyless = client.produce("routed", [b"a"] * 60)
        assert {r["partition"] for r in keyless} == set(range(6))
        # every node answers key and ID lookups for the whole cluster
        expected = [
            r["msg_id"] for m, r in zip(msgs, results, strict=True) if m["key"] == "order-7"
        ]
        for address in cluster.addresses:
            doc = requests.get(
                address + "/v1/topics/routed/keys/order-7", params={"max": 100}
            ).json()
            assert sorted(m["msg_id"] for m in doc["messages"]) == sorted(expected)
            got = requests.get(address + f"/v1/messages/{results[123]['msg_id']}").json()
            assert got["value"] == "event 123"
        all_ids = set()
        for p in range(6):
            all_ids |= {m["msg_id"] for m in client.read_all("routed", p)}
        assert all_ids == {r["msg_id"] for r in results + keyless}


def test_keys_with_url_special_characters_are_found_cluster_wide(cluster):
    odd = "a/b %2F?x=1&y#z é"
    with Client(cluster.addresses[0]) as client:
        client.create_topic("odd-keys", 3)
        results = client.produce("odd-keys", [{"key": odd, "value": "v"}])
        for address in cluster.addresses:
            with Client(address) as one:
                found = one.request(
                    "GET", address, "/v1/topics/odd-keys/keys/" + quote(odd, safe="")
                )
                assert [m["msg_id"] for m in found["messages"]] == [results[0]["msg_id"]]


def test_client_follows_421_after_stale_routing(cluster):
    with Client(cluster.addresses[0]) as client:
        client.create_topic("stale", 3)
        client.refresh_routing()
        # poison the client's table: claim node-0 owns everything
        table = client.routing.table
        from dataclasses import replace

        route = table.topics["stale"]
        bad = replace(route, owners=("node-0",) * 3)
        client.routing.table = replace(table, topics={**table.topics, "stale": bad})
        results = client.produce(
            "stale", [{"value": f"v{i}", "partition": i % 3} for i in range(30)]
        )
        assert len(results) == 30
        assert client.read("stale", 1, 0, max_messages=100)["next_offset"] == 10
    with Client(cluster.addresses[0]) as client:
        with pytest.raises(NotOwner):
            client.request("GET", cluster.addresses[0], "/v1/topics/stale/partitions/1/messages")


def test_consumer_groups_across_nodes(cluster):
    with Client(cluster.addresses[1]) as client:
        client.create_topic("consumed", 3)
        client.produce("consumed", [f"m{i}" for i in range(30)])
        first = list(client.consume("consumed", group="readers"))
        assert len(first) == 30
        assert list(client.consume("consumed", group="readers")) == []
        committed = client.committed_offsets("readers", "consumed")
        assert sum(committed["consumed"].values()) == 30


def test_async_client(cluster):
    async def scenario():
        async with AsyncClient(cluster.addresses) as client:
            await client.create_topic("async-t", 4)
            results = await client.produce(
                "async-t", [{"key": f"k{i}", "value": str(i)} for i in range(200)]
            )
            assert len(results) == 200
            got = await client.get_message(results[5]["msg_id"])
            assert got["value"] == "5"
            found = await client.lookup_key("async-t", "k9")
            assert [m["value"] for m in found["messages"]] == ["9"]
            page = await client.read("async-t", results[0]["partition"], 0)
            assert page["messages"]
            await client.commit_offset("ag", "async-t", 0, 1)
            assert (await client.committed_offsets("ag"))["async-t"] == {0: 1}

    asyncio.run(scenario())


def _docs_at(cluster, generation: int) -> list[dict]:
    """Every node's /v1/cluster document, once all of them serve `generation`."""

    def docs() -> list[dict] | None:
        got = [requests.get(a + "/v1/cluster").json() for a in cluster.addresses]
        return got if all(d["generation"] == generation for d in got) else None

    return wait_until(docs, 20, f"every node to serve generation {generation}")


def test_nodes_reload_an_edited_routing_file(cluster):
    table = read_routing_file(cluster.routing_file)
    table = table.with_topic("from-file", 3, "none", 12)
    write_routing_file(cluster.routing_file, table)
    wait_until(
        lambda: all(
            "from-file" in requests.get(a + "/v1/cluster").json()["topics"]
            for a in cluster.addresses
        ),
        20,
        "every node to serve the edited routing file",
    )
    for address in cluster.addresses:
        topics = {t["name"]: t for t in requests.get(address + "/v1/topics").json()["topics"]}
        assert topics["from-file"]["compression"] == "none"


def test_a_broken_routing_file_is_ignored(cluster):
    before = requests.get(cluster.addresses[0] + "/v1/cluster").json()
    original = open(cluster.routing_file).read()
    try:
        with open(cluster.routing_file, "w") as fh:
            json.dump({"format": 99}, fh)
        pending = set(cluster.addresses)
        deadline = time.monotonic() + 20
        while pending and time.monotonic() < deadline:  # wait until each node saw the file
            for address in list(pending):
                ready = requests.get(address + "/readyz").json()
                if "format" in (ready["routing_error"] or ""):
                    assert ready["ready"] is True
                    pending.discard(address)
            time.sleep(0.1)
        assert not pending
        for address in cluster.addresses:
            assert requests.get(address + "/v1/cluster").json() == before
    finally:
        with open(cluster.routing_file, "w") as fh:
            fh.write(original)


def test_a_node_takes_a_newer_table_handed_over_by_the_controller(cluster):
    """The failover controller hands nodes a new table directly (a mounted ConfigMap reaches
    pods late): a newer generation of the same cluster is taken at once; an older one, or a
    table of other nodes, or no table at all, changes nothing."""
    first, second = cluster.addresses[0], cluster.addresses[1]
    table = read_routing_file(cluster.routing_file)
    newer = table.with_topic("handed-over", 2, "none", 12)
    newer_doc = {**newer.to_json(), "generation": table.generation + 5}
    url = "/v1/replication/routing"
    resp = requests.put(first + url, json=newer_doc)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"generation": table.generation + 5, "taken": True}
    assert "handed-over" in requests.get(first + "/v1/cluster").json()["topics"]
    assert "handed-over" not in requests.get(second + "/v1/cluster").json()["topics"]

    again = requests.put(first + url, json={**table.to_json()})  # older: ignored
    assert again.json() == {"generation": table.generation + 5, "taken": False}
    others = {**newer_doc, "generation": table.generation + 9}
    others["nodes"] = [*others["nodes"], {"id": "stranger", "address": "http://127.0.0.1:9"}]
    for bad in (others, {"format": 1}, [1, 2]):
        resp = requests.put(first + url, json=bad)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["code"] == "invalid_argument"
    resp = requests.put(first + url, data=b"{not json")
    assert resp.status_code == 400
    after = requests.get(first + "/v1/cluster").json()
    assert after["generation"] == table.generation + 5 and "handed-over" in after["topics"]

    write_routing_file(cluster.routing_file, parse_routing(newer_doc))  # the file catches up
    docs = _docs_at(cluster, table.generation + 5)
    assert all("handed-over" in d["topics"] for d in docs)
