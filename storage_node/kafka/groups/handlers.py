"""The group APIs of the Kafka listener: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups. Each handler reads the
kio request of the version the client sent, makes one call to the node's groups
(``node_groups.NodeGroups``) and builds the answer of that version; the protocol's rules
live in ``coordinator.py``. Each asks the ACL check of its API first (``kafka.acl``: the
group, then the topics), as Kafka's broker does before its coordinator looks at anything.
"""

from __future__ import annotations

import asyncio
import datetime
import weakref
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from storage_node.kafka.groups.group import ErrorCode, GroupState, JoinRequest
from storage_node.kafka.groups.node_groups import NodeGroups
from storage_node.kafka.registry import Api, ApiTable, RequestContext

E = ErrorCode
NO_THROTTLE = datetime.timedelta(0)
NO_OPERATIONS = -(2**31)  # authorized_operations when the client did not ask for them
_groups: weakref.WeakKeyDictionary[Any, NodeGroups] = weakref.WeakKeyDictionary()


def groups_of(node: Any) -> NodeGroups:
    """The node's groups, made at its first group request (one per listener's node)."""
    found = _groups.get(node)
    if found is None:
        found = _groups[node] = NodeGroups(node.runtime)
    return found


def checked(ctx: RequestContext, ng: NodeGroups, group: str) -> ErrorCode:
    """GROUP_AUTHORIZATION_FAILED unless the API's operation on the group is allowed, then
    the node's own checks of the group (``NodeGroups.check``)."""
    if not ctx.guard.group(group):
        return E.GROUP_AUTHORIZATION_FAILED
    return ng.check(group)


def code(error: ErrorCode) -> KafkaError:
    return KafkaError(int(error))


def ms(value: datetime.timedelta) -> int:
    return int(value / datetime.timedelta(milliseconds=1))


# -- FindCoordinator (10) --------------------------------------------------------------
async def find_coordinator(ctx: RequestContext, req: Any) -> Any:
    keys = list(req.coordinator_keys) if ctx.api_version >= 4 else [req.key]
    key_type = getattr(req, "key_type", 0)
    answers = [_coordinator(ctx, key, key_type) for key in keys]
    if ctx.api_version >= 4:
        found = tuple(
            ctx.make("Coordinator", key=k, **a) for k, a in zip(keys, answers, strict=True)
        )
        return ctx.make("FindCoordinatorResponse", throttle_time=NO_THROTTLE, coordinators=found)
    return ctx.make("FindCoordinatorResponse", throttle_time=NO_THROTTLE, **answers[0])


