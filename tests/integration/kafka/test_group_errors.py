"""The group APIs' answers to requests a well-behaved client rarely sends, over a raw Kafka
connection to a real node: each gets the error code Kafka clients act on, and a refused
commit stores nothing."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import requests
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v3 import request as join_v3
from kio.schema.join_group.v5 import request as join_v5
from kio.schema.leave_group.v3.request import LeaveGroupRequest, MemberIdentity
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.sync_group.v5.request import SyncGroupRequest

from tests.integration.kafka.conftest import KafkaNode, topic_name
from tests.integration.kafka.wire import Wire

SECOND = datetime.timedelta(seconds=1)


def call(node: KafkaNode, request: Any) -> Any:
    """Send one request on a new connection and parse the answer."""
    wire = Wire(node.kafka_port)
    try:
        return wire.call(request)
    finally:
        wire.close()


def join(version: Any, group: str, member_id: str = "", session_s: int = 10, **kw: Any) -> Any:
    protocol = version.JoinGroupRequestProtocol(name="range", metadata=b"\x00")
    return version.JoinGroupRequest(
        group_id=group, session_timeout=session_s * SECOND, rebalance_timeout=10 * SECOND,
        member_id=member_id, protocol_type=kw.pop("protocol_type", "consumer"),
        protocols=(protocol,), **kw,
    )  # fmt: skip


def commit(group: str, topic: str, partition: int, offset: int, **kw: Any) -> Any:
    part = commit_v8.OffsetCommitRequestPartition(
        partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
        committed_metadata=kw.pop("metadata", ""),
    )  # fmt: skip
    return commit_v8.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=kw.pop("generation", -1),
        member_id=kw.pop("member_id", ""), group_instance_id=None,
        topics=(commit_v8.OffsetCommitRequestTopic(name=topic, partitions=(part,)),),
    )  # fmt: skip


def commit_error(node: KafkaNode, request: Any) -> ErrorCode:
    (topic,) = call(node, request).topics
    (part,) = topic.partitions
    return part.error_code


def stored(node: KafkaNode, group: str) -> dict[str, Any]:
    r = requests.get(node.url(f"/v1/consumer-groups/{group}/offsets"), timeout=10)
    return r.json()["offsets"] if r.status_code == 200 else {}


def test_member_ids_kip_394_from_v4_and_at_once_before(kafka_node: KafkaNode) -> None:
    first = call(kafka_node, join(join_v5, "kip394", group_instance_id=None))
    assert first.error_code == ErrorCode.member_id_required and first.member_id
    joined = call(kafka_node, join(join_v5, "kip394", first.member_id, group_instance_id=None))
    assert joined.error_code == ErrorCode.none and joined.generation_id == 1
    assert joined.leader == first.member_id and len(joined.members) == 1
    old = call(kafka_node, join(join_v3, "pre-kip394"))  # v3: an id and the generation at once
    assert old.error_code == ErrorCode.none and old.member_id.startswith("wire-test-")


def test_bad_join_sync_heartbeat_leave_and_coordinator_requests(kafka_node: KafkaNode) -> None:
    bad_name = call(kafka_node, join(join_v3, "no/slash"))
    assert bad_name.error_code == ErrorCode.invalid_group_id
    short = call(kafka_node, join(join_v3, "short-session", session_s=1))
    assert short.error_code == ErrorCode.invalid_session_timeout
    unknown = call(kafka_node, join(join_v3, "nobody-here", member_id="made-up"))
    assert unknown.error_code == ErrorCode.unknown_member_id
    beat = HeartbeatRequest(group_id="nobody-here", generation_id=1, member_id="m",
                            group_instance_id=None)  # fmt: skip
    assert call(kafka_node, beat).error_code == ErrorCode.unknown_member_id
    sync = SyncGroupRequest(
        group_id="nobody-here", generation_id=1, member_id="m", group_instance_id=None,
        protocol_type="consumer", protocol_name="range", assignments=(),
    )  # fmt: skip
    assert call(kafka_node, sync).error_code == ErrorCode.unknown_member_id
    leave = LeaveGroupRequest(
        group_id="nobody-here",
        members=(MemberIdentity(member_id="a"), MemberIdentity(member_id="b")),
    )
    answer = call(kafka_node, leave)
    assert answer.error_code == ErrorCode.none
    assert [m.error_code for m in answer.members] == [ErrorCode.unknown_member_id] * 2
    txn = call(kafka_node, FindCoordinatorRequest(key="tx", key_type=1))
    assert txn.error_code == ErrorCode.invalid_request
    group = call(kafka_node, FindCoordinatorRequest(key="any-group", key_type=0))
    assert group.error_code == ErrorCode.none and group.port == kafka_node.kafka_port


def test_refused_commits_store_nothing(
    kafka_node: KafkaNode, request: pytest.FixtureRequest
) -> None:
    topic, group = topic_name(request), "refused-commits"
    kafka_node.create_topic(topic, partitions=2)
    r = requests.post(kafka_node.url(f"/v1/topics/{topic}/messages"),
                      json={"messages": [{"value": "a"}, {"value": "b"}]}, timeout=10)  # fmt: skip
    assert r.status_code == 200
    end = kafka_node.offsets(topic)[0][1]
    cases = [
        (commit(group, "no-such-topic", 0, 0), ErrorCode.unknown_topic_or_partition),
        (commit(group, topic, 2, 0), ErrorCode.unknown_topic_or_partition),
        (commit(group, topic, 0, end + 1), ErrorCode.offset_out_of_range),
        (commit(group, topic, 0, 0, metadata="m" * 4097), ErrorCode.offset_metadata_too_large),
        (commit(group, topic, 0, 0, generation=3, member_id="m"), ErrorCode.illegal_generation),
        (commit("bad/name", topic, 0, 0), ErrorCode.invalid_group_id),
    ]
    for req, expected in cases:
        assert commit_error(kafka_node, req) == expected
    assert stored(kafka_node, group) == {}


def test_commit_outside_group_management_then_fetch_with_metadata(
    kafka_node: KafkaNode, request: pytest.FixtureRequest
) -> None:
    topic, group = topic_name(request), "manual-commits"
    kafka_node.create_topic(topic, partitions=2)
    r = requests.post(kafka_node.url(f"/v1/topics/{topic}/messages"),
                      json={"messages": [{"value": "a"}] * 4}, timeout=10)  # fmt: skip
    assert r.status_code == 200
    end = kafka_node.offsets(topic)[1][1]
    assert commit_error(kafka_node, commit(group, topic, 1, end, metadata="note")) == 0
    assert stored(kafka_node, group) == {topic: {"1": end}}
    fetch = OffsetFetchRequest(
        group_id=group, require_stable=True,
        topics=(OffsetFetchRequestTopic(name=topic, partition_indexes=(0, 1)),),
    )  # fmt: skip
    answer = call(kafka_node, fetch)
    assert answer.error_code == ErrorCode.none
    (t,) = answer.topics
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in t.partitions] == [
        (0, -1, ""),
        (1, end, "note"),
    ]
    everything = call(kafka_node, OffsetFetchRequest(group_id=group, topics=None,
                                                     require_stable=False))  # fmt: skip
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in everything.topics] == [
        (topic, [end])
    ]
