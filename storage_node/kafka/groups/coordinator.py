"""The classic group protocol's state machine (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
and the membership checks of OffsetCommit), free of framing and I/O so it is tested with an
injected clock.

It follows Apache Kafka's classic group coordinator: Empty → PreparingRebalance (members
(re)join; those that do not within the rebalance timeout are removed) → CompletingRebalance
(a new generation; the leader gets every member's metadata and sends the assignment in
SyncGroup) → Stable. A member missing its session timeout, leaving, or joining starts a new
rebalance. A rebalance from Empty waits ``initial_rebalance_delay_ms`` for more members (each
new member extends it, up to the rebalance timeout), as Kafka's
``group.initial.rebalance.delay.ms`` does. Member ids follow KIP-394: a first JoinGroup (v4+)
is answered MEMBER_ID_REQUIRED with the id to join with.

Static members (KIP-345, ``group.instance.id``) keep their place across restarts: a join
under a known instance id takes over the old member (its assignment too; no rebalance when
its protocols are unchanged and it is not the leader), and requests under the replaced
member id get FENCED_INSTANCE_ID. Over 400 lines on purpose: one state machine, whose
transitions are read together.

State lives in memory only: a restarted coordinator knows no member, answers their
heartbeats UNKNOWN_MEMBER_ID, and the clients join again (committed offsets are in the
store). Every method runs on one thread (the node's event loop): nothing here locks.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from storage_node.formats.names import is_valid_name
from storage_node.kafka.groups.group import (
    ErrorCode,
    Group,
    GroupDescription,
    GroupListing,
    GroupSettings,
    GroupState,
    JoinRequest,
    JoinResult,
    Member,
    MemberDescription,
    MemberInfo,
    Reply,
    SyncResult,
)

E = ErrorCode
S = GroupState


class GroupCoordinator:
    """Every group this node coordinates; ``clock`` gives milliseconds (monotonic)."""

    def __init__(self, clock: Callable[[], int], settings: GroupSettings | None = None) -> None:
        self.clock = clock
        self.settings = settings or GroupSettings()
        self.groups: dict[str, Group] = {}

    # -- JoinGroup ----------------------------------------------------------------------
    def join(self, req: JoinRequest) -> Reply[JoinResult]:
        """Answered when the rebalance completes (or at once for an error, a MEMBER_ID_REQUIRED
        or a member rejoining a group whose assignment does not change)."""
        self.expire()
        error = self._check_join(req)
        if error is not E.NONE:
            return Reply.of(JoinResult(error, req.member_id))
        group = self.groups.setdefault(req.group_id, Group(req.group_id))
        if not group.supports(req.protocol_type, req.protocols):
            return Reply.of(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
        if req.instance_id is not None:
            if group.fenced(req.member_id or "", req.instance_id) and req.member_id:
                return Reply.of(JoinResult(E.FENCED_INSTANCE_ID, req.member_id))
            held = group.static.get(req.instance_id)
            if held is not None and not req.member_id:
                return self._replace_static(group, group.members[held], req)
        if not req.member_id:
            if len(group.members) + len(group.pending) >= self.settings.max_members:
                return Reply.of(JoinResult(E.GROUP_MAX_SIZE_REACHED, ""))
            member_id = f"{req.client_id}-{uuid.uuid4()}"
            if req.require_known_member_id and req.instance_id is None:
                group.pending[member_id] = self.clock() + req.session_timeout_ms
                return Reply.of(JoinResult(E.MEMBER_ID_REQUIRED, member_id))
            return self._add_member(group, member_id, req)
        if req.member_id in group.pending:
            del group.pending[req.member_id]
            return self._add_member(group, req.member_id, req)
        member = group.members.get(req.member_id)
        if member is None:
            return Reply.of(JoinResult(E.UNKNOWN_MEMBER_ID, req.member_id))
        same = member.protocols == req.protocols
        if group.state is S.COMPLETING and same:
            return Reply.of(self._join_answer(group, member))
        if group.state is S.STABLE and same and member.member_id != group.leader_id:
            return Reply.of(self._join_answer(group, member))
        return self._update_member(group, member, req)

    def _check_join(self, req: JoinRequest) -> ErrorCode:
        if not is_valid_name(req.group_id):  # the store's name rule: one group namespace
            return E.INVALID_GROUP_ID
        s = self.settings
        if not s.min_session_timeout_ms <= req.session_timeout_ms <= s.max_session_timeout_ms:
            return E.INVALID_SESSION_TIMEOUT
        return E.NONE

    def _add_member(self, group: Group, member_id: str, req: JoinRequest) -> Reply[JoinResult]:
        if not group.members:
            group.protocol_type = req.protocol_type
        member = Member(
            member_id, req.instance_id, req.client_id, req.client_host, req.session_timeout_ms,
            req.rebalance_timeout_ms, req.protocols, self.clock(), join_reply=Reply(),
        )  # fmt: skip
        group.members[member_id] = member
        if req.instance_id is not None:
            group.static[req.instance_id] = member_id
        if group.leader_id is None:
            group.leader_id = member_id
        group.new_member_added = True
        reply = member.join_reply
        assert reply is not None
        self._rebalance(group)
        return reply

    def _update_member(self, group: Group, member: Member, req: JoinRequest) -> Reply[JoinResult]:
        if member.join_reply is not None:  # an earlier JoinGroup of the member still waits
            member.join_reply.settle(JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.protocols = req.protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        reply: Reply[JoinResult] = Reply()
        member.join_reply = reply
        self._rebalance(group)
        return reply

    def _replace_static(self, group: Group, old: Member, req: JoinRequest) -> Reply[JoinResult]:
        """A static member back under a new member id: it takes the old one's place."""
        new_id = f"{req.client_id}-{uuid.uuid4()}"
        fenced = E.FENCED_INSTANCE_ID
        if old.join_reply is not None:
            old.join_reply.settle(JoinResult(fenced, old.member_id))
            old.join_reply = None
        if old.sync_reply is not None:
            old.sync_reply.settle(SyncResult(fenced))
            old.sync_reply = None
        del group.members[old.member_id]
        leader = group.leader_id == old.member_id
        old.member_id, old.client_id, old.client_host = new_id, req.client_id, req.client_host
        old.last_heartbeat_ms = self.clock()
        group.members[new_id] = old
        group.static[req.instance_id or ""] = new_id
        if leader:
            group.leader_id = new_id
        unchanged = old.protocols == req.protocols and not leader
        if group.state is S.STABLE and unchanged:
            old.synced = True
            return Reply.of(self._join_answer(group, old))
        return self._update_member(group, old, req)

    def _join_answer(self, group: Group, member: Member) -> JoinResult:
        members: tuple[MemberInfo, ...] = ()
        if member.member_id == group.leader_id:
            members = tuple(
                MemberInfo(m.member_id, m.instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            )
        return JoinResult(
            E.NONE, member.member_id, group.generation, group.protocol_type,
            group.protocol_name, group.leader_id or "", members,
        )  # fmt: skip

    # -- rebalancing --------------------------------------------------------------------
    def _rebalance(self, group: Group) -> None:
        """Start a rebalance (or go on with the one under way) and complete it if it can."""
        if group.state is not S.PREPARING:
            self._prepare(group)
        self._try_complete_join(group)

    def _prepare(self, group: Group) -> None:
        now = self.clock()
        if group.state is S.COMPLETING:  # the assignment being handed out is void
            for m in group.members.values():
                m.assignment = b""
                if m.sync_reply is not None:
                    m.sync_reply.settle(SyncResult(E.REBALANCE_IN_PROGRESS))
                    m.sync_reply = None
        from_empty = group.state is S.EMPTY
        group.state = S.PREPARING
        group.sync_deadline_ms = None
        timeout = group.max_rebalance_timeout_ms()
        group.join_deadline_ms = now + timeout
        group.delay_until_ms = None
        if from_empty:
            group.delay_until_ms = now + min(self.settings.initial_rebalance_delay_ms, timeout)
            group.new_member_added = False

    def _try_complete_join(self, group: Group) -> None:
        if group.state is not S.PREPARING:
            return
        now = self.clock()
        deadline = group.join_deadline_ms
        if group.delay_until_ms is not None:
            if now < group.delay_until_ms:
                return
            if group.new_member_added and deadline is not None and now < deadline:
                delay = self.settings.initial_rebalance_delay_ms
                group.delay_until_ms = min(now + delay, deadline)
                group.new_member_added = False
                return
            self._complete_join(group)
        elif group.all_joined() or (deadline is not None and now >= deadline):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """A new generation of the members that rejoined; each waiting JoinGroup is answered."""
        now = self.clock()
        for m in list(group.members.values()):
            if m.join_reply is None:  # did not rejoin in time
                self._remove(group, m, E.UNKNOWN_MEMBER_ID)
        group.join_deadline_ms = group.delay_until_ms = None
        group.new_member_added = False
        group.generation += 1
        if not group.members:
            group.state, group.protocol_name, group.leader_id = S.EMPTY, None, None
            return
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.protocol_name = group.select_protocol()
        group.state = S.COMPLETING
        group.sync_deadline_ms = now + group.max_rebalance_timeout_ms()
        for m in group.members.values():
            reply, m.join_reply = m.join_reply, None
            m.last_heartbeat_ms, m.synced, m.assignment = now, False, b""
            assert reply is not None
            reply.settle(self._join_answer(group, m))

    def _remove(self, group: Group, member: Member, error: ErrorCode) -> None:
        """Take a member out (its waiting requests answered ``error``); no rebalance here."""
        del group.members[member.member_id]
        if member.join_reply is not None:
            member.join_reply.settle(JoinResult(error, member.member_id))
        if member.sync_reply is not None:
            member.sync_reply.settle(SyncResult(error))
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)
        if (
            member.instance_id is not None
            and group.static.get(member.instance_id) == member.member_id
        ):
            del group.static[member.instance_id]

    def _after_removal(self, group: Group) -> None:
        if group.state in (S.STABLE, S.COMPLETING):
            self._prepare(group)
        self._try_complete_join(group)

    # -- SyncGroup ----------------------------------------------------------------------
    def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes],
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        instance_id: str | None = None,
    ) -> Reply[SyncResult]:
        """The member's assignment; a follower's waits until the leader has sent them."""
        self.expire()
        group = self.groups.get(group_id)
        if group is not None and group.fenced(member_id, instance_id):
            return Reply.of(SyncResult(E.FENCED_INSTANCE_ID))
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return Reply.of(SyncResult(E.UNKNOWN_MEMBER_ID))
        if generation != group.generation:
            return Reply.of(SyncResult(E.ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return Reply.of(SyncResult(E.INCONSISTENT_GROUP_PROTOCOL))
        if group.state is S.PREPARING:
            return Reply.of(SyncResult(E.REBALANCE_IN_PROGRESS))
        member.last_heartbeat_ms = self.clock()
        self._synced(group, member)
        if group.state is S.STABLE:
            return Reply.of(self._sync_answer(group, member))
        if member.sync_reply is not None:  # an earlier SyncGroup of the member still waits
            member.sync_reply.settle(SyncResult(E.REBALANCE_IN_PROGRESS))
        reply: Reply[SyncResult] = Reply()
        member.sync_reply = reply
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = S.STABLE
            for m in group.members.values():
                if m.sync_reply is not None:
                    m.sync_reply.settle(self._sync_answer(group, m))
                    m.sync_reply = None
        return reply

    def _synced(self, group: Group, member: Member) -> None:
        member.synced = True
        if all(m.synced for m in group.members.values()):
            group.sync_deadline_ms = None

    def _sync_answer(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(E.NONE, group.protocol_type, group.protocol_name, member.assignment)

    # -- Heartbeat, LeaveGroup, OffsetCommit's membership check ----------------------------
    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None = None
    ) -> ErrorCode:
        self.expire()
        group = self.groups.get(group_id)
        if group is not None and group.fenced(member_id, instance_id):
            return E.FENCED_INSTANCE_ID
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return E.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return E.ILLEGAL_GENERATION
        member.last_heartbeat_ms = self.clock()
        return E.REBALANCE_IN_PROGRESS if group.state is S.PREPARING else E.NONE

    def leave(
        self, group_id: str, member_ids: list[str], instance_ids: list[str | None] | None = None
    ) -> list[ErrorCode]:
        """Each member's answer, in order; the group rebalances once for all of them. A
        static member may be named by its instance id alone (member id empty)."""
        self.expire()
        group = self.groups.get(group_id)
        if group is None:
            return [E.UNKNOWN_MEMBER_ID for _ in member_ids]
        answers: list[ErrorCode] = []
        removed = False
        for member_id, instance_id in zip(
            member_ids, instance_ids or [None] * len(member_ids), strict=True
        ):
            if instance_id is not None:
                if member_id and group.fenced(member_id, instance_id):
                    answers.append(E.FENCED_INSTANCE_ID)
                    continue
                member_id = group.static.get(instance_id, member_id)
            member = group.members.get(member_id)
            if member_id in group.pending:
                del group.pending[member_id]
                answers.append(E.NONE)
                removed = True
            elif member is not None:
                self._remove(group, member, E.UNKNOWN_MEMBER_ID)
                answers.append(E.NONE)
                removed = True
            else:
                answers.append(E.UNKNOWN_MEMBER_ID)
        if removed:
            self._after_removal(group)
        return answers

    def check_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None = None
    ) -> ErrorCode:
        """Whether an OffsetCommit may be stored. Generation -1 without a member is a commit
        from outside group management (an admin tool, a consumer with manual assignment):
        allowed while the group has no members. A member commits with its generation; that
        is refused only while the new generation's assignment is handed out."""
        self.expire()
        group = self.groups.get(group_id)
        if group is None:
            return E.NONE if generation < 0 else E.ILLEGAL_GENERATION
        if generation < 0 and group.state is S.EMPTY:
            return E.NONE
        if group.fenced(member_id, instance_id):
            return E.FENCED_INSTANCE_ID
        if generation >= 0 or member_id:
            member = group.members.get(member_id)
            if member is None:
                return E.UNKNOWN_MEMBER_ID
            if generation != group.generation:
                return E.ILLEGAL_GENERATION
            member.last_heartbeat_ms = self.clock()
        elif group.state is not S.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        if group.state is S.COMPLETING:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    # -- ListGroups, DescribeGroups -------------------------------------------------------
    def list_groups(self) -> list[GroupListing]:
        self.expire()
        return [
            GroupListing(g.group_id, g.protocol_type or "", g.state) for g in self.groups.values()
        ]

    def describe(self, group_id: str) -> GroupDescription | None:
        """The group as DescribeGroups shows it; metadata and assignments only when Stable."""
        self.expire()
        group = self.groups.get(group_id)
        if group is None:
            return None
        stable = group.state is S.STABLE
        members = tuple(
            MemberDescription(
                m.member_id, m.instance_id, m.client_id, m.client_host,
                m.metadata_for(group.protocol_name) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )  # fmt: skip
        return GroupDescription(
            group.group_id, group.state, group.protocol_type or "", group.protocol_name or "",
            members,
        )  # fmt: skip

    # -- time ---------------------------------------------------------------------------
    def expire(self) -> None:
        """Apply every deadline that has passed: sessions, pending member ids, the join and
        sync phases of a rebalance."""
        now = self.clock()
        for group in list(self.groups.values()):
            changed = False
            for member_id, until in list(group.pending.items()):
                if now >= until:
                    del group.pending[member_id]
                    changed = True
            for m in list(group.members.values()):
                waiting = m.join_reply is not None or m.sync_reply is not None
                if not waiting and now >= m.last_heartbeat_ms + m.session_timeout_ms:
                    self._remove(group, m, E.UNKNOWN_MEMBER_ID)
                    changed = True
            if group.sync_deadline_ms is not None and now >= group.sync_deadline_ms:
                for m in list(group.members.values()):
                    if not m.synced:
                        self._remove(group, m, E.UNKNOWN_MEMBER_ID)
                group.sync_deadline_ms = None
                changed = True
            if changed:
                self._after_removal(group)
            else:
                self._try_complete_join(group)
            if group.state is S.EMPTY and not group.members and not group.pending:
                del self.groups[group.group_id]  # nothing left to remember (offsets are stored)

    def next_deadline(self) -> int | None:
        """The earliest time (ms) at which ``expire`` has something to do."""
        times: list[int] = []
        for group in self.groups.values():
            times.extend(group.pending.values())
            for m in group.members.values():
                if m.join_reply is None and m.sync_reply is None:
                    times.append(m.last_heartbeat_ms + m.session_timeout_ms)
            if group.state is S.PREPARING:
                if group.delay_until_ms is not None:
                    times.append(group.delay_until_ms)
                if group.join_deadline_ms is not None:
                    times.append(group.join_deadline_ms)
            if group.sync_deadline_ms is not None:
                times.append(group.sync_deadline_ms)
        return min(times, default=None)