def _coordinator(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    if key_type != 0:
        return {
            "error_code": KafkaError.invalid_request, "error_message":
            "only groups (key type 0) have a coordinator here; transactions are not supported",
            "node_id": -1, "host": "", "port": -1,
        }  # fmt: skip
    if not ctx.guard.group(key):
        return {
            "error_code": KafkaError.group_authorization_failed,
            "error_message": f"may not describe group {key}",
            "node_id": -1, "host": "", "port": -1,
        }  # fmt: skip
    node_id = groups_of(ctx.node).coordinator_node(key)
    for broker in ctx.node.brokers(ctx.listener):
        if broker.node_id == node_id:
            return {
                "error_code": KafkaError.none, "error_message": None,
                "node_id": broker.broker_id, "host": broker.host, "port": broker.port,
            }  # fmt: skip
    return {
        "error_code": KafkaError.coordinator_not_available,
        "error_message": f"node {node_id} has no Kafka address",
        "node_id": -1, "host": "", "port": -1,
    }  # fmt: skip


# -- JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13) ----------------------
async def join_group(ctx: RequestContext, req: Any) -> Any:
    ng = groups_of(ctx.node)
    error = checked(ctx, ng, req.group_id)
    if error is not E.NONE:
        return _join_answer(ctx, error, req.member_id)
    session_ms = ms(req.session_timeout)
    rebalance_ms = ms(getattr(req, "rebalance_timeout", req.session_timeout))
    join = JoinRequest(
        group_id=req.group_id,
        member_id=req.member_id,
        instance_id=getattr(req, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=ctx.client_host,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms if rebalance_ms > 0 else session_ms,
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
        require_known_member_id=ctx.api_version >= 4,
    )
    result = await ng.wait(ng.coordinator.join(join))
    members = tuple(
        ctx.make(
            "JoinGroupResponseMember",
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            metadata=m.metadata,
        )
        for m in result.members
    )
    return _join_answer(
        ctx, result.error, result.member_id, result.generation, result.protocol_type,
        result.protocol_name, result.leader_id, members,
    )  # fmt: skip


def _join_answer(
    ctx: RequestContext,
    error: ErrorCode,
    member_id: str,
    generation: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str = "",
    members: tuple[Any, ...] = (),
) -> Any:
    if ctx.api_version < 7:  # not nullable before v7
        protocol_name = protocol_name or ""
    return ctx.make(
        "JoinGroupResponse", throttle_time=NO_THROTTLE, error_code=code(error),
        generation_id=generation, protocol_type=protocol_type, protocol_name=protocol_name,
        leader=leader, skip_assignment=False, member_id=member_id, members=members,
    )  # fmt: skip


async def sync_group(ctx: RequestContext, req: Any) -> Any:
    ng = groups_of(ctx.node)
    error = checked(ctx, ng, req.group_id)
    if error is not E.NONE:
        return ctx.make("SyncGroupResponse", throttle_time=NO_THROTTLE, error_code=code(error),
                        protocol_type=None, protocol_name=None, assignment=b"")  # fmt: skip
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
    reply = ng.coordinator.sync(
        req.group_id, req.generation_id, req.member_id, assignments,
        getattr(req, "protocol_type", None), getattr(req, "protocol_name", None),
        getattr(req, "group_instance_id", None),
    )  # fmt: skip
    result = await ng.wait(reply)
    return ctx.make(
        "SyncGroupResponse", throttle_time=NO_THROTTLE, error_code=code(result.error),
        protocol_type=result.protocol_type, protocol_name=result.protocol_name,
        assignment=result.assignment,
    )  # fmt: skip


async def heartbeat(ctx: RequestContext, req: Any) -> Any:
    ng = groups_of(ctx.node)
    error = checked(ctx, ng, req.group_id)
    if error is E.NONE:
        error = ng.coordinator.heartbeat(
            req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None)
        )
    return ctx.make("HeartbeatResponse", throttle_time=NO_THROTTLE, error_code=code(error))


async def leave_group(ctx: RequestContext, req: Any) -> Any:
    ng = groups_of(ctx.node)
    if ctx.api_version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in req.members]
    else:
        leaving = [(req.member_id, None)]
    error = checked(ctx, ng, req.group_id)
    answers: list[ErrorCode]
    if error is not E.NONE:
        answers = [error] * len(leaving)
    else:
        answers = ng.coordinator.leave(
            req.group_id, [m for m, _ in leaving], [i for _, i in leaving]
        )
    if ctx.api_version < 3:
        return ctx.make(
            "LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=code(answers[0])
        )
    members = tuple(
        ctx.make("MemberResponse", member_id=m, group_instance_id=i, error_code=code(a))
        for (m, i), a in zip(leaving, answers, strict=True)
    )
    top = error if error is not E.NONE else E.NONE
    return ctx.make(
        "LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=code(top), members=members
    )


