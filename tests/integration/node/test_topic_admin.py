"""Deleting a topic and adding partitions through real nodes: the HTTP API on a standalone
node (restarts included) and the `msgstore topic delete|alter` commands against a local
3-node cluster, a node of which is down during a delete."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any
from urllib.parse import quote

import pytest
import requests

from storage_node.formats.limits import MAX_PARTITIONS
from storage_node.store import partition_for_key

CLI = [sys.executable, "-m", "storage_node.cli"]


def run(*args: str, stdin: bytes | None = None, check: bool = True) -> Any:
    proc = subprocess.run([*CLI, *args], input=stdin, capture_output=True, timeout=180)
    if check:
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc


def error_of(resp: requests.Response) -> dict[str, Any]:
    return resp.json()["error"]


def produce_keyed(url: str, topic: str, keys: list[str], tag: str) -> list[dict[str, Any]]:
    body = {"messages": [{"key": k, "value": f"{tag} {k}"} for k in keys]}
    resp = requests.post(f"{url}/v1/topics/{topic}/messages", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()["results"]


def read_all(url: str, topic: str) -> list[dict[str, Any]]:
    detail = requests.get(f"{url}/v1/topics/{topic}").json()
    out = []
    for part in detail["partition_offsets"]:
        page = requests.get(
            f"{part['owner_address'] or url}/v1/topics/{topic}/partitions/{part['partition']}"
            "/messages",
            params={"offset": part["first_offset"], "max_messages": 10000},
        ).json()
        out += page["messages"]
    return out


def state(url: str) -> str:
    """What a topic command could change on a node, as one comparable string."""
    topics = requests.get(f"{url}/v1/topics").json()["topics"]
    out = {t["name"]: requests.get(f"{url}/v1/topics/{t['name']}").json() for t in topics}
    groups = {
        g: requests.get(f"{url}/v1/consumer-groups/{g}/offsets").json()["offsets"]
        for g in requests.get(f"{url}/v1/consumer-groups").json()["groups"]
    }
    return json.dumps([out, groups], sort_keys=True)


def assert_deleted(url: str, topic: str, ids: list[str], keys: list[str]) -> None:
    assert topic not in [t["name"] for t in requests.get(f"{url}/v1/topics").json()["topics"]]
    assert requests.get(f"{url}/v1/topics/{topic}").status_code == 404
    read = requests.get(f"{url}/v1/topics/{topic}/partitions/0/messages", params={"offset": 0})
    assert read.status_code == 404 and error_of(read)["code"] == "unknown_topic"
    for k in keys[:3]:
        found = requests.get(f"{url}/v1/topics/{topic}/keys/{k}")
        assert found.status_code == 404 and error_of(found)["code"] == "unknown_topic"
    for mid in ids:
        got = requests.get(f"{url}/v1/messages/{quote(mid)}")
        assert got.status_code == 404 and error_of(got)["code"] == "not_found", got.text


def test_delete_on_a_node_survives_restarts_and_recreate_starts_empty(node_factory):
    n = node_factory("solo")
    url = n.address
    keys = [f"k{i}" for i in range(30)]
    for name in ("orders", "other"):
        assert requests.post(f"{url}/v1/topics", json={"name": name, "partitions": 3}).ok
    old = produce_keyed(url, "orders", keys, "old")
    other = produce_keyed(url, "other", keys[:1], "other")
    for group, topic in (("g", "orders"), ("g", "other"), ("only-orders", "orders")):
        commit = {"topic": topic, "partition": 0, "offset": 0}
        assert requests.post(f"{url}/v1/consumer-groups/{group}/offsets", json=commit).ok

    # unknown topic and bad names: a clear error, nothing changes
    before = state(url)
    unknown = requests.delete(f"{url}/v1/topics/nope")
    assert unknown.status_code == 404 and error_of(unknown)["code"] == "unknown_topic"
    assert "nope" in error_of(unknown)["message"]
    for bad in ("bad%20name", "x" * 201, "a%2Fb"):
        resp = requests.delete(f"{url}/v1/topics/{bad}")
        assert resp.status_code in (400, 404), resp.text
        if resp.status_code == 400:
            assert error_of(resp)["code"] == "invalid_name"
    assert requests.delete(f"{url}/v1/topics/orders", params={"scope": "bad"}).status_code == 400
    assert state(url) == before

    deleted = requests.delete(f"{url}/v1/topics/orders")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"name": "orders", "deleted": True, "pending_nodes": {}}
    ids = [r["msg_id"] for r in old]
    assert_deleted(url, "orders", ids, keys)
    assert requests.get(f"{url}/v1/consumer-groups").json()["groups"] == ["g"]
    assert requests.get(f"{url}/v1/consumer-groups/g/offsets").json()["offsets"] == {
        "other": {"0": 0}
    }
    assert requests.get(f"{url}/v1/messages/{other[0]['msg_id']}").json()["value"] == "other k0"
    again = requests.delete(f"{url}/v1/topics/orders")
    assert again.status_code == 404 and error_of(again)["code"] == "unknown_topic"

    for stop in (signal.SIGTERM, signal.SIGKILL):  # a clean restart and crash recovery
        n.stop(stop)
        n.start()
        assert_deleted(url, "orders", ids, keys)

    assert requests.post(f"{url}/v1/topics", json={"name": "orders", "partitions": 2}).ok
    detail = requests.get(f"{url}/v1/topics/orders").json()
    assert [(p["first_offset"], p["next_offset"]) for p in detail["partition_offsets"]] == [
        (0, 0),
        (0, 0),
    ]
    assert requests.get(f"{url}/v1/topics/orders/keys/k1").json()["messages"] == []
    new = produce_keyed(url, "orders", ["k1"], "new")
    assert new[0]["offset"] == 0
    n.stop(signal.SIGKILL)
    n.start()
    assert [m["value"] for m in read_all(url, "orders")] == ["new k1"]
    assert [
        m["value"] for m in requests.get(f"{url}/v1/topics/orders/keys/k1").json()["messages"]
    ] == ["new k1"]
    for mid in ids:
        assert requests.get(f"{url}/v1/messages/{quote(mid)}").status_code == 404
    assert (
        requests.get(f"{url}/v1/consumer-groups/g/offsets", params={"topic": "orders"}).json()[
            "offsets"
        ]
        == {}
    )


def test_add_partitions_on_a_node(node_factory):
    n = node_factory("grow")
    url = n.address
    assert requests.post(f"{url}/v1/topics", json={"name": "t", "partitions": 2}).ok
    keys = [f"key-{i}" for i in range(60)]
    old = produce_keyed(url, "t", keys, "before")
    before = state(url)
    for body in (
        {"partitions": 1},
        {"partitions": 0},
        {"partitions": MAX_PARTITIONS + 1},
        {"partitions": "4"},
        {"partitions": True},
        {},
        {"partitions": 4, "x": 1},
    ):
        resp = requests.post(f"{url}/v1/topics/t/partitions", json=body)
        assert resp.status_code == 400, (body, resp.text)
    shrink = requests.post(f"{url}/v1/topics/t/partitions", json={"partitions": 1})
    assert "only be added" in error_of(shrink)["message"]
    missing = requests.post(f"{url}/v1/topics/nope/partitions", json={"partitions": 4})
    assert missing.status_code == 404
    same = requests.post(f"{url}/v1/topics/t/partitions", json={"partitions": 2})
    assert same.status_code == 200 and same.json()["previous_partitions"] == 2
    assert state(url) == before

    grown = requests.post(f"{url}/v1/topics/t/partitions", json={"partitions": 5})
    assert grown.status_code == 200, grown.text
    assert grown.json()["partitions"] == 5 and grown.json()["previous_partitions"] == 2
    new = produce_keyed(url, "t", keys, "after")
    assert [r["partition"] for r in new] == [partition_for_key(k, 5) for k in keys]
    assert [r["partition"] for r in old] == [partition_for_key(k, 2) for k in keys]
    n.stop(signal.SIGKILL)
    n.start()
    detail = requests.get(f"{url}/v1/topics/t").json()
    assert detail["partitions"] == 5 and len(detail["owners"]) == 5
    values = sorted(m["value"] for m in read_all(url, "t"))
    assert values == sorted([f"before {k}" for k in keys] + [f"after {k}" for k in keys])
    assert {m["partition"] for m in read_all(url, "t")} == set(range(5))
    for p in (2, 3, 4):
        assert detail["partition_offsets"][p]["first_offset"] == 0
    for k in keys:
        found = requests.get(f"{url}/v1/topics/t/keys/{k}").json()["messages"]
        assert [m["value"] for m in found] == [f"after {k}", f"before {k}"]


# -- the commands, against a local cluster ------------------------------------------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    data_dir = str(tmp_path_factory.mktemp("topic-admin") / "c")
    up = run("local", "up", "--nodes", "3", "--data-dir", data_dir)
    lines = up.stdout.decode().splitlines()
    addresses = [line.split()[1] for line in lines if line.startswith("node-")]
    yield data_dir, addresses
    run("local", "down", "--data-dir", data_dir)


def produce_cli(ep: list[str], topic: str, pairs: list[str]) -> list[dict[str, Any]]:
    out = run(
        "produce",
        topic,
        "-K",
        ":",
        "--input",
        "raw",
        "--print-results",
        *ep,
        stdin="\n".join(pairs).encode() + b"\n",
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


def consume_cli(ep: list[str], topic: str, *extra: str) -> list[dict[str, Any]]:
    out = run("consume", topic, *extra, *ep)
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_topic_delete_and_alter_help():
    text = run("topic", "--help").stdout.decode()
    assert "delete" in text and "alter" in text
    delete = run("topic", "delete", "--help").stdout.decode()
    assert "starts empty" in delete and "retention or compaction" in delete
    alter = run("topic", "alter", "--help").stdout.decode()
    assert "--partitions" in alter and "key_hash(key) % the new count" in alter
    missing = run("topic", "alter", "x", check=False)
    assert missing.returncode != 0 and b"--partitions" in missing.stderr


def test_delete_through_the_cli_reaches_every_node(cluster):
    _data_dir, addresses = cluster
    ep = ["--endpoint", addresses[0]]
    run("topic", "create", "orders", "--partitions", "6", *ep)
    keys = [f"ord-{i}" for i in range(40)]
    old = produce_cli(ep, "orders", [f"{k}:old {k}" for k in keys])
    assert len({r["partition"] for r in old}) == 6
    assert len(consume_cli(ep, "orders", "--group", "reporting")) == 40
    assert json.loads(run("group", "describe", "reporting", "--json", *ep).stdout)["partitions"]
    owners = set(json.loads(run("topic", "describe", "orders", *ep).stdout)["owners"])
    assert len(owners) == 3

    # errors change nothing
    before = [state(a) for a in addresses]
    unknown = run("topic", "delete", "nope", *ep, check=False)
    assert unknown.returncode == 1
    assert unknown.stderr.decode().startswith("error:") and "nope" in unknown.stderr.decode()
    bad = run("topic", "delete", "bad/name", *ep, check=False)
    assert bad.returncode == 1 and b"error:" in bad.stderr
    assert [state(a) for a in addresses] == before

    deleted = run("topic", "delete", "orders", "--endpoint", addresses[1])
    assert json.loads(deleted.stdout) == {"name": "orders", "deleted": True, "pending_nodes": {}}
    ids = [r["msg_id"] for r in old]
    for address in addresses:  # every node's own store and every node's cluster view
        assert_deleted(address, "orders", ids[:10], keys)
    assert "orders" not in run("topic", "list", *ep).stdout.decode()
    got = run("get", ids[0], *ep, check=False)
    assert got.returncode == 1 and b"error:" in got.stderr
    assert run("query", "orders", keys[0], *ep, check=False).returncode == 1
    assert "reporting" not in run("group", "list", *ep).stdout.decode()
    routing = json.loads(run("cluster", *ep).stdout)
    assert "orders" not in routing["topics"] and not routing.get("deleted_topics")

    run("topic", "create", "orders", "--partitions", "3", *ep)
    assert consume_cli(ep, "orders") == []
    assert run("query", "orders", keys[0], *ep).stdout == b""
    new = produce_cli(ep, "orders", [f"{keys[0]}:new"])
    assert new[0]["offset"] == 0
    assert [m["value"] for m in consume_cli(ep, "orders", "--group", "reporting")] == ["new"]


def test_alter_adds_partitions_across_the_cluster(cluster):
    _data_dir, addresses = cluster
    ep = ["--endpoint", addresses[0]]
    run("topic", "create", "grow", "--partitions", "2", *ep)
    keys = [f"user-{i}" for i in range(90)]
    old = produce_cli(ep, "grow", [f"{k}:before {k}" for k in keys])

    before = [state(a) for a in addresses]
    shrink = run("topic", "alter", "grow", "--partitions", "1", *ep, check=False)
    assert shrink.returncode == 1
    assert (
        "only be added" in shrink.stderr.decode() and "has 2 partitions" in shrink.stderr.decode()
    )
    assert run("topic", "alter", "nope", "--partitions", "4", *ep, check=False).returncode == 1
    assert run("topic", "alter", "grow", "--partitions", "0", *ep, check=False).returncode == 1
    assert [state(a) for a in addresses] == before
    same = run("topic", "alter", "grow", "--partitions", "2", *ep)
    assert "already has 2 partitions" in same.stderr.decode()
    assert [state(a) for a in addresses] == before

    grown = json.loads(
        run("topic", "alter", "grow", "--partitions", "7", "--endpoint", addresses[2]).stdout
    )
    assert grown["partitions"] == 7 and grown["previous_partitions"] == 2
    assert len(grown["owners"]) == 7 and set(grown["owners"]) == {"node-0", "node-1", "node-2"}
    assert (
        grown["owners"][:2]
        == json.loads(run("cluster", *ep).stdout)["topics"]["grow"]["owners"][:2]
    )
    for address in addresses:  # every node knows the new count at once
        local = requests.get(f"{address}/v1/topics/grow", params={"scope": "local"}).json()
        assert local["partitions"] == 7
    new = produce_cli(ep, "grow", [f"{k}:after {k}" for k in keys])
    assert [r["partition"] for r in new] == [partition_for_key(k, 7) for k in keys]
    assert [r["partition"] for r in old] == [partition_for_key(k, 2) for k in keys]
    got = consume_cli(ep, "grow")
    assert len(got) == 180 and {m["partition"] for m in got} == set(range(7))
    described = json.loads(run("topic", "describe", "grow", *ep).stdout)
    assert described["messages"] == 180
    assert all(p["first_offset"] == 0 for p in described["partition_offsets"][2:])
    for k in keys[:3]:  # old messages of a key are found next to its new ones
        found = [json.loads(x)["value"] for x in run("query", "grow", k, *ep).stdout.splitlines()]
        assert found == [f"after {k}", f"before {k}"], k
    for k in keys:
        found = requests.get(f"{addresses[1]}/v1/topics/grow/keys/{k}").json()["messages"]
        assert [m["value"] for m in found] == [f"after {k}", f"before {k}"], k


def test_delete_while_a_node_is_down_completes_when_it_returns(cluster):
    data_dir, addresses = cluster
    ep = ["--endpoint", addresses[0]]
    run("topic", "create", "spread", "--partitions", "6", *ep)
    old = produce_cli(ep, "spread", [f"k{i}:old {i}" for i in range(30)])
    run("local", "stop", "node-2", "--data-dir", data_dir)
    try:
        deleted = run("topic", "delete", "spread", *ep)
        doc = json.loads(deleted.stdout)
        assert list(doc["pending_nodes"]) == ["node-2"]
        assert "node-2 did not answer" in deleted.stderr.decode()
        pending = json.loads(run("cluster", *ep).stdout)["deleted_topics"]["spread"]["pending"]
        assert pending == ["node-2"]
        refused = run("topic", "create", "spread", "--partitions", "2", *ep, check=False)
        assert refused.returncode == 1 and "node-2" in refused.stderr.decode()
    finally:
        run("local", "restart", "node-2", "--data-dir", data_dir)
    # node-2 deleted its copy when it started, and said so in the routing file
    assert "deleted_topics" not in json.loads(run("cluster", *ep).stdout)
    assert_deleted(addresses[2], "spread", [r["msg_id"] for r in old], ["k1"])
    run("topic", "create", "spread", "--partitions", "6", *ep)
    assert consume_cli(ep, "spread") == []
    detail = json.loads(run("topic", "describe", "spread", *ep).stdout)
    assert detail["messages"] == 0 and detail["unreachable_nodes"] == []


def test_sync_and_async_clients_delete_and_add_partitions(node_factory):
    import asyncio

    from storage_node.client import AsyncClient, Client
    from storage_node.errors import InvalidArgument, UnknownTopic

    n = node_factory("clients")
    with Client(n.address) as client:
        client.create_topic("c", 1)
        assert client.add_partitions("c", 3)["partitions"] == 3
        with pytest.raises(InvalidArgument):
            client.add_partitions("c", 2)
        assert client.delete_topic("c")["deleted"] is True
        with pytest.raises(UnknownTopic):
            client.delete_topic("c")

    async def main() -> None:
        async with AsyncClient(n.address) as client:
            await client.create_topic("a", 2)
            grown = await client.add_partitions("a", 4)
            assert grown["partitions"] == 4 and grown["previous_partitions"] == 2
            assert (await client.delete_topic("a"))["pending_nodes"] == {}
            with pytest.raises(UnknownTopic):
                await client.add_partitions("a", 5)
            assert await client.list_topics() == []

    asyncio.run(main())
