"""The answer of a read or key lookup in the binary framing (second section of
docs/BATCH_FORMAT.md), in the columnar style of the batches (``batch_codec.py``). The header
is 24 bytes and the 64-bit columns come first, so every column is aligned whenever the body
is: readers can view the columns without copying. Encoder and decoder are tested against
each other.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from storage_node.errors import CorruptData, InvalidArgument
from storage_node.formats.headers import Headers, headers_list
from storage_node.formats.packed import PackedColumn, headers_column
from storage_node.wire.batch_codec import ABSENT, CONTENT_TYPE, MAX_MESSAGES, lengths_of, split_text

# The answer of a read or key lookup in the same columnar style (second section of
# docs/BATCH_FORMAT.md). The header is 24 bytes and the 64-bit columns come first, so every
# column is aligned whenever the body is: readers can view the columns without copying.

READ_MAGIC = b"MSR1"
READ_HEADER = struct.Struct("<4sIqII")  # magic, count, next offset, flags, meta length
FLAG_END_REACHED = 1  # a read with end_time stopped at a later message
FLAG_LIMIT_REACHED = 2  # a key lookup found more than it answers
# a message has headers: a headers length column follows the value lengths, and the headers
# blob (formats/headers.py's byte string per message) the values; answers without headers
# do not set it, so readers from before headers existed read them as they always did
FLAG_HEADERS = 4
_KNOWN_FLAGS = FLAG_END_REACHED | FLAG_LIMIT_REACHED | FLAG_HEADERS
_ROW_BYTES = 3 * 8 + 5 * 4  # offsets, born and store times; partitions and four lengths
MAX_META_BYTES = 1024 * 1024


def accepts_read_columns(accept: str | None) -> bool:
    """Content negotiation: answer in the binary framing when ``Accept`` lists it with q > 0
    and does not prefer JSON (JSON stays the default for every other client)."""
    if not accept:
        return False
    quality: dict[str, float] = {}
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        quality[media.lower()] = max(q, quality.get(media.lower(), 0.0))
    ours = quality.get(CONTENT_TYPE, 0.0)
    return ours > 0 and ours >= quality.get("application/json", 0.0)


def accepts_headers(accept: str | None) -> bool:
    """Whether a binary answer may carry the headers column: the client lists the binary
    media type with ``headers=1`` (readers written before headers existed do not, and get
    the layout they know)."""
    for item in (accept or "").split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if media.lower() == CONTENT_TYPE and any(
            p.replace(" ", "").lower() == "headers=1" for p in params
        ):
            return True
    return False


class MalformedAnswer(CorruptData):
    """A read answer in the binary framing that does not add up (a bug or a broken transfer).

    Subclasses CorruptData (500), so callers treat it like any unreadable data."""

    code = "malformed_answer"


@dataclass
class ReadColumns:
    """A decoded read answer: numpy columns plus the concatenated UTF-8 / byte blobs.

    Length columns are int32 with -1 for 'absent' (values are never absent). The blobs are
    zero-copy slices of the body; ``*_text()`` / ``value_list()`` build Python objects for
    callers that want them, columnar readers (Arrow) use the arrays and blobs directly.
    """

    next_offset: int | None
    flags: int
    meta: dict[str, Any]
    partitions: np.ndarray
    offsets: np.ndarray
    timestamps: np.ndarray
    store_timestamps: np.ndarray
    key_lengths: np.ndarray
    tag_lengths: np.ndarray
    msg_id_lengths: np.ndarray
    value_lengths: np.ndarray
    keys: memoryview
    tags: memoryview
    msg_ids: memoryview
    values: memoryview
    header_lengths: np.ndarray | None = None  # None: no message has headers
    headers: memoryview | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def end_reached(self) -> bool:
        return bool(self.flags & FLAG_END_REACHED)

    @property
    def limit_reached(self) -> bool:
        return bool(self.flags & FLAG_LIMIT_REACHED)

    def key_text(self) -> list[str | None]:
        return split_text(bytes(self.keys), self.key_lengths, "key")

    def tag_text(self) -> list[str | None]:
        return split_text(bytes(self.tags), self.tag_lengths, "tag")

    def msg_id_text(self) -> list[str | None]:
        return split_text(bytes(self.msg_ids), self.msg_id_lengths, "message ID")

    def value_list(self) -> list[bytes]:
        if not len(self.value_lengths):
            return []
        ends = np.cumsum(self.value_lengths, dtype=np.int64).tolist()
        blob = self.values
        return [bytes(blob[s:e]) for s, e in zip([0, *ends[:-1]], ends, strict=True)]

    def header_lists(self) -> list[Headers]:
        """Each message's headers as (name, value bytes or None) pairs, ``()`` for none."""
        if self.header_lengths is None or self.headers is None:
            return [()] * len(self)
        return headers_list(self.headers, self.header_lengths)

    def to_rows(self, topic: str) -> list[dict[str, Any]]:
        """Rows shaped like the JSON answer's messages, but with ``value`` always bytes and
        ``headers`` (only in rows that have any) as (name, bytes or None) pairs."""
        names = ("partition", "offset", "key", "tag", "msg_id", "timestamp", "store_timestamp")
        columns = (
            self.partitions.tolist(),
            self.offsets.tolist(),
            self.key_text(),
            self.tag_text(),
            self.msg_id_text(),
            self.timestamps.tolist(),
            self.store_timestamps.tolist(),
        )
        rows = [
            {"topic": topic, **dict(zip(names, row, strict=True)), "value": value}
            for *row, value in zip(*columns, self.value_list(), strict=True)
        ]
        if self.header_lengths is not None:
            for row, headers in zip(rows, self.header_lists(), strict=True):
                if headers:
                    row["headers"] = list(headers)
        return rows


