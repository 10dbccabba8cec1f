"""Every file and folder name of a node's data directory, and the lifecycle state names.

One module spells them (as LevelDB's ``filename.h`` does), so the store, recovery,
replication and the tools agree on the layout without repeating string literals. The layout
of a store's directory (a node's own, or ``logs/<id>/`` of a replicated log)::

    LOCK                    one process per directory (directory_lock.py)
    checkpoint              the last checkpoint (formats/checkpoint.py)
    topics.json             the topic registry; producers.json: the idempotency table
    offsets/<group>.json    committed offsets of a consumer group
    commitlog/<state>/<segment name>      segments, by lifecycle folder
    index/<state>/<key-index name>        key-index files, by lifecycle folder
    msgid/<yyyyMMddHH>/<app>/...          message-ID indexes, by hour
    queues/<topic>/<partition>/<first offset>   queue index files
    objects/                the local object store (when none is configured)
    logs/<log id>/          a replicated log's store, with log.json and leader-epochs.json

Segments are named by their first log position as 20 decimal digits, so the file holding
position p is the last one whose name is <= p. Positions are 64-bit and continuous across
segments (a frame never straddles two files); walking the frames inside a segment is the
record format's job (``formats/record.py``). Key-index files are named by begin time (as in
RocketMQ) plus first log position, so names never collide.
"""

from __future__ import annotations

import time
from enum import StrEnum


class State(StrEnum):
    """Where a segment or key-index file is in its lifecycle (seal → compact → upload).

    ``sealed`` is a file of ``unsealed/`` that takes no more writes; it has no folder."""

    UNSEALED = "unsealed"
    SEALED = "sealed"
    COMPACTED = "compacted"
    UPLOADED = "uploaded"


# the lifecycle folders, in the order a file moves through them (recovery keeps the last)
FOLDERS: tuple[State, ...] = (State.UNSEALED, State.COMPACTED, State.UPLOADED)
# the states a FileInfo reports, in lifecycle order
STATES: tuple[State, ...] = (State.UNSEALED, State.SEALED, State.COMPACTED, State.UPLOADED)

# a store's directory
LOCK = "LOCK"
CHECKPOINT = "checkpoint"
TOPICS = "topics.json"
PRODUCERS = "producers.json"
OFFSETS_DIR = "offsets"
COMMITLOG_DIR = "commitlog"
KEY_INDEX_DIR = "index"
MSGID_DIR = "msgid"
QUEUES_DIR = "queues"
OBJECTS_DIR = "objects"
# a node's data directory: its replicated logs, each with its identity and epoch history
LOGS_DIR = "logs"
LOG_INFO = "log.json"  # the IP the log's message IDs carry (kept across failovers)
EPOCHS = "leader-epochs.json"
NODE_LOG = "node.log"  # what a locally started node prints

SEGMENT_NAME_DIGITS = 20
JSON_SUFFIX = ".json"


def segment_name(start: int) -> str:
    return f"{start:0{SEGMENT_NAME_DIGITS}d}"


def parse_segment_name(name: str) -> int | None:
    return int(name) if len(name) == SEGMENT_NAME_DIGITS and name.isdigit() else None


def index_file_name(begin_ms: int, begin_pos: int) -> str:
    """A key-index file: begin time in ms (13 digits), ``-``, first log position."""
    return f"{begin_ms:013d}-{begin_pos:020d}"


def is_index_name(name: str) -> bool:
    parts = name.split("-")
    return len(parts) == 2 and len(parts[1]) == 20 and all(p.isdigit() for p in parts)


def name_begin_pos(name: str) -> int:
    """The first log position of a key-index file, from its name."""
    return int(name.split("-")[1])


def spare_index_name(number: int) -> str:
    """A key-index file made ahead of need: a temporary until taken, so recovery deletes
    one a crash left behind."""
    return f"spare-{number}.tmp"


def queue_file_name(first_offset: int) -> str:
    """A queue index file, named by its first offset (20 digits, as segments)."""
    return segment_name(first_offset)


def parse_queue_file_name(name: str) -> int | None:
    return parse_segment_name(name)


def group_file_name(group: str) -> str:
    return group + JSON_SUFFIX


def hour_folder(hour: int) -> str:
    """``yyyyMMddHH`` (UTC) of an hour number: the folder of its message-ID indexes."""
    return time.strftime("%Y%m%d%H", time.gmtime(hour * 3600))


def object_key(kind: str, name: str) -> str:
    """The object-store key of an uploaded file (``kind``: segment or key_index)."""
    return f"{COMMITLOG_DIR if kind == 'segment' else KEY_INDEX_DIR}/{name}"
