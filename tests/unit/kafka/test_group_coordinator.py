"""The classic group state machine driven by an injected clock: joins, rebalances, sessions,
syncs, leaves and the membership checks of offset commits, each answer as a Kafka client
expects it. No sleeps: time moves when a test says so."""

from __future__ import annotations

import random

import pytest

from storage_node.kafka.groups.coordinator import GroupCoordinator, GroupSettings
from storage_node.kafka.groups.group import (
    ErrorCode,
    GroupState,
    JoinRequest,
    JoinResult,
    Reply,
    SyncResult,
)

E = ErrorCode
SESSION = 10_000
REBALANCE = 30_000
DELAY = 3_000
RANGE = (("range", b"range-meta"),)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def coord(clock: Clock) -> GroupCoordinator:
    return GroupCoordinator(clock, GroupSettings(initial_rebalance_delay_ms=DELAY))


def request(member_id: str = "", protocols=RANGE, **kw) -> JoinRequest:
    values = dict(
        group_id="g", member_id=member_id, instance_id=None, client_id="c", client_host="/127.0.0.1",
        session_timeout_ms=SESSION, rebalance_timeout_ms=REBALANCE, protocol_type="consumer",
        protocols=protocols,
    )  # fmt: skip
    values.update(kw)
    return JoinRequest(**values)  # type: ignore[arg-type]


def member_id_for(coord: GroupCoordinator, **kw) -> str:
    """The id a first JoinGroup (v4+) hands out with MEMBER_ID_REQUIRED."""
    first = coord.join(request(**kw)).result()
    assert first.error is E.MEMBER_ID_REQUIRED and first.member_id.startswith("c-")
    return first.member_id


def advance(coord: GroupCoordinator, clock: Clock, ms: int) -> None:
    clock.ms += ms
    coord.expire()


def stable_group(coord: GroupCoordinator, clock: Clock, n: int) -> list[JoinResult]:
    """n members joined within the initial delay, synced with the leader's assignment."""
    ids = [member_id_for(coord) for _ in range(n)]
    replies = [coord.join(request(i)) for i in ids]
    assert not any(r.settled for r in replies)
    for _ in range(REBALANCE // DELAY):  # newcomers extend the initial delay (bounded)
        if replies[0].settled:
            break
        advance(coord, clock, DELAY)
    joins = [r.result() for r in replies]
    leader = next(j for j in joins if j.member_id == j.leader_id)
    syncs = [coord.sync("g", j.generation, j.member_id, {}) for j in joins if j is not leader]
    assert not any(s.settled for s in syncs)
    assignment = {j.member_id: f"a-{j.member_id}".encode() for j in joins}
    lead_sync = coord.sync("g", leader.generation, leader.member_id, assignment).result()
    assert lead_sync.assignment == assignment[leader.member_id]
    for s in syncs:
        assert s.result().error is E.NONE
    return joins


def test_first_join_needs_a_member_id_then_waits_for_the_initial_delay(coord, clock):
    member_id = member_id_for(coord)
    reply = coord.join(request(member_id))
    assert not reply.settled
    assert coord.next_deadline() == clock.ms + DELAY
    advance(coord, clock, DELAY - 1)
    assert not reply.settled
    advance(coord, clock, 1)
    result = reply.result()
    assert result.error is E.NONE and result.generation == 1
    assert result.leader_id == member_id and result.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in result.members] == [(member_id, b"range-meta")]


def test_old_clients_without_kip_394_get_an_id_at_once(coord, clock):
    reply = coord.join(request(require_known_member_id=False))
    advance(coord, clock, DELAY)
    assert reply.result().error is E.NONE and reply.result().member_id.startswith("c-")


