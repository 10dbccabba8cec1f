"""DeleteGroups (42) and OffsetDelete (47): forgetting a group, or some of its offsets.

A group's offsets are msgstore's group offsets (``offsets.py``), so deleting them here is
what ``msgstore group list/describe`` and the HTTP API see: the coordinator forgets the
offsets held by the logs it leads and asks every other node to forget theirs
(``DELETE /v1/consumer-groups/{group}/offsets``). Kafka's rules hold: a group with members
is not deleted (NON_EMPTY_GROUP), a group nobody knows is GROUP_ID_NOT_FOUND, and the
offsets of a topic that a member of a live consumer group subscribes to stay
(GROUP_SUBSCRIBED_TO_TOPIC).
"""

from __future__ import annotations

import datetime
import struct
from typing import Any
from urllib.parse import quote

from kio.schema.errors import ErrorCode as KafkaError

from storage_node.errors import MsgStoreError, NotLeader, Unavailable
from storage_node.kafka.groups.group import ErrorCode, Group, GroupState
from storage_node.kafka.groups.handlers import checked, code, groups_of
from storage_node.kafka.groups.node_groups import NodeGroups, commit_error
from storage_node.kafka.registry import Api, ApiTable, RequestContext
from storage_node.server.peer_fanout import ask_peers

NO_THROTTLE = datetime.timedelta(0)
E = KafkaError


def subscribed_topics(group: Group) -> set[str] | None:
    """The topics the members of a consumer group subscribe to (from each member's
    ConsumerProtocolSubscription: i16 version, then an array of i16-length strings); None
    when they cannot be known (another protocol type, no protocol chosen yet)."""
    if group.protocol_type != "consumer" or group.protocol_name is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        data = member.metadata_for(group.protocol_name)
        try:
            (count,) = struct.unpack_from(">i", data, 2)
            at = 6
            for _ in range(count):
                (size,) = struct.unpack_from(">h", data, at)
                topics.add(data[at + 2 : at + 2 + size].decode())
                at += 2 + size
        except (struct.error, UnicodeDecodeError):
            return None
    return topics


def _path(group: str) -> str:
    return f"/v1/consumer-groups/{quote(group, safe='')}/offsets"


async def delete_everywhere(ng: NodeGroups, group: str) -> tuple[bool, bool]:
    """Forget every offset of the group on every node: (whether any was there, whether
    every node answered)."""
    deleted = await ng.rt.partitions.delete_offsets(group)
    complete = True
    for _peer, answer in await ask_peers(ng.rt, "DELETE", _path(group), {"scope": "local"}):
        if isinstance(answer, BaseException):
            complete = False
        elif answer is not None:
            deleted |= bool(answer.get("deleted"))
    return deleted, complete


async def delete_partition(ng: NodeGroups, group: str, topic: str, partition: int) -> None:
    """Forget one partition's offset of the group where the partition is served."""
    try:
        await ng.rt.partitions.delete_offsets(group, topic, partition)
    except NotLeader as exc:
        if exc.leader_address is None:
            raise Unavailable(f"no node serves {topic}/{partition} now") from None
        params = {"topic": topic, "partition": str(partition), "scope": "local"}
        await ng.rt.peer_call("DELETE", exc.leader_address, _path(group), params)


def _forget_members_state(ng: NodeGroups, group: str) -> None:
    ng.coordinator.groups.pop(group, None)
    for key in [k for k in ng.metadata if k[0] == group]:
        del ng.metadata[key]


async def _delete_group(ctx: RequestContext, group: str) -> KafkaError:
    ng = groups_of(ctx.node)
    error = checked(ctx, ng, group)  # DELETE on the group (kafka.acl)
    if error is not ErrorCode.NONE:
        return code(error)
    ng.coordinator.expire()
    live = ng.coordinator.groups.get(group)
    if live is not None and (live.members or live.state is not GroupState.EMPTY):
        return E.non_empty_group
    try:
        deleted, complete = await delete_everywhere(ng, group)
    except MsgStoreError as exc:
        return code(commit_error(exc))
    if not complete:
        return E.coordinator_not_available  # some offsets may remain: the client retries
    if not deleted and live is None:
        return E.group_id_not_found
    _forget_members_state(ng, group)
    return E.none


async def delete_groups(ctx: RequestContext, req: Any) -> Any:
    results = tuple(
        [
            ctx.make("DeletableGroupResult", group_id=g, error_code=await _delete_group(ctx, g))
            for g in req.groups_names
        ]
    )
    return ctx.make("DeleteGroupsResponse", throttle_time=NO_THROTTLE, results=results)


async def offset_delete(ctx: RequestContext, req: Any) -> Any:
    ng = groups_of(ctx.node)
    group = req.group_id
    top = code(checked(ctx, ng, group))  # DELETE on the group (kafka.acl)
    subscribed: set[str] = set()
    if top is E.none:
        ng.coordinator.expire()
        live = ng.coordinator.groups.get(group)
        if live is not None and (live.members or live.state is not GroupState.EMPTY):
            topics = subscribed_topics(live)
            if topics is None:
                top = E.non_empty_group
            else:
                subscribed = topics
        elif live is None and group not in await ng.offsets.groups():
            top = E.group_id_not_found
    answers = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            error = E.none
            if top is not E.none:
                error = top
            elif not ctx.guard.topic(t.name):  # READ on the topic (kafka.acl)
                error = E.topic_authorization_failed
            elif t.name in subscribed:
                error = E.group_subscribed_to_topic
            else:
                error = await _delete_one(ng, group, t.name, int(p.partition_index))
            parts.append(
                ctx.make(
                    "OffsetDeleteResponsePartition",
                    partition_index=p.partition_index,
                    error_code=error,
                )
            )
        answers.append(ctx.make("OffsetDeleteResponseTopic", name=t.name, partitions=tuple(parts)))
    group_error = top if top is not E.none else E.none
    return ctx.make(
        "OffsetDeleteResponse",
        error_code=group_error,
        throttle_time=NO_THROTTLE,
        topics=tuple(answers) if top is E.none else (),
    )


async def _delete_one(ng: NodeGroups, group: str, topic: str, partition: int) -> KafkaError:
    try:
        if not 0 <= partition < await ng.offsets.partitions(topic):
            return E.unknown_topic_or_partition
        await delete_partition(ng, group, topic, partition)
    except MsgStoreError as exc:
        return code(commit_error(exc))
    ng.metadata.pop((group, topic, partition), None)
    return E.none


def register(table: ApiTable) -> None:
    table.add(Api(42, "DeleteGroups", 0, 2, delete_groups))
    table.add(Api(47, "OffsetDelete", 0, 0, offset_delete))
