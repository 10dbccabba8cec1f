"""The log-shipping stream: what a leader sends a follower and how the follower checks it.

A fetch names the log, the follower's durable end (its acknowledgement) and its epoch; the
leader answers, after at most ``wait_ms`` if nothing new is durable, with log bytes from
exactly that position: whole frames of whole batches from one segment, the segment's start,
and the leader's epoch history in headers. The follower checks the position, every frame's
CRC-32C and that the bytes end at a batch end before it writes anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_node.errors import CorruptData
from storage_node.formats.record import FLAG_BATCH_END, check_frame, frame_flags, last_batch_end
from storage_node.store.commitlog import CommitLog

CONTENT_TYPE = "application/x-msgstore-log"
H_POSITION = "X-Msgstore-Position"  # log position of the first byte of the body
H_SEGMENT = "X-Msgstore-Segment"  # start of the leader's segment holding the body
H_EPOCH = "X-Msgstore-Epoch"  # the leader's epoch
H_EPOCHS = "X-Msgstore-Epochs"  # the leader's epoch history, JSON [[epoch, start], ...]
H_DURABLE_END = "X-Msgstore-Durable-End"  # the leader's durable end (the follower's lag)
H_LOG_START = "X-Msgstore-Log-Start"  # first position the leader holds
H_NODE_IP = "X-Msgstore-Node-Ip"  # the IP of the log's message IDs
H_TOPICS = "X-Msgstore-Topics"  # the leader's topics (JSON), when the counts differ
H_COPIES = "X-Msgstore-Copies"  # (produce answers) replicas durable past the batch
FETCH_BYTES = 4 << 20


@dataclass(frozen=True)
class Shipment:
    position: int
    segment: int
    data: bytes


def read_shipment(log: CommitLog, position: int, max_bytes: int = FETCH_BYTES) -> Shipment:
    """Durable bytes from ``position`` cut at the last whole batch (a batch bigger than
    ``max_bytes`` is sent whole)."""
    seg, data = log.read_raw(position, max_bytes)
    cut = last_batch_end(data, 0, len(data))
    if cut == 0 and data:
        seg, data = log.read_raw(position, log.segment_end(seg) - position)
        cut = last_batch_end(data, 0, len(data))
    return Shipment(position, seg, data[:cut])


def check_shipment(data: bytes) -> int:
    """The number of frames in ``data``; CorruptData unless every frame is whole and passes
    its CRC and the last one ends a batch."""
    off = 0
    frames = 0
    last_flags = FLAG_BATCH_END
    while off < len(data):
        size = check_frame(data, off, len(data) - off)
        if size <= 0:
            raise CorruptData(f"a shipped frame at byte {off} is torn or fails its CRC")
        last_flags = frame_flags(data, off)
        off += size
        frames += 1
    if not last_flags & FLAG_BATCH_END:
        raise CorruptData("a shipment ends inside a batch")
    return frames
