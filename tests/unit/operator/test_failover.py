"""The operator's failover side: which replication changes a published store refuses, and
what the MessageStore status says about replicated logs."""

from __future__ import annotations

import json

import pytest
from msgstore_operator.assignment import assign_partitions
from msgstore_operator.failover import replication_status
from msgstore_operator.reconcile import SpecProblem, _check_replication_change
from msgstore_operator.routing import build_routing_document, dumps, read_published
from msgstore_operator.spec import parse_spec

from storage_node.replication.controller import Controller
from storage_node.wire.routing_table import RoutingTable, parse_routing


def _spec(replicas: int, factor: int):
    return parse_spec(
        {
            "replicas": replicas,
            "replicationFactor": factor,
            "topics": [{"name": "t", "partitions": 2}],
        }
    )


def _published(replicas: int, factor: int):
    spec = _spec(replicas, factor)
    owners = assign_partitions(spec.topics, replicas, {})
    doc = build_routing_document("s", "ns", spec, replicas, owners, 1, "cluster.local")
    return read_published("s", dumps(doc))


def test_a_new_store_may_have_any_valid_factor():
    _check_replication_change(_spec(3, 3), None)


@pytest.mark.parametrize(
    ("published", "wanted", "message"),
    [
        ((3, 1), (3, 3), "replicationFactor cannot change"),
        ((3, 3), (3, 1), "replicationFactor cannot change"),
        ((3, 3), (3, 2), "replicationFactor cannot change"),
        ((3, 3), (4, 3), "keeps its 3 nodes"),
    ],
)
def test_a_published_store_keeps_its_replication_shape(published, wanted, message):
    with pytest.raises(SpecProblem, match=message):
        _check_replication_change(_spec(*wanted), _published(*published))


def test_an_unreplicated_store_may_still_scale():
    _check_replication_change(_spec(5, 1), _published(3, 1))


def _table() -> RoutingTable:
    return parse_routing(json.loads(dumps(_published(3, 3).document)))


def test_status_of_logs_before_any_leader_acts_is_under_replicated():
    status = replication_status(_published(3, 3).document, None)
    assert status is not None
    assert status["factor"] == 3 and status["minInSync"] == 2
    assert status["underReplicated"] == ["s-0", "s-1", "s-2"]
    assert [row["inSync"] for row in status["logs"]] == [0, 0, 0]
    assert status["leaderChanges"] == 0


def test_status_reports_copies_in_sync_and_the_largest_lag():
    table = _table()
    logs = {i: type(lg)(i, lg.leader, 1, lg.replicas) for i, lg in table.logs.items()}
    doc = table.with_logs(logs).to_json()
    ctl = Controller(lambda: table, lambda change: table)
    followers = {
        "s-1": {"acked": 90, "lag_bytes": 10, "in_sync": True},
        "s-2": {"acked": 40, "lag_bytes": 60, "in_sync": False},
    }
    ctl.statuses = {
        "s-0": {"logs": {"s-0": {"role": "leader", "in_sync": 2, "followers": followers}}},
        "s-1": {"logs": {"s-1": {"role": "leader", "in_sync": 3, "followers": {}}}},
        "s-2": None,  # did not answer
    }
    status = replication_status(doc, ctl)
    assert status is not None
    rows = {row["log"]: row for row in status["logs"]}
    assert rows["s-0"] == {"log": "s-0", "leader": "s-0", "epoch": 1, "inSync": 2, "lagBytes": 60}
    assert rows["s-1"]["inSync"] == 3 and rows["s-2"]["inSync"] == 0
    assert status["underReplicated"] == ["s-0", "s-2"]


def test_an_unreplicated_store_has_no_replication_status():
    assert replication_status(_published(3, 1).document, None) is None