def _text_blob(texts: list[str | None]) -> tuple[np.ndarray, bytes]:
    """(lengths with -1 = absent, UTF-8 blob) of a text column, one encode when it is ASCII."""
    count = len(texts)
    if count and texts.count(None) == count:
        return np.full(count, ABSENT, dtype="<i4"), b""
    present = [t for t in texts if t is not None]
    joined = "".join(present)
    if joined.isascii():
        lengths = np.fromiter(
            (ABSENT if t is None else len(t) for t in texts), dtype="<i4", count=count
        )
        return lengths, joined.encode("ascii")
    encoded = [None if t is None else t.encode("utf-8") for t in texts]
    return lengths_of(encoded), b"".join(e for e in encoded if e is not None)


def encode_read_answer(
    messages: Sequence[Any],
    next_offset: int | None,
    *,
    end_reached: bool = False,
    limit_reached: bool = False,
    meta: dict[str, Any] | None = None,
    with_headers: bool = False,
) -> bytes:
    """Frame stored messages (objects with the engine ``Message`` attributes) as columns;
    their headers too when ``with_headers`` (the client asked, ``accepts_headers``).

    Each column is one list comprehension into one numpy array, each blob one join: no
    per-message struct packing.
    """
    count = len(messages)
    if count > MAX_MESSAGES:
        raise InvalidArgument(f"an answer holds at most {MAX_MESSAGES} messages, got {count}")
    values = [m.value for m in messages]
    key_lens, key_blob = _text_blob([m.key for m in messages])
    tag_lens, tag_blob = _text_blob([m.tag for m in messages])
    id_lens, id_blob = _text_blob([m.msg_id for m in messages])
    packed = None
    if with_headers:
        packed = headers_column([getattr(m, "headers", ()) for m in messages])
    parts = read_answer_parts(
        offsets=np.array([m.offset for m in messages], dtype="<i8"),
        timestamps=np.array([m.timestamp for m in messages], dtype="<i8"),
        store_timestamps=np.array([m.store_timestamp for m in messages], dtype="<i8"),
        partitions=np.array([m.partition for m in messages], dtype="<i4"),
        key_lengths=key_lens,
        tag_lengths=tag_lens,
        msg_id_lengths=id_lens,
        value_lengths=np.fromiter(map(len, values), dtype="<i4", count=count),
        blobs=(key_blob, tag_blob, id_blob, b"".join(values)),
        next_offset=next_offset,
        end_reached=end_reached,
        limit_reached=limit_reached,
        meta=meta,
        headers=packed,
    )
    return b"".join(parts)


def read_answer_parts(
    *,
    offsets: np.ndarray,
    timestamps: np.ndarray,
    store_timestamps: np.ndarray,
    partitions: np.ndarray,
    key_lengths: np.ndarray,
    tag_lengths: np.ndarray,
    msg_id_lengths: np.ndarray,
    value_lengths: np.ndarray,
    blobs: Sequence[bytes | bytearray | memoryview],
    next_offset: int | None,
    end_reached: bool = False,
    limit_reached: bool = False,
    meta: dict[str, Any] | None = None,
    headers: PackedColumn | None = None,
) -> list[bytes | bytearray | memoryview]:
    """The pieces of a read answer framed from columns that already exist (from
    ``encode_read_answer``, or from a store that keeps messages as columns), in order:
    header, arrays, blobs (keys, tags, message IDs, values), metadata. Joined by the caller,
    once: a fetch answer joins the pieces of all its pages together. The caller vouches that
    blob sizes match the lengths. ``headers`` (None: no message has any) adds the headers
    column and sets FLAG_HEADERS."""
    count = len(offsets)
    if count > MAX_MESSAGES:
        raise InvalidArgument(f"an answer holds at most {MAX_MESSAGES} messages, got {count}")
    meta_bytes = json.dumps(meta, separators=(",", ":")).encode() if meta else b""
    flags = (FLAG_END_REACHED if end_reached else 0) | (FLAG_LIMIT_REACHED if limit_reached else 0)
    if headers is not None:
        flags |= FLAG_HEADERS
    header = READ_HEADER.pack(
        READ_MAGIC, count, ABSENT if next_offset is None else next_offset, flags, len(meta_bytes)
    )
    arrays = [
        np.ascontiguousarray(column, dtype=dtype).tobytes()
        for column, dtype in (
            (offsets, "<i8"),
            (timestamps, "<i8"),
            (store_timestamps, "<i8"),
            (partitions, "<i4"),
            (key_lengths, "<i4"),
            (tag_lengths, "<i4"),
            (msg_id_lengths, "<i4"),
            (value_lengths, "<i4"),
        )
    ]
    if headers is None:
        return [header, *arrays, *blobs, meta_bytes]
    hlens = np.maximum(headers.lens, 0).astype("<i4").tobytes()
    return [header, *arrays, hlens, *blobs, headers.blob, meta_bytes]


