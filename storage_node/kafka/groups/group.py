"""A classic consumer group as its coordinator holds it in memory: members, generation,
chosen protocol, deadlines. Pure data and the rules that read it (protocol choice); the state
changes are the coordinator's (``coordinator.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Generic, TypeVar

T = TypeVar("T")


class ErrorCode(IntEnum):
    """The Kafka error codes a group answer carries (numbers fixed by the protocol)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REQUEST_TIMED_OUT = 7
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    NOT_ENOUGH_REPLICAS = 19
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    INVALID_REQUEST = 42
    KAFKA_STORAGE_ERROR = 56
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82


class GroupState(StrEnum):
    """The classic protocol's group states, named as DescribeGroups and ListGroups say them."""

    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class Reply(Generic[T]):
    """An answer that may come later: a JoinGroup waits for the rebalance, a follower's
    SyncGroup for the leader's assignment. Settled once; later settles are ignored (the
    request was already answered)."""

    __slots__ = ("_value", "_settled", "_callbacks")

    def __init__(self) -> None:
        self._value: T | None = None
        self._settled = False
        self._callbacks: list[Callable[[T], None]] = []

    @classmethod
    def of(cls, value: T) -> Reply[T]:
        reply: Reply[T] = cls()
        reply.settle(value)
        return reply

    @property
    def settled(self) -> bool:
        return self._settled

    def result(self) -> T:
        if not self._settled:
            raise RuntimeError("the reply is not settled yet")
        return self._value  # type: ignore[return-value]

    def settle(self, value: T) -> None:
        if self._settled:
            return
        self._value, self._settled = value, True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(value)

    def on_settled(self, callback: Callable[[T], None]) -> None:
        """Call ``callback`` with the value once settled (now, if it already is)."""
        if self._settled:
            callback(self._value)  # type: ignore[arg-type]
        else:
            self._callbacks.append(callback)


@dataclass(frozen=True)
class GroupSettings:
    """Kafka's broker defaults (group.min/max.session.timeout.ms,
    group.initial.rebalance.delay.ms); ``max_members`` bounds a group's memory."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_members: int = 10_000


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: GroupState


@dataclass(frozen=True)
class JoinRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    # JoinGroup v4+ (KIP-394): a first join without a member id gets MEMBER_ID_REQUIRED
    require_known_member_id: bool = True


@dataclass(frozen=True)
class MemberInfo:
    """What the leader learns of each member: its id and its metadata for the protocol."""

    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[MemberInfo, ...] = ()


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: GroupState
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    last_heartbeat_ms: int
    assignment: bytes = b""
    join_reply: Reply[JoinResult] | None = None  # set while it waits for the rebalance
    sync_reply: Reply[SyncResult] | None = None  # set while it waits for the assignment
    synced: bool = False  # sent SyncGroup in this generation

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        """Its first protocol (in its order of preference) that every member supports."""
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in joining order
    pending: dict[str, int] = field(default_factory=dict)  # member id handed out -> expiry ms
    join_deadline_ms: int | None = None  # PreparingRebalance: members that have not rejoined go
    delay_until_ms: int | None = None  # a rebalance from Empty waits for more members to join
    new_member_added: bool = False
    sync_deadline_ms: int | None = None  # members that have not sent SyncGroup by then go
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id

    def fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A static member's request under a member id the instance no longer holds."""
        held = self.static.get(instance_id) if instance_id is not None else None
        return held is not None and held != member_id

    def candidates(self) -> set[str]:
        """The protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Whether a member with these protocols may join (the same type and at least one
        protocol in common with every member)."""
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidates())

    def select_protocol(self) -> str:
        """Each member votes for its preferred protocol among those all support; the most
        votes win (ties go to the first member's preference, so every run picks the same)."""
        candidates = self.candidates()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        first = next(iter(self.members.values()))
        order = [name for name, _ in first.protocols]
        return min((name for name, n in votes.items() if n == best), key=order.index)

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_reply is not None for m in self.members.values())
