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
