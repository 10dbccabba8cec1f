"""Kafka ACLs, table-driven over every API the listener serves: for each (principal,
operation, resource) an allowed request succeeds, and a refused one gets Kafka's
authorization error (TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED) and changes nothing the
node holds (topics, messages, committed offsets, group members). Real node, real access
file, raw requests over SASL/PLAIN; listings (Metadata of all topics, ListGroups, OffsetFetch
of all topics) leave out what the principal may not describe; every denial is logged with
principal, operation, resource and source, and counted."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from kio.schema.create_partitions.v2.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v5.request import DeleteTopicsRequest
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.leave_group.v4.request import LeaveGroupRequest, MemberIdentity
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.sync_group.v5.request import SyncGroupRequest

from storage_node.kafka.listener import build_table
from tests.integration.kafka.acl_support import (
    AUTH,
    RULES,
    SECOND,
    USERS,
    append,
    committed,
    create_topic,
    join,
    joined_member,
    login,
    members,
    snapshot,
    start_node,
    topics,
)
from tests.integration.kafka.conftest import KafkaNode
from tests.integration.kafka.wire import Wire, record_batch

E = ErrorCode
TOPIC_DENIED, GROUP_DENIED = E.topic_authorization_failed, E.group_authorization_failed
CLUSTER_DENIED = E.cluster_authorization_failed
PRE_AUTH = {18, 17, 36}  # ApiVersions and SASL: served before any principal exists


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaNode]:
    n = start_node(tmp_path_factory.mktemp("kafka-acl"), USERS, RULES)
    yield n
    n.stop()


@dataclass
class Env:
    """What a probe gets: the node and the names of this case's resources."""

    node: KafkaNode
    cid: str
    member: tuple[str, int] = ("", -1)

    def t(self, prefix: str) -> str:
        return f"{prefix}-{self.cid}"

    @property
    def group(self) -> str:
        return f"g-{self.cid}"


# -- one probe per API: send the request, return the error code that decides the case ------
def produce_request(*names: str) -> ProduceRequest:
    batch = bytes(record_batch([(b"k", b"v")]))
    return ProduceRequest(
        transactional_id=None, acks=1, timeout=10 * SECOND,
        topic_data=tuple(
            TopicProduceData(name=n, partition_data=(PartitionProduceData(index=0, records=batch),))
            for n in names
        ),
    )  # fmt: skip


def produce(w: Wire, env: Env) -> Any:
    (part,) = w.call(produce_request(env.t("w"))).responses[0].partition_responses
    assert (topics(env.node, env.cid)[env.t("w")] == [[0, 1]]) is (part.error_code == E.none)
    return part.error_code


def fetch(w: Wire, env: Env) -> Any:
    part = FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                          last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)  # fmt: skip
    answer = w.call(
        FetchRequest(
            cluster_id=None,
            replica_id=-1,
            max_wait=datetime.timedelta(0),
            min_bytes=0,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(FetchTopic(topic=env.t("r"), partitions=(part,)),),
            forgotten_topics_data=(),
            rack_id="",
        )  # fmt: skip
    )
    (got,) = answer.responses[0].partitions
    assert bool(got.records) is (got.error_code == E.none)  # no record when refused
    return got.error_code


def list_offsets(w: Wire, env: Env) -> Any:
    part = ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)
    answer = w.call(ListOffsetsRequest(replica_id=-1, isolation_level=0,
                                       topics=(ListOffsetsTopic(name=env.t("r"), partitions=(part,)),)))  # fmt: skip
    (got,) = answer.topics[0].partitions
    assert (got.offset == 1) is (got.error_code == E.none)
    return got.error_code


def metadata_of(name: str) -> Callable[[Wire, Env], Any]:
    def probe(w: Wire, env: Env) -> Any:
        wanted = (MetadataRequestTopic(topic_id=None, name=name.format(cid=env.cid)),)
        (topic,) = w.call(MetadataRequest(topics=wanted, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False)).topics  # fmt: skip
        assert (len(topic.partitions) == 1) is (topic.error_code == E.none)
        return topic.error_code

    return probe


