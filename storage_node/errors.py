"""Typed errors shared by every layer.

Each error carries a stable machine-readable ``code`` and the HTTP status the node server
answers with, so the server maps errors to responses without a lookup table of its own.
"""

from __future__ import annotations


class MsgStoreError(Exception):
    """Base class: a problem the caller can act on."""

    code = "internal"
    status = 500

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {"code": self.code, "message": self.message}
        body.update(self.details)
        return {"error": body}


class InvalidArgument(MsgStoreError):
    """A parameter is malformed or out of its allowed range."""

    code = "invalid_argument"
    status = 400


class InvalidName(InvalidArgument):
    """A topic, group or app name would escape its folder or has forbidden characters."""

    code = "invalid_name"


class InvalidBatch(InvalidArgument):
    """A batch of messages is malformed; nothing of it was written."""

    code = "invalid_batch"


class OffsetOutOfRange(InvalidArgument):
    """A queue offset or position lies outside what the partition holds."""

    code = "offset_out_of_range"


class UnknownTopic(MsgStoreError):
    code = "unknown_topic"
    status = 404


class NotFound(MsgStoreError):
    code = "not_found"
    status = 404


class TopicConflict(MsgStoreError):
    """A topic exists with a different configuration."""

    code = "topic_conflict"
    status = 409


class TopicsManaged(TopicConflict):
    """The cluster's topics are declared elsewhere (the operator's MessageStore spec), so a
    node refuses to create, grow or delete one (a 409 as before; Kafka: POLICY_VIOLATION)."""


class DuplicateMessageId(MsgStoreError):
    """A producer-supplied message ID is already taken on this node (or twice in a batch)."""

    code = "duplicate_msg_id"
    status = 409


class MessageTooLarge(MsgStoreError):
    code = "message_too_large"
    status = 413


class NotOwner(MsgStoreError):
    """The partition belongs to another node; ``owner`` names its address."""

    code = "wrong_node"
    status = 421


class NotLeader(NotOwner):
    """This node does not serve the partition (or log): another node leads it. Carries the
    leader's node id and address (None when unknown) and the log's leader epoch (0 for a
    node without replicated logs), so any front end can redirect; on the HTTP wire it is the
    421 ``wrong_node`` answer, with only the details given as keywords."""

    def __init__(
        self,
        message: str,
        *,
        leader_id: str | None = None,
        leader_address: str | None = None,
        epoch: int = 0,
        **details: object,
    ) -> None:
        super().__init__(message, **details)
        # rebuilt from a wire answer (a client): the details name the owner
        owner_id, owner = details.get("owner_id"), details.get("owner")
        self.leader_id = leader_id or (owner_id if isinstance(owner_id, str) else None)
        self.leader_address = leader_address or (owner if isinstance(owner, str) else None)
        self.epoch = epoch


class Forbidden(MsgStoreError):
    """The caller is known but no ACL rule allows it this operation on this resource."""

    code = "forbidden"
    status = 403


class Unavailable(MsgStoreError):
    """The store is recovering, closing or otherwise cannot serve right now."""

    code = "unavailable"
    status = 503


class DiskFull(MsgStoreError):
    code = "disk_full"
    status = 507


class CorruptData(MsgStoreError):
    """Stored bytes fail their checksum; they are reported, never served."""

    code = "corrupt_data"
    status = 500


class Fenced(MsgStoreError):
    """A write or replication request of an older leader epoch than this node knows: the
    sender was replaced and must not act as the log's leader (``epoch`` is the current)."""

    code = "fenced"
    status = 409


class NotEnoughReplicas(Unavailable):
    """A ``sync`` append was written by the leader but not by enough in-sync followers in
    time: not acknowledged. A retry with the same producer id and sequence is safe."""

    code = "not_enough_replicas"


class Incomplete(MsgStoreError):
    """A cluster-wide lookup found nothing on the nodes that answered, but some nodes did
    not answer (``unreachable_nodes``): the answer may be there. Not a 404, and not retried
    by the clients (asking another node meets the same gap)."""

    code = "incomplete"
    status = 503


class AccessManaged(MsgStoreError):
    """Users and ACL rules of this node cannot be changed through its API: they are managed
    from outside (MessageStoreUser resources), or the node has no writable access file."""

    code = "access_managed"
    status = 409
