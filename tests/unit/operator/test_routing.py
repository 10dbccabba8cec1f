"""The published routing table is a valid docs/ROUTING.md document, read back exactly."""

import json

import pytest
from msgstore_operator.assignment import assign_partitions
from msgstore_operator.routing import (
    build_routing_document,
    dumps,
    ordinal_of,
    read_published,
    with_generation,
)
from msgstore_operator.spec import parse_spec

from storage_node.wire.routing_table import parse_routing

SPEC = parse_spec(
    {
        "retentionHours": 24,
        "topics": [
            {"name": "orders", "partitions": 4, "compression": "lz4"},
            {"name": "audit", "partitions": 2, "compression": "none", "retentionHours": 720},
        ],
    }
)


def build(spec=SPEC, nodes=3, existing=None, previous=None):
    owners = assign_partitions(spec.topics, nodes, existing or {})
    doc = build_routing_document("demo", "ns1", spec, nodes, owners, 0, "cluster.local")
    return with_generation(doc, previous)


def test_document_is_valid_for_the_nodes():
    doc = build()
    table = parse_routing(json.loads(dumps(doc)))
    assert table.managed_by == "operator" and table.generation == 1
    assert [n.id for n in table.nodes] == ["demo-0", "demo-1", "demo-2"]
    assert table.nodes[1].address == "https://demo-1.demo-nodes.ns1.svc.cluster.local:8080"
    assert table.topics["orders"].owners == ("demo-0", "demo-1", "demo-2", "demo-0")
    assert table.topics["audit"].compression == "none"
    assert table.topics["audit"].retention_hours == 720
    assert table.topics["orders"].retention_hours == 24


def test_read_back_gives_ordinals():
    doc = build()
    published = read_published("demo", dumps(doc))
    assert published.node_count == 3 and published.generation == 1
    assert published.owners == {"orders": [0, 1, 2, 0], "audit": [1, 2]}


def test_unchanged_table_keeps_its_generation_and_text():
    first = build()
    published = read_published("demo", dumps(first))
    again = build(existing=published.owners, previous=published)
    assert again["generation"] == 1 and dumps(again) == dumps(first)


def test_a_change_bumps_the_generation():
    published = read_published("demo", dumps(build()))
    spec = parse_spec(
        {"retentionHours": 24, "topics": [*SPEC_TOPICS, {"name": "new", "partitions": 3}]}
    )
    bumped = build(spec=spec, existing=published.owners, previous=published)
    assert bumped["generation"] == 2
    assert bumped["topics"]["orders"]["owners"] == ["demo-0", "demo-1", "demo-2", "demo-0"]
    scaled = build(nodes=5, existing=published.owners, previous=published)
    assert scaled["generation"] == 2 and len(scaled["nodes"]) == 5


SPEC_TOPICS = [
    {"name": "orders", "partitions": 4, "compression": "lz4"},
    {"name": "audit", "partitions": 2, "compression": "none", "retentionHours": 720},
]


def test_no_document_yet():
    assert read_published("demo", None) is None
    assert read_published("demo", "") is None


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"format": 2, "generation": 1, "nodes": [], "topics": {}}),
        json.dumps(
            {
                "format": 1,
                "generation": 1,
                "nodes": [{"id": "other-0", "address": "http://x:1"}],
                "topics": {},
            }
        ),
    ],
)
def test_invalid_document_is_an_error_not_a_guess(text):
    with pytest.raises(ValueError):
        read_published("demo", text)


def test_ordinal_of():
    assert ordinal_of("demo", "demo-12") == 12
    with pytest.raises(ValueError):
        ordinal_of("demo", "demox-1")


REPLICATED = parse_spec(
    {"replicas": 3, "replicationFactor": 3, "topics": [{"name": "orders", "partitions": 4}]}
)


def test_a_replicated_store_publishes_one_log_per_pod_copied_by_the_next_pods():
    doc = build(spec=REPLICATED)
    table = parse_routing(json.loads(dumps(doc)))
    assert (table.replication_factor, table.min_in_sync) == (3, 2)
    assert {i: (lg.leader, lg.epoch, lg.replicas) for i, lg in table.logs.items()} == {
        "demo-0": ("demo-0", 0, ("demo-0", "demo-1", "demo-2")),
        "demo-1": ("demo-1", 0, ("demo-1", "demo-2", "demo-0")),
        "demo-2": ("demo-2", 0, ("demo-2", "demo-0", "demo-1")),
    }
    assert table.topics["orders"].owners == ("demo-0", "demo-1", "demo-2", "demo-0")


def test_a_reconcile_pass_keeps_the_controllers_leaders_and_generation():
    """The failover controller writes leaders and epochs; the next pass must neither undo
    them nor bump the generation (the text it would write is the same)."""
    published = read_published("demo", dumps(build(spec=REPLICATED)))
    table = parse_routing(json.loads(dumps(published.document)))
    logs = dict(table.logs)
    logs["demo-1"] = type(logs["demo-1"])("demo-1", "demo-2", 4, logs["demo-1"].replicas)
    promoted = table.with_logs(logs)
    written = read_published("demo", dumps(promoted.to_json()))
    owners = assign_partitions(REPLICATED.topics, 3, written.owners)
    again = build_routing_document(
        "demo", "ns1", REPLICATED, 3, owners, 0, "cluster.local",
        written.document["topics"], written.document["logs"],
    )  # fmt: skip
    again = with_generation(again, written)
    assert again["generation"] == 2
    assert again["logs"]["demo-1"] == {
        "leader": "demo-2",
        "epoch": 4,
        "replicas": ["demo-1", "demo-2", "demo-0"],
    }
    assert dumps(again) == dumps(written.document)
