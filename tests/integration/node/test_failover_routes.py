"""Every route family on a replicated node after a failover (factor 3, the failover
controller of a local cluster): the survivor that took a log over answers for that log's
partitions from its copy of the log, never from another log's store and never as empty.

Each request goes to the new leader alone (``scope=local``, or the log named with
``?log=``), so what it answers is what that node serves. The partition service picks the
store for every route; before it, the admin, compaction and file routes used the node's
own log only, and topic changes reached a taken-over log's copy only with the next routing
reload."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import requests

from storage_node.cli.local import LocalCluster
from storage_node.client import Client
from tests.integration.node.failover import fail_over
from tests.waiting import wait_until

MESSAGES = 1200
GROUP = "g1"


@dataclass
class TakenOver:
    cluster: LocalCluster
    victim: str  # the killed node (its log's id)
    leader: str  # the address of the survivor leading the victim's log now
    leader_id: str
    taken: list[int]  # the partitions of the victim's log
    before: list[dict[str, Any]]  # describe's partition offsets before the failover
    produced: list[dict[str, Any]]  # {"partition", "offset", "msg_id"} per message


def _get(url: str, **params: Any) -> requests.Response:
    return requests.get(url, params=params, timeout=30)


def _ok(resp: requests.Response) -> Any:
    assert resp.status_code == 200, (resp.status_code, resp.text)
    return resp.json()


@pytest.fixture(scope="module")
def taken_over(tmp_path_factory: pytest.TempPathFactory) -> Any:
    cluster = LocalCluster(tmp_path_factory.mktemp("failover-routes") / "c")
    cluster.up(nodes=3, replication_factor=3)
    try:
        cluster.wait_leaders()
        with Client(cluster.addresses) as client:
            client.create_topic("f", 6)
            produced = client.produce(
                "f", [{"key": f"k{i}", "value": str(i)} for i in range(MESSAGES)]
            )
            before = client.describe_topic("f")["partition_offsets"]
            for p in range(6):  # committed on each partition's leader, into its log
                client.commit_offset(GROUP, "f", p, before[p]["next_offset"] // 2)
        victim, doc = fail_over(cluster, "f", before)
        offsets = doc["partition_offsets"]
        taken = [p["partition"] for p in offsets if p["owner"] == victim.id]
        assert taken
        leader = offsets[taken[0]]["owner_address"]
        leader_id = next(n.id for n in cluster.nodes if n.address == leader)

        def leading() -> bool:  # the routing table names it; wait until it acts on it
            logs = _ok(_get(f"{leader}/v1/replication/status"))["logs"]
            return bool(logs.get(victim.id, {}).get("role") == "leader")

        wait_until(leading, 60, f"{leader} to lead the log of {victim.id}", 0.2)
        yield TakenOver(cluster, victim.id, leader, leader_id, taken, before, produced)
    finally:
        cluster.down()


def test_describe_answers_the_taken_over_partitions(taken_over: TakenOver) -> None:
    t = taken_over
    doc = _ok(_get(f"{t.leader}/v1/topics/f", scope="local"))
    for p in t.taken:
        info = doc["partition_offsets"][p]
        assert info["next_offset"] == t.before[p]["next_offset"] > 0
        assert info["owner_address"] == t.leader


def test_reads_and_fetches_answer_the_taken_over_partitions(taken_over: TakenOver) -> None:
    t = taken_over
    for p in t.taken:
        doc = _ok(_get(f"{t.leader}/v1/topics/f/partitions/{p}/messages", max_messages=10_000))
        assert len(doc["messages"]) == t.before[p]["next_offset"]
        assert all(m["partition"] == p for m in doc["messages"])
    body = {"partitions": [{"partition": p, "offset": 0} for p in t.taken], "max_messages": 10_000}
    resp = requests.post(f"{t.leader}/v1/topics/f/fetch", json=body, timeout=30)
    pages = {page["partition"]: page for page in _ok(resp)["partitions"]}
    for p in t.taken:
        assert len(pages[p]["messages"]) == t.before[p]["next_offset"]


def test_lookups_find_the_taken_over_logs_messages(taken_over: TakenOver) -> None:
    t = taken_over
    mine = [(i, r) for i, r in enumerate(t.produced) if r["partition"] in t.taken]
    i, result = mine[len(mine) // 2]
    by_id = _ok(_get(f"{t.leader}/v1/messages/{result['msg_id']}", scope="local"))
    assert (by_id["partition"], by_id["offset"], by_id["value"]) == (
        result["partition"],
        result["offset"],
        str(i),
    )
    by_key = _ok(_get(f"{t.leader}/v1/topics/f/keys/k{i}", scope="local"))
    assert [m["value"] for m in by_key["messages"]] == [str(i)]


def test_group_offsets_of_the_taken_over_partitions(taken_over: TakenOver) -> None:
    t = taken_over
    doc = _ok(_get(f"{t.leader}/v1/consumer-groups/{GROUP}/offsets", scope="local"))
    for p in t.taken:
        assert doc["offsets"]["f"][str(p)] == t.before[p]["next_offset"] // 2
    groups = _ok(_get(f"{t.leader}/v1/consumer-groups", scope="local"))
    assert GROUP in groups["groups"]
    p = t.taken[0]
    body = {"topic": "f", "partition": p, "offset": t.before[p]["next_offset"]}
    resp = requests.post(f"{t.leader}/v1/consumer-groups/{GROUP}/offsets", json=body, timeout=30)
    _ok(resp)
    doc = _ok(_get(f"{t.leader}/v1/consumer-groups/{GROUP}/offsets", scope="local"))
    assert doc["offsets"]["f"][str(p)] == t.before[p]["next_offset"]


def test_admin_changes_reach_the_taken_over_log_at_once(taken_over: TakenOver) -> None:
    t = taken_over
    resp = requests.post(
        f"{t.leader}/v1/topics", json={"name": "later", "partitions": 6}, timeout=30
    )
    assert resp.status_code in (200, 201), resp.text
    for p in t.taken:  # a partition of the taken-over log, written through its leader
        body = {"messages": [{"value": f"later-{p}", "partition": p}]}
        _ok(requests.post(f"{t.leader}/v1/topics/later/messages", json=body, timeout=30))
        doc = _ok(_get(f"{t.leader}/v1/topics/later/partitions/{p}/messages"))
        assert [m["value"] for m in doc["messages"]] == [f"later-{p}"]
    grown = requests.post(
        f"{t.leader}/v1/topics/later/partitions", json={"partitions": 9}, timeout=30
    )
    assert _ok(grown)["partitions"] == 9
    doc = _ok(_get(f"{t.leader}/v1/topics/later", scope="local"))
    assert len(doc["partition_offsets"]) == 9


def test_files_and_compaction_of_the_taken_over_log(taken_over: TakenOver) -> None:
    t = taken_over
    own = _ok(_get(f"{t.leader}/v1/admin/files", log=t.leader_id))["files"]
    taken = _ok(_get(f"{t.leader}/v1/admin/files", log=t.victim))["files"]
    every = _ok(_get(f"{t.leader}/v1/admin/files"))["files"]
    assert any(f["kind"] == "segment" and f["size"] > 0 for f in taken)
    assert len(every) == len(own) + len(taken)  # the logs it leads: its own and the taken
    sealed = requests.post(f"{t.leader}/v1/admin/seal", params={"log": t.victim}, timeout=60)
    assert any(f["kind"] == "segment" for f in _ok(sealed)["sealed"])
    listed = _ok(_get(f"{t.leader}/v1/admin/sealed", log=t.victim))["files"]
    assert listed
    compacted = requests.post(f"{t.leader}/v1/admin/compact", params={"log": t.victim}, timeout=120)
    assert _ok(compacted)["report"]["segments"] >= 1
    states = {f["state"] for f in _ok(_get(f"{t.leader}/v1/admin/files", log=t.victim))["files"]}
    assert "compacted" in states
    for p in t.taken:  # still every message, now from compacted segments
        doc = _ok(_get(f"{t.leader}/v1/topics/f/partitions/{p}/messages", max_messages=10_000))
        assert len(doc["messages"]) == t.before[p]["next_offset"]
    # a log this node does not lead is refused with the leader's name, not another log's
    other = next(n.id for n in t.cluster.nodes if n.id not in (t.victim, t.leader_id))
    refused = _get(f"{t.leader}/v1/admin/files", log=other)
    assert refused.status_code == 421, refused.text
    assert refused.json()["error"]["owner_id"] == other
