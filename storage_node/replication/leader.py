"""The leader's half of log shipping: answer a follower's fetch (which acknowledges what
the follower holds), wait for new bytes, say where an epoch ended.

The waiting fetches are woken by the log's written-bytes subscription, installed once when
this node begins to lead the log (``LogHost._lead``); a front end (the replication routes)
only parses the request and encodes the ``Shipment``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from storage_node.errors import Fenced, InvalidArgument, OffsetOutOfRange
from storage_node.replication import shipping
from storage_node.replication.epochs import check_epoch
from storage_node.replication.replicas import LogHost, topic_configs

ROLE_CHECK_S = 0.5  # a waiting fetch looks whether this node still leads
InThread = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class Shipment:
    """Log bytes for a follower and the headers that describe them (shipping.H_*)."""

    data: bytes
    headers: dict[str, str]


async def ship(
    host: LogHost,
    log_id: str,
    follower: str,
    position: int,
    epoch: int,
    wait_ms: int,
    topics: int,
    in_thread: InThread,
) -> Shipment:
    """A follower's fetch from ``position`` (its durable end: an acknowledgement), made
    under ``epoch``, holding ``topics`` topics; waits up to ``wait_ms`` for new bytes."""
    hosted = host.logs.get(log_id)
    if hosted is not None and hosted.role == "leader" and epoch > hosted.epoch:
        hosted.stale = True  # a follower knows of a newer leader: this one is replaced
        raise Fenced(f"log {log_id!r}: epoch {epoch} replaced this leader's {hosted.epoch}")
    hosted = host.led(log_id)
    check_epoch(epoch, hosted.epoch, "a fetch")
    tracker = hosted.tracker
    assert tracker is not None
    store = hosted.store
    ends = store.log_ends()
    if position > ends.shippable_end:
        raise InvalidArgument(
            f"the copy of log {log_id!r} ends at {position}, past the leader's {ends.shippable_end}"
        )
    if position < ends.start:
        raise OffsetOutOfRange(f"log {log_id!r} starts at {ends.start} now", log_start=ends.start)
    tracker.ack(follower, position, ends.durable_end)
    deadline = time.monotonic() + wait_ms / 1000
    while True:
        grew = tracker.data
        segment, data = await in_thread(store.read_frames, position, shipping.FETCH_BYTES)
        left = deadline - time.monotonic()
        if data or left <= 0 or hosted.stale or hosted.role != "leader":
            break
        try:  # the leader's writes wake us; the timeout only looks at its role again
            await asyncio.wait_for(grew.wait(), min(left, ROLE_CHECK_S))
        except TimeoutError:
            pass
    hosted.shipped_end = max(hosted.shipped_end, position + len(data))
    ends = store.log_ends()
    headers = {
        shipping.H_POSITION: str(position),
        shipping.H_SEGMENT: str(segment),
        shipping.H_EPOCH: str(hosted.epoch),
        shipping.H_EPOCHS: json.dumps(hosted.epochs.entries),
        shipping.H_DURABLE_END: str(ends.durable_end),
        shipping.H_LOG_START: str(ends.start),
    }
    ip = hosted.node_ip()
    if ip:
        headers[shipping.H_NODE_IP] = ip
    configs = topic_configs(store)
    if topics != len(configs):
        headers[shipping.H_TOPICS] = json.dumps(configs)
    return Shipment(data, headers)


def epoch_end(host: LogHost, log_id: str, epoch: int, of: int) -> dict[str, Any]:
    """Where this leader's log says epoch ``of`` ended (KIP-101's OffsetsForLeaderEpoch),
    asked under the caller's ``epoch``."""
    hosted = host.led(log_id)
    check_epoch(epoch, hosted.epoch, "an epoch-end request")
    end = hosted.epochs.end_of(of, hosted.store.log_ends().shippable_end)
    return {"log": log_id, "epoch": hosted.epoch, "end": end}