def _check_utf8(blob: memoryview, lengths: np.ndarray, what: str) -> None:
    """Every string must be valid UTF-8 on its own (an ASCII blob is, in one C call)."""
    raw = bytes(blob)
    if raw.isascii() or not len(lengths):
        return
    ends = np.cumsum(np.maximum(lengths, 0), dtype=np.int64).tolist()
    try:
        for s, e in zip([0, *ends[:-1]], ends, strict=True):
            raw[s:e].decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedAnswer(f"a {what} in the read answer is not valid UTF-8") from None


def decode_read_answer(body: bytes | bytearray | memoryview) -> ReadColumns:
    """Parse and check a binary read answer; any inconsistency raises MalformedAnswer."""
    view = memoryview(body).cast("B")
    size = len(view)
    if size < READ_HEADER.size:
        raise MalformedAnswer(f"read answer too short for its {READ_HEADER.size}-byte header")
    magic, count, next_offset, flags, meta_len = READ_HEADER.unpack_from(view, 0)
    if magic != READ_MAGIC:
        raise MalformedAnswer(f"bad read answer magic {magic!r}, expected {READ_MAGIC!r}")
    if flags & ~_KNOWN_FLAGS:
        raise MalformedAnswer(f"unknown read answer flags {flags:#x}")
    if count > MAX_MESSAGES:
        raise MalformedAnswer(f"read answer claims {count} messages, at most {MAX_MESSAGES}")
    if next_offset < ABSENT:
        raise MalformedAnswer(f"next offset {next_offset} is negative")
    if meta_len > MAX_META_BYTES:
        raise MalformedAnswer(f"read answer metadata of {meta_len} bytes is too large")
    pos = READ_HEADER.size
    with_headers = bool(flags & FLAG_HEADERS)
    if size < pos + count * (_ROW_BYTES + 4 * with_headers) + meta_len:
        raise MalformedAnswer("read answer truncated inside its column arrays")

    def column(dtype: str) -> np.ndarray:
        nonlocal pos
        arr = np.frombuffer(view, dtype=dtype, count=count, offset=pos)
        pos += arr.nbytes
        return arr

    offsets, timestamps, store_timestamps = column("<i8"), column("<i8"), column("<i8")
    partitions = column("<i4")
    lengths = [column("<i4") for _ in range(4)]  # keys, tags, message IDs, values
    header_lengths = column("<i4") if with_headers else None
    if header_lengths is not None:
        lengths.append(header_lengths)
        if count and (header_lengths < 0).any():
            raise MalformedAnswer("header lengths in a read answer must be >= 0")
    if count:
        if (offsets < 0).any() or (timestamps < 0).any() or (store_timestamps < 0).any():
            raise MalformedAnswer("offsets and timestamps in a read answer must be >= 0")
        if (partitions < 0).any():
            raise MalformedAnswer("partitions in a read answer must be >= 0")
        if any((lens < ABSENT).any() for lens in lengths) or (lengths[3] < 0).any():
            raise MalformedAnswer("field lengths must be >= 0 (or -1 = absent; values >= 0)")
    blobs = []
    for lens in lengths:
        blob_size = int(lens.sum(dtype=np.int64, where=lens > 0)) if count else 0
        if pos + blob_size + meta_len > size:
            raise MalformedAnswer("read answer truncated inside its data blobs")
        blobs.append(view[pos : pos + blob_size])
        pos += blob_size
    if pos + meta_len != size:
        raise MalformedAnswer(f"{size - pos - meta_len} unexpected bytes in the read answer")
    meta: Any = {}
    if meta_len:
        try:
            meta = json.loads(bytes(view[pos:]))
        except (ValueError, UnicodeDecodeError):
            raise MalformedAnswer("read answer metadata is not valid JSON") from None
        if not isinstance(meta, dict):
            raise MalformedAnswer("read answer metadata must be a JSON object")
    for blob, lens, what in zip(blobs, lengths, ("key", "tag", "message ID"), strict=False):
        _check_utf8(blob, lens, what)
    return ReadColumns(
        next_offset=None if next_offset < 0 else next_offset,
        flags=flags,
        meta=meta,
        partitions=partitions,
        offsets=offsets,
        timestamps=timestamps,
        store_timestamps=store_timestamps,
        key_lengths=lengths[0],
        tag_lengths=lengths[1],
        msg_id_lengths=lengths[2],
        value_lengths=lengths[3],
        keys=blobs[0],
        tags=blobs[1],
        msg_ids=blobs[2],
        values=blobs[3],
        header_lengths=header_lengths,
        headers=blobs[4] if with_headers else None,
    )