# -- OffsetCommit (8), OffsetFetch (9) --------------------------------------------------
async def offset_commit(ctx: RequestContext, req: Any) -> Any:
    ng = groups_of(ctx.node)
    group = req.group_id
    error = checked(ctx, ng, group)
    group_allowed = error is not E.GROUP_AUTHORIZATION_FAILED
    if error is E.NONE:
        generation = getattr(req, "generation_id_or_member_epoch", -1)
        error = ng.coordinator.check_commit(
            group,
            generation,
            getattr(req, "member_id", ""),
            getattr(req, "group_instance_id", None),
        )
    wanted = [(t.name, p) for t in req.topics for p in t.partitions]

    async def commit_one(topic: str, p: Any) -> ErrorCode:
        if group_allowed and not ctx.guard.topic(topic):  # READ on the topic (kafka.acl)
            return E.TOPIC_AUTHORIZATION_FAILED
        if error is not E.NONE:
            return error
        return await ng.commit(
            group, topic, p.partition_index, p.committed_offset, p.committed_metadata
        )

    outcomes = await asyncio.gather(*(commit_one(topic, p) for topic, p in wanted))
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), outcome in zip(wanted, outcomes, strict=True):
        by_topic.setdefault(topic, []).append(
            ctx.make(
                "OffsetCommitResponsePartition",
                partition_index=p.partition_index,
                error_code=code(outcome),
            )
        )
    topics = tuple(
        ctx.make("OffsetCommitResponseTopic", name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()
    )
    return ctx.make("OffsetCommitResponse", throttle_time=NO_THROTTLE, topics=topics)


async def offset_fetch(ctx: RequestContext, req: Any) -> Any:
    if ctx.api_version >= 8:
        groups = tuple([await _fetch_group(ctx, g.group_id, g.topics) for g in req.groups])
        return ctx.make("OffsetFetchResponse", throttle_time=NO_THROTTLE, groups=groups)
    error, topics = await _fetch_offsets(ctx, req.group_id, req.topics)
    return ctx.make(
        "OffsetFetchResponse", throttle_time=NO_THROTTLE, topics=topics, error_code=code(error)
    )


async def _fetch_group(ctx: RequestContext, group: str, wanted: Any) -> Any:
    error, topics = await _fetch_offsets(ctx, group, wanted)
    return ctx.make(
        "OffsetFetchResponseGroup", group_id=group, topics=topics, error_code=code(error)
    )


async def _fetch_offsets(
    ctx: RequestContext, group: str, wanted: Any
) -> tuple[ErrorCode, tuple[Any, ...]]:
    """The group-level error and the topics' answers (every requested partition, or every
    partition the group committed when ``wanted`` is None)."""
    ng = groups_of(ctx.node)
    v8 = ctx.api_version >= 8
    partition_cls = "OffsetFetchResponsePartitions" if v8 else "OffsetFetchResponsePartition"
    topic_cls = "OffsetFetchResponseTopics" if v8 else "OffsetFetchResponseTopic"
    error = checked(ctx, ng, group)
    committed = await ng.committed(group) if error is E.NONE else None
    if committed is not None:
        if wanted is None:  # every topic the principal may describe (kafka.acl)
            visible = set(ctx.guard.visible_topics(sorted(committed.offsets)))
            pairs = [(t, sorted(ps)) for t, ps in sorted(committed.offsets.items()) if t in visible]
            if committed.unreachable:
                error = E.COORDINATOR_LOAD_IN_PROGRESS
        else:
            pairs = [(t.name, list(t.partition_indexes)) for t in wanted]
            nodes = {ng.offsets.node_of(t, p) for t, ps in pairs for p in ps}
            if nodes & committed.unreachable:
                error = E.COORDINATOR_LOAD_IN_PROGRESS
    else:
        pairs = [(t.name, list(t.partition_indexes)) for t in wanted or ()]
    partition_error = error if ctx.api_version < 2 else E.NONE  # v1 has no group-level error
    topics = []
    for topic, partitions in pairs:
        parts = []
        # a topic named but not describable: its partitions say so (kafka.acl)
        denied = error is E.NONE and wanted is not None and not ctx.guard.topic(topic)
        for p in partitions:
            offset = -1
            if committed is not None and error is E.NONE and not denied:
                offset = committed.offsets.get(topic, {}).get(p, -1)
            parts.append(
                ctx.make(
                    partition_cls,
                    partition_index=p,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    metadata=ng.metadata_of(group, topic, p, offset) if offset >= 0 else "",
                    error_code=code(E.TOPIC_AUTHORIZATION_FAILED if denied else partition_error),
                )  # fmt: skip
            )
        topics.append(ctx.make(topic_cls, name=topic, partitions=tuple(parts)))
    return error, tuple(topics)


# -- ListGroups (16), DescribeGroups (15) ------------------------------------------------
async def list_groups(ctx: RequestContext, req: Any) -> Any:
    """The groups this node coordinates: those with members, and those known only by their
    committed offsets (shown Empty, as Kafka shows a group whose members are gone)."""
    ng = groups_of(ctx.node)
    if ng.offsets.loading():
        return ctx.make("ListGroupsResponse", throttle_time=NO_THROTTLE,
                        error_code=code(E.COORDINATOR_LOAD_IN_PROGRESS), groups=())  # fmt: skip
    me = ctx.node.runtime.settings.node_id
    listed = {g.group_id: (g.protocol_type, g.state.value) for g in ng.coordinator.list_groups()}
    for name in await ng.offsets.groups():
        if name not in listed and ng.coordinator_node(name) == me:
            listed[name] = ("consumer", GroupState.EMPTY.value)
    states = {s.lower() for s in getattr(req, "states_filter", ())}
    types = {t.lower() for t in getattr(req, "types_filter", ())}
    visible = set(ctx.guard.visible_groups(sorted(listed)))  # describable ones (kafka.acl)
    groups = tuple(
        ctx.make(
            "ListedGroup",
            group_id=name,
            protocol_type=ptype,
            group_state=state,
            group_type="classic",
        )  # fmt: skip
        for name, (ptype, state) in sorted(listed.items())
        if ng.coordinator_node(name) == me
        and name in visible
        and (not states or state.lower() in states)
        and (not types or "classic" in types)
    )
    return ctx.make(
        "ListGroupsResponse", throttle_time=NO_THROTTLE, error_code=code(E.NONE), groups=groups
    )


async def describe_groups(ctx: RequestContext, req: Any) -> Any:
    ng = groups_of(ctx.node)
    with_offsets: set[str] | None = None
    described = []
    for group in req.groups:
        error = checked(ctx, ng, group)
        desc = ng.coordinator.describe(group) if error is E.NONE else None
        state, ptype, pdata, members = GroupState.DEAD.value, "", "", ()
        if desc is not None:
            state, ptype, pdata = desc.state.value, desc.protocol_type, desc.protocol_name
            members = tuple(
                ctx.make(
                    "DescribedGroupMember",
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata,
                    member_assignment=m.assignment,
                )  # fmt: skip
                for m in desc.members
            )
        elif error is E.NONE:
            if with_offsets is None:
                with_offsets = await ng.offsets.groups()
            if group in with_offsets:
                state, ptype = GroupState.EMPTY.value, "consumer"
        described.append(
            ctx.make(
                "DescribedGroup",
                error_code=code(error),
                group_id=group,
                group_state=state,
                protocol_type=ptype,
                protocol_data=pdata,
                members=members,
                authorized_operations=NO_OPERATIONS,
            )  # fmt: skip
        )
    return ctx.make("DescribeGroupsResponse", throttle_time=NO_THROTTLE, groups=tuple(described))


def register(table: ApiTable) -> None:
    table.add(Api(8, "OffsetCommit", 2, 9, offset_commit))
    table.add(Api(9, "OffsetFetch", 1, 9, offset_fetch))
    table.add(Api(10, "FindCoordinator", 0, 4, find_coordinator))
    table.add(Api(11, "JoinGroup", 0, 9, join_group))
    table.add(Api(12, "Heartbeat", 0, 4, heartbeat))
    table.add(Api(13, "LeaveGroup", 0, 5, leave_group))
    table.add(Api(14, "SyncGroup", 0, 5, sync_group))
    table.add(Api(15, "DescribeGroups", 0, 5, describe_groups))
    table.add(Api(16, "ListGroups", 0, 5, list_groups))
