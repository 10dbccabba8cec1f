"""`kubectl scale`: up adds a node that takes new partitions; down is refused while the node
to be removed owns data, and the status says why."""

from __future__ import annotations

import json

from e2e_support import Shop


def _routing(shop: Shop) -> dict:
    doc = shop.get("configmap", "orders-routing")["data"]["routing.json"]
    return dict(json.loads(doc))


def test_scaling_up_adds_a_node_that_takes_new_partitions(shop: Shop) -> None:
    shop.wait_store_ready(3)
    shop.kubectl("scale", "messagestore", "orders", "--replicas=4")
    shop.wait_store_ready(4)
    shop.cluster.wait_until(
        lambda: len(_routing(shop)["nodes"]) == 4, "the routing table to list 4 nodes", 120, 1
    )
    patch = [{"op": "add", "path": "/spec/topics/-", "value": {"name": "events", "partitions": 4}}]
    shop.kubectl("patch", "messagestore", "orders", "--type=json", "-p", json.dumps(patch))
    shop.cluster.wait_until(
        lambda: "events" in _routing(shop)["topics"], "topic events in the routing table", 120, 1
    )
    owners = _routing(shop)["topics"]["events"]["owners"]
    assert "orders-3" in owners, owners
    tables = shop.cluster.wait_until(
        lambda: (lambda t: t if len(t) == 4 and all("events" in d["topics"] for d in t.values())
                 else None)(shop.workload("cluster")),
        "every node serving the new table", 120, 2,
    )  # fmt: skip
    assert sorted(tables) == ["orders-0", "orders-1", "orders-2", "orders-3"]
    produced = shop.workload(
        "produce", "--topic", "events", "--run", "ev", "--count", "400", "--batch", "40"
    )
    assert not produced["unknown"], produced["errors"]
    on_new = [a for a in produced["acked"] if owners[a[1]] == "orders-3"]
    assert on_new, "some messages live on the new node"
    shop.check_acked(produced, "ev:", topic="events")


def test_scaling_down_is_refused_while_the_node_owns_data(shop: Shop) -> None:
    shop.kubectl("scale", "messagestore", "orders", "--replicas=3")

    def blocked() -> dict | None:
        conds = {c["type"]: c for c in shop.store_status().get("conditions", [])}
        cond = conds.get("ScaleDownBlocked", {})
        return cond if cond.get("status") == "True" else None

    cond = shop.cluster.wait_until(blocked, "ScaleDownBlocked=True", 120, 1)
    assert cond["reason"] == "PartitionsOwned" and "orders-3" in cond["message"], cond
    assert shop.get("statefulset", "orders")["spec"]["replicas"] == 4
    assert len(shop.node_pods()) == 4
    events = shop.kubectl(
        "get", "events", "--field-selector", "involvedObject.name=orders,reason=ScaleDownBlocked"
    ).stdout
    assert "ScaleDownBlocked" in events, events
