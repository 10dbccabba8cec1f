"""The Kafka error code of each store error: a topic change an operator-managed store
refuses is a POLICY_VIOLATION (declare it in the MessageStore spec), never "already exists"."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from storage_node.errors import TopicConflict, TopicsManaged, UnknownTopic
from storage_node.kafka.errors import error_code
from storage_node.wire.routing_table import parse_routing


def test_a_topic_of_an_operator_managed_store_is_a_policy_violation() -> None:
    table = parse_routing(
        {
            "format": 1,
            "generation": 1,
            "managed_by": "operator",
            "nodes": [{"id": "n0", "address": "http://127.0.0.1:1"}],
            "topics": {},
        }
    )
    try:
        table.check_managed("declare 't'")
    except TopicsManaged as exc:
        assert error_code(exc) is ErrorCode.policy_violation
        assert "declare 't' there" in exc.message
    else:
        raise AssertionError("an operator's table must refuse topic changes")


def test_other_store_errors_keep_their_codes() -> None:
    assert error_code(TopicConflict("exists with 3 partitions")) is ErrorCode.topic_already_exists
    assert error_code(UnknownTopic("t")) is ErrorCode.unknown_topic_or_partition
