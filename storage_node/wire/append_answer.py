"""The binary answer to an append (docs/BATCH_FORMAT.md, "Append answer").

A producer that sends ``Accept: application/x-msgstore-batch`` gets where its batch went as
column arrays instead of JSON: building and parsing a JSON list of thousands of message IDs
costs more than appending the messages. Layout (little-endian)::

    b"MSA1"  u32 count
    partitions : count x i32
    offsets    : count x i64
    ID lengths : count x i32
    IDs        : the message IDs back to back (ASCII)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from storage_node.wire.batch_codec import MAX_MESSAGES
from storage_node.wire.read_answer import MalformedAnswer

if TYPE_CHECKING:
    from storage_node.store.types import AppendColumns

MAGIC = b"MSA1"
HEADER = struct.Struct("<4sI")


def encode_append_answer(done: AppendColumns) -> bytes:
    """The answer body, built from the result arrays (no object per message)."""
    return b"".join(
        (
            HEADER.pack(MAGIC, len(done)),
            done.partition_array.astype("<i4").tobytes(),
            done.offset_array.astype("<i8").tobytes(),
            done.id_lens.astype("<i4").tobytes(),
            done.ids_blob,
        )
    )


@dataclass
class AppendAnswer:
    """A decoded append answer: arrays, with the message IDs split only when asked for."""

    partitions: np.ndarray  # int64
    offsets: np.ndarray  # int64
    id_lengths: np.ndarray  # int64
    ids: bytes

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def msg_ids(self) -> list[str]:
        ends = np.cumsum(self.id_lengths).tolist()
        text = self.ids.decode("ascii")  # checked ASCII: byte offsets are character offsets
        return list(map(text.__getitem__, map(slice, [0, *ends[:-1]], ends)))


def decode_append_answer(body: bytes) -> AppendAnswer:
    """Parse and check an answer; MalformedAnswer names what does not add up."""
    if len(body) < HEADER.size:
        raise MalformedAnswer(f"append answer too short for its {HEADER.size}-byte header")
    magic, count = HEADER.unpack_from(body, 0)
    if magic != MAGIC:
        raise MalformedAnswer(f"bad append answer magic {magic!r}, expected {MAGIC!r}")
    if count > MAX_MESSAGES:
        raise MalformedAnswer(f"append answer holds {count} results, at most {MAX_MESSAGES}")
    pos = HEADER.size
    if len(body) < pos + count * 16:
        raise MalformedAnswer("append answer truncated inside its columns")
    partitions = np.frombuffer(body, "<i4", count, pos).astype(np.int64)
    pos += 4 * count
    offsets = np.frombuffer(body, "<i8", count, pos).astype(np.int64)
    pos += 8 * count
    id_lengths = np.frombuffer(body, "<i4", count, pos).astype(np.int64)
    pos += 4 * count
    if count and (int(partitions.min()) < 0 or int(offsets.min()) < 0 or int(id_lengths.min()) < 0):
        raise MalformedAnswer("append answer holds a negative partition, offset or length")
    if pos + int(id_lengths.sum()) != len(body):
        raise MalformedAnswer("append answer IDs do not add up to the body")
    ids = bytes(body[pos:])
    if not ids.isascii():
        raise MalformedAnswer("append answer IDs are not ASCII")
    return AppendAnswer(partitions, offsets, id_lengths, ids)