def offset_commit(topic_prefix: str) -> Callable[[Wire, Env], Any]:
    def probe(w: Wire, env: Env) -> Any:
        part = commit_v8.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                      committed_leader_epoch=-1, committed_metadata="")  # fmt: skip
        answer = w.call(commit_v8.OffsetCommitRequest(
            group_id=env.group, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None,
            topics=(commit_v8.OffsetCommitRequestTopic(name=env.t(topic_prefix), partitions=(part,)),),
        ))  # fmt: skip
        code = answer.topics[0].partitions[0].error_code
        if code == E.none:
            assert committed(env.node, env.group) == {env.t(topic_prefix): {"0": 1}}
        return code

    return probe


def offset_fetch(topic_prefix: str) -> Callable[[Wire, Env], Any]:
    def probe(w: Wire, env: Env) -> Any:
        wanted = (OffsetFetchRequestTopic(name=env.t(topic_prefix), partition_indexes=(0,)),)
        answer = w.call(OffsetFetchRequest(group_id=env.group, topics=wanted, require_stable=False))
        if answer.error_code != E.none:
            return answer.error_code
        (part,) = answer.topics[0].partitions
        assert (part.committed_offset == 1) is (part.error_code == E.none)
        return part.error_code

    return probe


def find_coordinator(w: Wire, env: Env) -> Any:
    return w.call(FindCoordinatorRequest(key=env.group, key_type=0)).error_code


def join_group(w: Wire, env: Env) -> Any:
    first = w.call(join(env.group))
    if first.error_code != E.member_id_required:
        return first.error_code
    return w.call(join(env.group, first.member_id)).error_code


def sync_group(w: Wire, env: Env) -> Any:
    member, generation = env.member
    return w.call(SyncGroupRequest(group_id=env.group, generation_id=generation, member_id=member,
                                   group_instance_id=None, protocol_type="consumer",
                                   protocol_name="range", assignments=())).error_code  # fmt: skip


def heartbeat(w: Wire, env: Env) -> Any:
    member, generation = env.member
    return w.call(HeartbeatRequest(group_id=env.group, generation_id=generation,
                                   member_id=member, group_instance_id=None)).error_code  # fmt: skip


def leave_group(w: Wire, env: Env) -> Any:
    member, _ = env.member
    answer = w.call(
        LeaveGroupRequest(group_id=env.group, members=(MemberIdentity(member_id=member),))
    )
    if answer.error_code == E.none:
        assert members(env.node, env.group) == []
    return answer.error_code


def describe_groups(w: Wire, env: Env) -> Any:
    (group,) = w.call(DescribeGroupsRequest(groups=(env.group,),
                                            include_authorized_operations=False)).groups  # fmt: skip
    assert (len(group.members) == 1) is (group.error_code == E.none)
    return group.error_code


def create_topics(w: Wire, env: Env) -> Any:
    topic = CreatableTopic(name=env.t("c"), num_partitions=1, replication_factor=-1,
                           assignments=(), configs=())  # fmt: skip
    (got,) = w.call(CreateTopicsRequest(topics=(topic,), timeout=10 * SECOND,
                                        validate_only=False)).topics  # fmt: skip
    assert (env.t("c") in topics(env.node, env.cid)) is (got.error_code == E.none)
    return got.error_code


def delete_topics(w: Wire, env: Env) -> Any:
    (got,) = w.call(DeleteTopicsRequest(topic_names=(env.t("d"),), timeout=10 * SECOND)).responses
    assert (env.t("d") not in topics(env.node, env.cid)) is (got.error_code == E.none)
    return got.error_code


def create_partitions(w: Wire, env: Env) -> Any:
    grow = CreatePartitionsTopic(name=env.t("c"), count=2, assignments=None)
    (got,) = w.call(CreatePartitionsRequest(topics=(grow,), timeout=10 * SECOND,
                                            validate_only=False)).results  # fmt: skip
    assert (len(topics(env.node, env.cid)[env.t("c")]) == 2) is (got.error_code == E.none)
    return got.error_code


def init_producer_id(w: Wire, env: Env) -> Any:
    got = w.call(InitProducerIdRequest(transactional_id=None, transaction_timeout=60 * SECOND,
                                       producer_id=-1, producer_epoch=-1))  # fmt: skip
    assert (got.producer_id >= 0) is (got.error_code == E.none)
    return got.error_code


