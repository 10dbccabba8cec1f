"""Fuzz the node from its own OpenAPI document (schemathesis): no 5xx, answers match the
document, and a rejected request changes nothing."""

from __future__ import annotations

import json

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS

from storage_node.server.openapi import openapi_document
from storage_node.wire.batch_codec import CONTENT_TYPE as BATCH_CONTENT_TYPE

doc = openapi_document()
# draining makes later writes answer 503 on purpose; it has its own test in test_api.py
del doc["paths"]["/v1/admin/drain"]
# every created topic costs files and fsyncs per partition: keep fuzzed topics small (the
# 1..MAX_PARTITIONS bounds themselves are tested in test_api.py)
doc["components"]["schemas"]["TopicSpec"]["properties"]["partitions"]["maximum"] = 4
doc["components"]["schemas"]["TopicPartitions"]["properties"]["partitions"]["maximum"] = 4
# a long poll waits for its time when nothing arrives: keep fuzzed waits short
_read = doc["paths"]["/v1/topics/{topic}/partitions/{partition}/messages"]["get"]
next(p for p in _read["parameters"] if p["name"] == "wait_ms")["schema"]["maximum"] = 20
schema = schemathesis.openapi.from_dict(doc)


@schemathesis.serializer(BATCH_CONTENT_TYPE)
def batch_bytes(ctx, value):
    """Send generated binary bodies as they are (the node must reject garbage with 400)."""
    return value if isinstance(value, bytes) else str(value).encode()


CHECK_NAMES = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
)
SELECTED = [c for c in CHECKS.get_all() if c.__name__ in CHECK_NAMES]


@pytest.fixture(scope="module")
def fuzz_node(tmp_path_factory):
    from tests.integration.node.conftest import NodeProcess

    n = NodeProcess(tmp_path_factory.mktemp("fuzz"), {"MSGSTORE_MAX_MESSAGE_BYTES": "65536"})
    n.start()
    requests.post(n.url("/v1/topics"), json={"name": "fuzz", "partitions": 2})
    requests.post(
        n.url("/v1/topics/fuzz/messages"),
        json={"messages": [{"value": f"v{i}", "key": "k"} for i in range(5)]},
    )
    yield n
    n.stop()


SESSION = requests.Session()


def snapshot(node) -> str:
    """Everything a write could change, as one comparable string."""
    topics = SESSION.get(node.url("/v1/topics")).json()["topics"]
    state = {}
    for t in topics:
        detail = SESSION.get(node.url(f"/v1/topics/{t['name']}")).json()
        state[t["name"]] = [t, detail["partition_offsets"]]
    return json.dumps(state, sort_keys=True)


def test_checks_are_known():
    assert len(SELECTED) == len(CHECK_NAMES)


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_fuzz(case, fuzz_node):
    is_write = case.method.upper() in ("POST", "PUT", "DELETE")
    before = snapshot(fuzz_node) if is_write else None
    response = case.call(base_url=fuzz_node.address, session=SESSION)
    assert response.status_code < 500, (case.method, case.path, response.text)
    case.validate_response(response, checks=SELECTED)
    if is_write and response.status_code >= 400:
        assert snapshot(fuzz_node) == before, (case.method, case.formatted_path, response.text)
