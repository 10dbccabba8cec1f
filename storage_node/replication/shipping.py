"""The log-shipping stream: what a leader sends a follower and how the follower checks it.

A fetch names the log, the follower's durable end (its acknowledgement) and its epoch; the
leader answers, after at most ``wait_ms`` if nothing new is written, with log bytes from
exactly that position: whole batches from one segment (``CommitLog.read_frames``), the
segment's start, and the leader's epoch history in headers. The follower checks the
position; its log (``CommitLog.append_frames``) checks every frame's CRC-32C and that the
bytes end at a batch end before it writes anything.
"""

from __future__ import annotations

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