def offset_for_leader_epoch(w: Wire, env: Env) -> Any:
    part = OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)
    answer = w.call(OffsetForLeaderEpochRequest(replica_id=-1, topics=(
        OffsetForLeaderTopic(topic=env.t("r"), partitions=(part,)),)))  # fmt: skip
    return answer.topics[0].partitions[0].error_code


def describe_configs(resource_type: int, name: str) -> Callable[[Wire, Env], Any]:
    def probe(w: Wire, env: Env) -> Any:
        resource = DescribeConfigsResource(resource_type=resource_type,
                                           resource_name=name.format(cid=env.cid),
                                           configuration_keys=None)  # fmt: skip
        (got,) = w.call(DescribeConfigsRequest(resources=(resource,), include_synonyms=False,
                                               include_documentation=False)).results  # fmt: skip
        assert (len(got.configs) > 0) is (got.error_code == E.none)
        return got.error_code

    return probe


def describe_cluster(w: Wire, env: Env) -> Any:
    return w.call(DescribeClusterRequest(include_cluster_authorized_operations=False)).error_code


# -- the table ----------------------------------------------------------------------------
def topics_rw(env: Env) -> None:
    """The case's topics: r-<cid> with one message, w-<cid> empty."""
    create_topic(env.node, env.t("r"))
    append(env.node, env.t("r"), "one")
    create_topic(env.node, env.t("w"))


def with_commit(env: Env) -> None:
    topics_rw(env)
    wire = login(env.node, "super")
    try:
        assert offset_commit("r")(wire, env) == E.none
    finally:
        wire.close()


def with_member(env: Env) -> None:
    topics_rw(env)
    env.member = joined_member(env.node, env.group)


def with_topic(prefix: str) -> Callable[[Env], None]:
    return lambda env: create_topic(env.node, env.t(prefix))


@dataclass(frozen=True)
class Case:
    api_key: int
    api: str
    who: str
    expect: ErrorCode
    probe: Callable[[Wire, Env], Any]
    setup: Callable[[Env], None] = topics_rw

    @property
    def cid(self) -> str:
        return f"{self.api.lower()}-{self.who}-{self.expect.name.replace('_', '')[:12].lower()}"