def test_two_members_leader_assigns_follower_waits_for_it(coord, clock):
    joins = stable_group(coord, clock, 2)
    assert {j.generation for j in joins} == {1}
    leader, follower = sorted(joins, key=lambda j: j.member_id != j.leader_id)
    assert len(leader.members) == 2 and follower.members == ()
    desc = coord.describe("g")
    assert desc is not None and desc.state is GroupState.STABLE
    assert {m.assignment for m in desc.members} == {f"a-{j.member_id}".encode() for j in joins}
    # a follower syncing again in Stable gets its assignment at once
    again = coord.sync("g", 1, follower.member_id, {}).result()
    assert again.assignment == f"a-{follower.member_id}".encode()


def test_a_new_member_rebalances_the_group_without_waiting_once_all_rejoined(coord, clock):
    a, b = stable_group(coord, clock, 2)
    new_id = member_id_for(coord)
    new_reply = coord.join(request(new_id))
    assert coord.heartbeat("g", 1, a.member_id) is E.REBALANCE_IN_PROGRESS
    assert coord.sync("g", 1, a.member_id, {}).result().error is E.REBALANCE_IN_PROGRESS
    ra = coord.join(request(a.member_id))
    assert not ra.settled
    rb = coord.join(request(b.member_id))  # the last one: no delay after Empty
    for reply in (ra, rb, new_reply):
        assert reply.result().error is E.NONE and reply.result().generation == 2
    assert ra.result().leader_id == a.leader_id  # the leader stays


