"""The store's typed errors as Kafka error codes, so a Kafka client gets the code it knows
how to act on (retry, refresh metadata, give up) for every failure the node reports."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from storage_node.errors import (
    CorruptData,
    DiskFull,
    DuplicateMessageId,
    Fenced,
    InvalidArgument,
    InvalidBatch,
    InvalidName,
    MessageTooLarge,
    MsgStoreError,
    NotEnoughReplicas,
    NotFound,
    NotLeader,
    NotOwner,
    OffsetOutOfRange,
    TopicConflict,
    TopicsManaged,
    Unavailable,
    UnknownTopic,
)

# most specific first: the first class the error is an instance of wins
_CODES: tuple[tuple[type[MsgStoreError], ErrorCode], ...] = (
    (UnknownTopic, ErrorCode.unknown_topic_or_partition),
    (NotLeader, ErrorCode.not_leader_or_follower),
    (NotOwner, ErrorCode.not_leader_or_follower),
    (Fenced, ErrorCode.not_leader_or_follower),
    (MessageTooLarge, ErrorCode.message_too_large),
    (OffsetOutOfRange, ErrorCode.offset_out_of_range),
    (InvalidName, ErrorCode.invalid_topic_exception),
    (InvalidBatch, ErrorCode.invalid_record),
    (DuplicateMessageId, ErrorCode.invalid_record),
    (InvalidArgument, ErrorCode.invalid_request),
    (TopicsManaged, ErrorCode.policy_violation),  # declared in the MessageStore spec
    (TopicConflict, ErrorCode.topic_already_exists),
    (NotEnoughReplicas, ErrorCode.not_enough_replicas),
    (DiskFull, ErrorCode.kafka_storage_error),
    (Unavailable, ErrorCode.leader_not_available),
    (CorruptData, ErrorCode.kafka_storage_error),
    (NotFound, ErrorCode.unknown_topic_or_partition),
)


def error_code(exc: BaseException) -> ErrorCode:
    """The Kafka error code for an exception raised below a handler."""
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return ErrorCode.unknown_server_error


def epoch_check(node: Any, topic: str, partitions: int, partition: int, request: Any) -> ErrorCode:
    """A request naming the leader epoch it knows (``current_leader_epoch``, -1: none) is
    answered FENCED_LEADER_EPOCH when the log has a newer epoch (the client must refresh its
    metadata) and UNKNOWN_LEADER_EPOCH when the client knows a newer one than this node."""
    from storage_node.kafka.node import placements

    known = int(getattr(request, "current_leader_epoch", -1))
    if known < 0:
        return ErrorCode.none
    epoch = placements(node, topic, partitions)[partition].epoch
    if known < epoch:
        return ErrorCode.fenced_leader_epoch
    if known > epoch:
        return ErrorCode.unknown_leader_epoch
    return ErrorCode.none


def error_message(exc: BaseException) -> str:
    """The human-readable text sent where the answer has a message field."""
    if isinstance(exc, MsgStoreError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"