CASES = [
    Case(0, "Produce", "writer", E.none, produce),
    Case(0, "Produce", "reader", TOPIC_DENIED, produce),
    Case(0, "Produce", "readtoken", TOPIC_DENIED, produce),
    Case(1, "Fetch", "reader", E.none, fetch),
    Case(1, "Fetch", "describer", TOPIC_DENIED, fetch),  # describe is not read
    Case(1, "Fetch", "writer", TOPIC_DENIED, fetch),
    Case(1, "Fetch", "readtoken", E.none, fetch),
    Case(2, "ListOffsets", "describer", E.none, list_offsets),
    Case(2, "ListOffsets", "stranger", TOPIC_DENIED, list_offsets),
    Case(3, "Metadata", "describer", E.none, metadata_of("r-{cid}")),
    Case(3, "Metadata", "reader", E.none, metadata_of("r-{cid}")),  # read implies describe
    Case(3, "Metadata", "stranger", TOPIC_DENIED, metadata_of("r-{cid}")),
    # a topic that does not exist: "unknown" only to whom may describe it
    Case(3, "MetadataUnknown", "describer", E.unknown_topic_or_partition, metadata_of("r-none")),
    Case(3, "MetadataUnknown", "stranger", TOPIC_DENIED, metadata_of("r-none")),
    Case(8, "OffsetCommit", "reader", E.none, offset_commit("r")),
    Case(8, "OffsetCommit", "describer", GROUP_DENIED, offset_commit("r")),
    Case(8, "OffsetCommitTopic", "reader", TOPIC_DENIED, offset_commit("w")),
    Case(8, "OffsetCommit", "readtoken", GROUP_DENIED, offset_commit("r")),  # reads only
    Case(9, "OffsetFetch", "describer", E.none, offset_fetch("r"), with_commit),
    Case(9, "OffsetFetch", "stranger", GROUP_DENIED, offset_fetch("r"), with_commit),
    Case(9, "OffsetFetchTopic", "describer", TOPIC_DENIED, offset_fetch("w"), with_commit),
    Case(10, "FindCoordinator", "describer", E.none, find_coordinator),
    Case(10, "FindCoordinator", "stranger", GROUP_DENIED, find_coordinator),
    Case(11, "JoinGroup", "reader", E.none, join_group),
    Case(11, "JoinGroup", "describer", GROUP_DENIED, join_group),
    Case(14, "SyncGroup", "reader", E.none, sync_group, with_member),
    Case(14, "SyncGroup", "describer", GROUP_DENIED, sync_group, with_member),
    Case(12, "Heartbeat", "reader", E.none, heartbeat, with_member),
    Case(12, "Heartbeat", "stranger", GROUP_DENIED, heartbeat, with_member),
    Case(13, "LeaveGroup", "reader", E.none, leave_group, with_member),
    Case(13, "LeaveGroup", "describer", GROUP_DENIED, leave_group, with_member),
    Case(15, "DescribeGroups", "describer", E.none, describe_groups, with_member),
    Case(15, "DescribeGroups", "stranger", GROUP_DENIED, describe_groups, with_member),
    Case(19, "CreateTopics", "creator", E.none, create_topics),
    Case(19, "CreateTopics", "writer", TOPIC_DENIED, create_topics),
    Case(19, "CreateTopics", "readtoken", TOPIC_DENIED, create_topics),
    Case(20, "DeleteTopics", "deleter", E.none, delete_topics, with_topic("d")),
    Case(20, "DeleteTopics", "creator", TOPIC_DENIED, delete_topics, with_topic("d")),
    Case(20, "DeleteTopics", "readtoken", TOPIC_DENIED, delete_topics, with_topic("d")),
    Case(37, "CreatePartitions", "creator", E.none, create_partitions, with_topic("c")),
    Case(37, "CreatePartitions", "writer", TOPIC_DENIED, create_partitions, with_topic("c")),
    Case(22, "InitProducerId", "writer", E.none, init_producer_id),
    Case(22, "InitProducerId", "super", E.none, init_producer_id),
    Case(22, "InitProducerId", "reader", CLUSTER_DENIED, init_producer_id),
    Case(22, "InitProducerId", "readtoken", CLUSTER_DENIED, init_producer_id),
    Case(23, "OffsetForLeaderEpoch", "describer", E.none, offset_for_leader_epoch),
    Case(23, "OffsetForLeaderEpoch", "stranger", TOPIC_DENIED, offset_for_leader_epoch),
    Case(32, "DescribeConfigs", "describer", E.none, describe_configs(2, "r-{cid}")),
    Case(32, "DescribeConfigs", "stranger", TOPIC_DENIED, describe_configs(2, "r-{cid}")),
    Case(32, "DescribeConfigsBroker", "stranger", E.none, describe_configs(4, "0")),
    Case(60, "DescribeCluster", "stranger", E.none, describe_cluster),
]
DENIED = {TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.cid)
def test_each_api_allows_what_the_rules_allow_and_refuses_the_rest(node: KafkaNode, case: Case):
    env = Env(node, case.cid)
    case.setup(env)
    before = snapshot(node, env.cid, env.group)
    wire = login(node, case.who)
    try:
        got = case.probe(wire, env)
    finally:
        wire.close()
    assert got == case.expect, f"{case.api} as {case.who}: {got!r}"
    if case.expect in DENIED:
        assert snapshot(node, env.cid, env.group) == before, "a refused request changed something"


def test_the_table_covers_every_api_the_listener_serves():
    """A new API gets its rows here (allowed and refused), as it gets its entry in
    ``kafka.acl.NEEDS``; ListGroups is covered by the listing test below."""
    covered = {c.api_key for c in CASES} | PRE_AUTH | {16}
    assert covered == set(build_table().apis)