def test_members_that_do_not_rejoin_are_dropped_at_the_rebalance_timeout(coord, clock):
    a, b = stable_group(coord, clock, 2)
    ra = coord.join(request(a.member_id, protocols=(("range", b"v2"),)))  # metadata changed
    # b keeps heartbeating but never rejoins
    for _ in range(REBALANCE // 5_000 - 1):
        advance(coord, clock, 5_000)
        assert coord.heartbeat("g", 1, b.member_id) is E.REBALANCE_IN_PROGRESS
        assert not ra.settled
    advance(coord, clock, 5_000)
    result = ra.result()
    assert result.generation == 2 and [m.member_id for m in result.members] == [a.member_id]
    assert coord.heartbeat("g", 1, b.member_id) is E.UNKNOWN_MEMBER_ID


def test_a_silent_member_expires_after_its_session_and_the_group_rebalances(coord, clock):
    a, b = stable_group(coord, clock, 2)
    advance(coord, clock, SESSION - 1)
    assert coord.heartbeat("g", 1, a.member_id) is E.NONE
    advance(coord, clock, 1)  # b missed its session
    assert coord.heartbeat("g", 1, a.member_id) is E.REBALANCE_IN_PROGRESS
    assert coord.heartbeat("g", 1, b.member_id) is E.UNKNOWN_MEMBER_ID
    result = coord.join(request(a.member_id)).result()
    assert result.generation == 2 and result.leader_id == a.member_id
    assert [m.member_id for m in result.members] == [a.member_id]


def test_a_follower_that_never_syncs_is_dropped_after_the_rebalance_timeout(coord, clock):
    ids = [member_id_for(coord) for _ in range(2)]
    replies = [coord.join(request(i)) for i in ids]
    advance(coord, clock, DELAY)
    advance(coord, clock, DELAY)  # a second member extended the initial delay once
    leader = next(r.result() for r in replies if r.result().member_id == r.result().leader_id)
    coord.sync("g", 1, leader.member_id, {})
    for _ in range(REBALANCE // 5_000):
        advance(coord, clock, 5_000)
        coord.heartbeat("g", 1, leader.member_id)
    assert coord.heartbeat("g", 1, leader.member_id) is E.REBALANCE_IN_PROGRESS
    desc = coord.describe("g")
    assert desc is not None and [m.member_id for m in desc.members] == [leader.member_id]


def test_leave_in_a_batch_empties_the_group_and_unknown_members_are_named(coord, clock):
    a, b = stable_group(coord, clock, 2)
    answers = coord.leave("g", [a.member_id, "nobody", b.member_id])
    assert answers == [E.NONE, E.UNKNOWN_MEMBER_ID, E.NONE]
    assert coord.heartbeat("g", 1, a.member_id) is E.UNKNOWN_MEMBER_ID
    assert coord.describe("g") is None  # empty and forgotten; the offsets stay in the store
    assert coord.leave("g", ["x"]) == [E.UNKNOWN_MEMBER_ID]


def test_one_leaving_member_makes_the_other_rejoin_alone(coord, clock):
    a, b = stable_group(coord, clock, 2)
    assert coord.leave("g", [b.member_id]) == [E.NONE]
    assert coord.heartbeat("g", 1, a.member_id) is E.REBALANCE_IN_PROGRESS
    result = coord.join(request(a.member_id)).result()
    assert result.generation == 2 and len(result.members) == 1


def test_join_errors(coord, clock):
    assert coord.join(request(group_id="")).result().error is E.INVALID_GROUP_ID
    assert coord.join(request(group_id="a/b")).result().error is E.INVALID_GROUP_ID
    too_short = request(session_timeout_ms=5_999)
    assert coord.join(too_short).result().error is E.INVALID_SESSION_TIMEOUT
    assert coord.join(request("made-up")).result().error is E.UNKNOWN_MEMBER_ID
    assert coord.join(request(protocols=())).result().error is E.INCONSISTENT_GROUP_PROTOCOL
    stable_group(coord, clock, 1)
    other = request(protocols=(("roundrobin", b""),))
    assert coord.join(other).result().error is E.INCONSISTENT_GROUP_PROTOCOL
    connect = request(protocol_type="connect")
    assert coord.join(connect).result().error is E.INCONSISTENT_GROUP_PROTOCOL


def test_sync_and_heartbeat_errors(coord, clock):
    (a,) = stable_group(coord, clock, 1)
    assert coord.sync("nope", 1, a.member_id, {}).result().error is E.UNKNOWN_MEMBER_ID
    assert coord.sync("g", 1, "nobody", {}).result().error is E.UNKNOWN_MEMBER_ID
    assert coord.sync("g", 7, a.member_id, {}).result().error is E.ILLEGAL_GENERATION
    wrong = coord.sync("g", 1, a.member_id, {}, protocol_name="roundrobin").result()
    assert wrong.error is E.INCONSISTENT_GROUP_PROTOCOL
    assert coord.heartbeat("g", 0, a.member_id) is E.ILLEGAL_GENERATION
    assert coord.heartbeat("g", 1, "nobody") is E.UNKNOWN_MEMBER_ID
    assert coord.heartbeat("nope", 1, a.member_id) is E.UNKNOWN_MEMBER_ID


def test_offset_commit_membership_rules(coord, clock):
    # outside group management: allowed while nobody is a member
    assert coord.check_commit("free", -1, "") is E.NONE
    assert coord.check_commit("free", 3, "m") is E.ILLEGAL_GENERATION
    (a,) = stable_group(coord, clock, 1)
    assert coord.check_commit("g", 1, a.member_id) is E.NONE
    assert coord.check_commit("g", -1, "") is E.UNKNOWN_MEMBER_ID
    assert coord.check_commit("g", 1, "nobody") is E.UNKNOWN_MEMBER_ID
    assert coord.check_commit("g", 0, a.member_id) is E.ILLEGAL_GENERATION
    # a rebalance under way: members still commit what they consumed (before they rejoin)
    new_id = member_id_for(coord)
    coord.join(request(new_id))
    assert coord.check_commit("g", 1, a.member_id) is E.NONE
    coord.join(request(a.member_id))
    # the new generation's assignment is being handed out: not yet
    assert coord.check_commit("g", 2, a.member_id) is E.REBALANCE_IN_PROGRESS


def test_commits_keep_a_member_alive(coord, clock):
    (a,) = stable_group(coord, clock, 1)
    for _ in range(3):
        advance(coord, clock, SESSION - 1)
        assert coord.check_commit("g", 1, a.member_id) is E.NONE
    assert coord.heartbeat("g", 1, a.member_id) is E.NONE


def test_protocol_chosen_by_votes_among_those_all_support(coord, clock):
    both = (("roundrobin", b"rr"), ("range", b"r"))
    range_first = (("range", b"r"), ("roundrobin", b"rr"))
    ids = [member_id_for(coord) for _ in range(3)]
    replies = [
        coord.join(request(ids[0], protocols=both)),
        coord.join(request(ids[1], protocols=range_first)),
        coord.join(request(ids[2], protocols=range_first)),
    ]
    advance(coord, clock, DELAY)
    advance(coord, clock, DELAY)  # a second member extended the initial delay once
    assert {r.result().protocol_name for r in replies} == {"range"}
    leader = next(r.result() for r in replies if r.result().members)
    assert {m.metadata for m in leader.members} == {b"r"}


def test_each_new_member_during_the_initial_delay_extends_it(coord, clock):
    first = coord.join(request(member_id_for(coord)))
    advance(coord, clock, DELAY - 1)
    second = coord.join(request(member_id_for(coord)))
    advance(coord, clock, 1)  # the delay ran out with a newcomer: wait once more
    assert not first.settled and not second.settled
    advance(coord, clock, DELAY)
    assert first.result().generation == second.result().generation == 1


def test_unused_member_ids_expire_after_the_session_timeout(coord, clock):
    member_id = member_id_for(coord)
    advance(coord, clock, SESSION)
    assert coord.join(request(member_id)).result().error is E.UNKNOWN_MEMBER_ID


def test_a_restarted_coordinator_knows_no_member_and_the_clients_rejoin(coord, clock):
    (a,) = stable_group(coord, clock, 1)
    restarted = GroupCoordinator(clock, GroupSettings(initial_rebalance_delay_ms=DELAY))
    assert restarted.heartbeat("g", 1, a.member_id) is E.UNKNOWN_MEMBER_ID
    assert restarted.check_commit("g", 1, a.member_id) is E.ILLEGAL_GENERATION
    assert restarted.join(request(a.member_id)).result().error is E.UNKNOWN_MEMBER_ID
    new_id = member_id_for(restarted)
    reply = restarted.join(request(new_id))
    advance(restarted, clock, DELAY)
    assert reply.result().error is E.NONE


def test_a_repeated_join_answers_the_earlier_one(coord, clock):
    a, _b = stable_group(coord, clock, 2)
    first = coord.join(request(a.member_id, protocols=(("range", b"v2"),)))
    second = coord.join(request(a.member_id, protocols=(("range", b"v2"),)))
    assert first.result().error is E.REBALANCE_IN_PROGRESS
    assert not second.settled


def test_list_and_describe(coord, clock):
    assert coord.list_groups() == [] and coord.describe("g") is None
    (a,) = stable_group(coord, clock, 1)
    (listing,) = coord.list_groups()
    assert (listing.group_id, listing.protocol_type, listing.state) == (
        "g",
        "consumer",
        GroupState.STABLE,
    )
    desc = coord.describe("g")
    assert desc is not None and desc.protocol_name == "range"
    (m,) = desc.members
    assert (m.member_id, m.client_id, m.metadata) == (a.member_id, "c", b"range-meta")


def test_reply_settles_once_and_calls_back():
    reply: Reply[SyncResult] = Reply()
    seen: list[SyncResult] = []
    reply.on_settled(seen.append)
    with pytest.raises(RuntimeError):
        reply.result()
    reply.settle(SyncResult(E.NONE))
    reply.settle(SyncResult(E.UNKNOWN_MEMBER_ID))
    assert [s.error for s in seen] == [E.NONE] and reply.result().error is E.NONE


def test_after_expire_no_deadline_is_already_due(coord, clock):
    """A waiting request sleeps until ``next_deadline``: one already due after ``expire``
    would spin the event loop. Random joins, syncs, heartbeats, leaves and time, seeded."""
    rng = random.Random(7)
    known: list[str] = []
    waiting: list[Reply[JoinResult]] = []
    for _ in range(3000):
        op = rng.random()
        if op < 0.15:
            known.append(member_id_for(coord))
        elif op < 0.35 and known:
            member = rng.choice(known)
            waiting.append(
                coord.join(request(member, rebalance_timeout_ms=rng.choice([6_000, 30_000])))
            )
        elif op < 0.5:
            for reply in [w for w in waiting if w.settled]:
                waiting.remove(reply)
                result = reply.result()
                if result.error is E.NONE:
                    assignment = {m.member_id: b"x" for m in result.members}
                    coord.sync("g", result.generation, result.member_id, assignment)
        elif op < 0.65 and known:
            desc = coord.describe("g")
            generation = coord.groups["g"].generation if desc is not None else 0
            coord.heartbeat("g", generation, rng.choice(known))
        elif op < 0.7 and known:
            coord.leave("g", [rng.choice(known)])
        else:
            clock.ms += rng.choice([1, 100, 1_000, 3_000, 7_000])
        coord.expire()
        deadline = coord.next_deadline()
        assert deadline is None or deadline > clock.ms


def test_a_static_member_restarting_takes_its_place_back_without_a_rebalance(coord, clock):
    leader_id = member_id_for(coord)
    leader = coord.join(request(leader_id))
    static = coord.join(request(instance_id="pod-1"))  # no MEMBER_ID_REQUIRED for static ones
    for _ in range(2):
        advance(coord, clock, DELAY)
    old_id = static.result().member_id
    assignment = {leader_id: b"l", old_id: b"s"}
    coord.sync("g", 1, leader_id, assignment)
    assert coord.sync("g", 1, old_id, {}, instance_id="pod-1").result().assignment == b"s"
    # the pod restarts: a new join under the same instance id, no member id
    back = coord.join(request(instance_id="pod-1")).result()
    assert back.error is E.NONE and back.generation == 1 and back.member_id != old_id
    assert coord.heartbeat("g", 1, leader_id) is E.NONE  # nobody else rebalances
    synced = coord.sync("g", 1, back.member_id, {}, instance_id="pod-1").result()
    assert synced.assignment == b"s"
    # the old incarnation is fenced everywhere
    assert coord.heartbeat("g", 1, old_id, "pod-1") is E.FENCED_INSTANCE_ID
    assert coord.check_commit("g", 1, old_id, "pod-1") is E.FENCED_INSTANCE_ID
    assert coord.sync("g", 1, old_id, {}, instance_id="pod-1").result().error is (
        E.FENCED_INSTANCE_ID
    )
    stale = coord.join(request(old_id, instance_id="pod-1")).result()
    assert stale.error is E.FENCED_INSTANCE_ID
    assert coord.leave("g", [old_id], ["pod-1"]) == [E.FENCED_INSTANCE_ID]
    # leaving by instance id alone
    assert coord.leave("g", [""], ["pod-1"]) == [E.NONE]
    assert coord.heartbeat("g", 1, leader_id) is E.REBALANCE_IN_PROGRESS
    assert leader.result().generation == 1


def test_a_static_leader_coming_back_rebalances_the_group(coord, clock):
    first = coord.join(request(instance_id="pod-0"))
    advance(coord, clock, DELAY)
    old = first.result()
    assert old.leader_id == old.member_id
    coord.sync("g", 1, old.member_id, {old.member_id: b"a"})
    back = coord.join(request(instance_id="pod-0")).result()  # the leader must assign again:
    assert back.generation == 2 and back.leader_id == back.member_id != old.member_id
    assert [m.member_id for m in back.members] == [back.member_id]