def test_listings_leave_out_what_the_principal_may_not_describe(node: KafkaNode):
    env = Env(node, "listings")
    with_member(env)  # topics r-listings, w-listings; group g-listings with a member
    with_commit(Env(node, "listings2"))
    seen: dict[str, Any] = {}
    for who in ("describer", "stranger", "super"):
        wire = login(node, who)
        try:
            meta = wire.call(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False))  # fmt: skip
            groups = wire.call(ListGroupsRequest(states_filter=()))
            fetched = wire.call(OffsetFetchRequest(group_id="g-listings2", topics=None,
                                                   require_stable=False))  # fmt: skip
        finally:
            wire.close()
        seen[who] = (
            {t.name for t in meta.topics},
            {g.group_id for g in groups.groups},
            (fetched.error_code, {t.name for t in fetched.topics}),
        )
    d_topics, d_groups, d_fetched = seen["describer"]
    assert {"r-listings", "r-listings2"} <= d_topics
    assert all(t.startswith("r-") for t in d_topics), d_topics  # no w-, c-, d- topic
    assert "g-listings" in d_groups and all(g.startswith("g-") for g in d_groups)
    assert d_fetched == (E.none, {"r-listings2"})
    s_topics, s_groups, s_fetched = seen["stranger"]
    assert (s_topics, s_groups) == (set(), set())
    assert s_fetched[0] == GROUP_DENIED
    all_topics, all_groups, _ = seen["super"]
    assert {"r-listings", "w-listings"} <= all_topics and "g-listings" in all_groups


def test_a_commit_of_several_topics_keeps_the_allowed_ones(node: KafkaNode):
    """Per partition, as Kafka answers: the readable topic's offset is stored, the other is
    answered TOPIC_AUTHORIZATION_FAILED and not stored."""
    env = Env(node, "mixed")
    topics_rw(env)
    append(node, env.t("w"), "x")
    parts = (commit_v8.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                    committed_leader_epoch=-1,
                                                    committed_metadata=""),)  # fmt: skip
    wire = login(node, "reader")
    try:
        answer = wire.call(commit_v8.OffsetCommitRequest(
            group_id=env.group, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=tuple(
                commit_v8.OffsetCommitRequestTopic(name=env.t(p), partitions=parts)
                for p in ("r", "w")),
        ))  # fmt: skip
    finally:
        wire.close()
    codes = {t.name: t.partitions[0].error_code for t in answer.topics}
    assert codes == {env.t("r"): E.none, env.t("w"): TOPIC_DENIED}
    assert committed(node, env.group) == {env.t("r"): {"0": 1}}


def test_a_produce_of_several_topics_stores_only_the_allowed_ones(node: KafkaNode):
    env = Env(node, "mixed-produce")
    topics_rw(env)
    wire = login(node, "writer")
    try:
        answer = wire.call(produce_request(env.t("w"), env.t("r")))
    finally:
        wire.close()
    codes = {t.name: t.partition_responses[0].error_code for t in answer.responses}
    assert codes == {env.t("w"): E.none, env.t("r"): TOPIC_DENIED}
    held = topics(node, env.cid)
    assert held[env.t("w")] == [[0, 1]] and held[env.t("r")] == [[0, 1]]  # r: its one message


def test_denials_are_logged_with_principal_and_source_and_counted(node: KafkaNode):
    env = Env(node, "audit")
    topics_rw(env)
    before = requests.get(node.url("/metrics"), headers=AUTH, timeout=10).text
    wire = login(node, "reader")
    source = f"127.0.0.1:{wire.sock.getsockname()[1]}"
    try:
        assert produce(wire, env) == TOPIC_DENIED
    finally:
        wire.close()
    after = requests.get(node.url("/metrics"), headers=AUTH, timeout=10).text
    line = 'msgstore_access_denied_total{operation="write",resource="topic"}'
    assert counter(after, line) == counter(before, line) + 1
    lines = [json.loads(x) for x in node.log.read_text().splitlines() if x.startswith("{")]
    denials = [x for x in lines if x.get("resource") == "topic:w-audit"]
    assert denials and denials[-1]["principal"] == "reader"
    assert denials[-1]["operation"] == "write" and denials[-1]["source"] == source
    assert denials[-1]["msg"] == "access denied: reader may not write topic w-audit"


def counter(page: str, series: str) -> float:
    for row in page.splitlines():
        if row.startswith(series + " "):
            return float(row.split()[-1])
    raise AssertionError(f"{series} is not on the metrics page")
