"""A batch as packed columns: one blob plus one length array per field.

This is the engine's own batch shape. The binary wire format (docs/BATCH_FORMAT.md) and
Arrow buffers map onto it without a Python object per message, and the append path encodes
it with whole-array operations. ``-1`` in a length, timestamp or partition array means
"not given" for that message, exactly as on the wire.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_not
from typing import Any, cast

import numpy as np

from storage_node.errors import InvalidBatch
from storage_node.formats.headers import encode_headers
from storage_node.formats.keyhash import key_hashes

NONE = -1
# values averaging this much stay the caller's own objects (written with a gathering write)
GATHER_MIN_VALUE_BYTES = 1024


def filled(n: int, value: int) -> np.ndarray:
    """``np.full(n, value)`` of int64 in two C calls (``np.full`` itself runs Python code,
    which on the append path of small batches costs as much as the arithmetic)."""
    out = np.empty(n, dtype=np.int64)
    out.fill(value)
    return out


class PackedColumn:
    """Byte strings back to back in ``blob``; ``lens[i]`` is the i-th one's length, -1 = absent.

    Large values may stay as the caller's own ``parts`` (one bytes object per present entry):
    the log then writes them with a gathering write and the blob is joined only if asked for.
    ``lens`` is not changed once the column is made: its range is remembered, so checking
    a column that is entirely absent (tags, IDs in most batches) costs no array call.
    """

    __slots__ = ("_blob", "lens", "parts", "_range")

    def __init__(
        self,
        blob: bytes | bytearray | memoryview | None,
        lens: np.ndarray,
        parts: list[bytes] | None = None,
        length_range: tuple[int, int] | None = None,
    ) -> None:
        self._blob = blob
        self.lens = lens
        self.parts = parts
        self._range = length_range

    @property
    def blob(self) -> bytes | bytearray | memoryview:
        if self._blob is None:
            self._blob = b"".join(self.parts or ())
        return self._blob

    @property
    def nbytes(self) -> int:
        """Bytes of all entries (without joining parts)."""
        if self._blob is None:
            return int(self.sizes.sum())
        return len(self._blob)

    @property
    def sizes(self) -> np.ndarray:
        """Lengths with absent entries counted as 0 bytes."""
        return np.maximum(self.lens, 0)

    def ends(self) -> np.ndarray:
        """End offset of each entry in ``blob``."""
        return np.cumsum(self.sizes, dtype=np.int64)

    def length_range(self) -> tuple[int, int]:
        """(shortest, longest) entry length, -1 for absent; (0, -1) for no entries."""
        if self._range is None:
            lens = self.lens
            if len(lens):
                self._range = (int(np.minimum.reduce(lens)), int(np.maximum.reduce(lens)))
            else:
                self._range = (0, -1)
        return self._range

    def absent(self) -> bool:
        """No entry present (an empty column too)."""
        return self.length_range()[1] < 0

    def get(self, i: int) -> bytes | None:
        """One entry (for error messages and rare per-message paths)."""
        if self.lens[i] < 0:
            return None
        end = int(self.ends()[i])
        return bytes(self.blob[end - int(self.lens[i]) : end])

    def to_list(self) -> list[bytes | None]:
        ends = self.ends().tolist()
        starts = [0, *ends[:-1]][: len(ends)]
        blob = bytes(self.blob)
        return [
            blob[s:e] if p else None
            for s, e, p in zip(starts, ends, (self.lens >= 0).tolist(), strict=True)
        ]

    @classmethod
    def of_bytes(cls, items: Sequence[bytes | None], keep_parts: bool = False) -> PackedColumn:
        """Pack a list of bytes (None = absent) with C-level calls only; ``keep_parts``
        (every entry present) keeps the objects instead of copying them into one blob."""
        n = len(items)
        if items.count(None) == 0:
            whole = cast(Sequence[bytes], items)  # no None: counted in C, not narrowed
            lens = np.fromiter(map(len, whole), np.int64, n)
            if keep_parts:
                return cls(None, lens, list(whole))
            return cls(b"".join(whole), lens)
        present = np.fromiter(map(is_not, items, repeat(None)), dtype=bool, count=n)
        lens = filled(n, NONE)
        kept = [x for x in items if x is not None]
        lens[present] = np.fromiter(map(len, kept), np.int64, len(kept))
        return cls(b"".join(kept), lens)

    @classmethod
    def of_text(cls, items: Sequence[str | None], what: str) -> PackedColumn:
        """Pack strings as UTF-8; a non-string is a typed error naming the message."""
        n = len(items)
        try:  # the usual case, every entry a string: two passes in C
            text = "".join(items)  # type: ignore[arg-type]  # None or a non-string: TypeError
        except TypeError:
            pass
        else:
            if text.isascii():
                strings = cast(Sequence[str], items)  # the join proved every entry a string
                return cls(text.encode(), np.fromiter(map(len, strings), np.int64, n))
        missing = items.count(None)
        if set(map(type, items)) - {type(None)} - {str}:
            i = next(i for i, s in enumerate(items) if s is not None and type(s) is not str)
            raise InvalidBatch(f"message {i}: {what} must be a string", index=i)
        if missing == n:
            return cls.empty(n)
        # strings or None only (checked above): without a None, the items themselves
        kept = cast(Sequence[str], items) if missing == 0 else [s for s in items if s is not None]
        text = "".join(kept)
        try:
            blob = text.encode()
        except UnicodeEncodeError:
            i = next(i for i, s in enumerate(items) if s is not None and not _encodes(s))
            raise InvalidBatch(f"message {i}: {what} is not valid Unicode", index=i) from None
        if len(blob) == len(text):  # ASCII: character counts are byte counts
            lens_kept = np.fromiter(map(len, kept), np.int64, len(kept))
        else:
            lens_kept = np.fromiter(map(len, map(str.encode, kept)), np.int64, len(kept))
        if missing == 0:
            return cls(blob, lens_kept)
        lens = filled(n, NONE)
        lens[np.fromiter(map(is_not, items, repeat(None)), dtype=bool, count=n)] = lens_kept
        return cls(blob, lens)

    @classmethod
    def empty(cls, n: int) -> PackedColumn:
        return cls(b"", filled(n, NONE), length_range=(NONE, NONE) if n else None)


def headers_column(items: Sequence[Sequence[tuple[str, bytes | None]]]) -> PackedColumn | None:
    """Each message's headers packed (``formats/headers.py``); None when none has any."""
    if not any(items):
        return None
    return PackedColumn.of_bytes([encode_headers(h) if h else None for h in items])


def concat_columns(columns: Sequence[PackedColumn]) -> PackedColumn:
    """Several columns back to back (batches written together)."""
    if len(columns) == 1:
        return columns[0]
    if all(c._range == (NONE, NONE) for c in columns):  # absent in every batch
        return PackedColumn.empty(sum(len(c.lens) for c in columns))
    lens = np.concatenate([c.lens for c in columns])
    ranges = [c._range for c in columns if len(c.lens)]
    known_ranges = [r for r in ranges if r is not None]
    known = None
    if ranges and len(known_ranges) == len(ranges):  # the joined range follows from the parts'
        known = (min(r[0] for r in known_ranges), max(r[1] for r in known_ranges))
    parts = [c.parts for c in columns if c.parts is not None]
    if len(parts) == len(columns):
        return PackedColumn(None, lens, [x for p in parts for x in p], known)
    return PackedColumn(b"".join(c.blob for c in columns), lens, length_range=known)


def _checked_values(values: Sequence[bytes]) -> list[bytes]:
    """Values as bytes objects; anything not bytes-like is a typed error naming it."""
    out = list(values)
    if set(map(type, out)) != {bytes}:
        for i, v in enumerate(out):
            if type(v) is not bytes:
                if not isinstance(v, bytes | bytearray | memoryview):
                    raise InvalidBatch(f"message {i}: value must be bytes", index=i)
                out[i] = bytes(v)
    return out


def _encodes(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _int_column(items: Sequence[int | None] | None, n: int, what: str) -> np.ndarray | None:
    if items is None or items.count(None) == n:
        return None
    out = filled(n, NONE)
    for i, v in enumerate(items):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v >= 2**63:
            raise InvalidBatch(f"message {i}: {what} must be a non-negative integer", index=i)
        out[i] = v
    return out


@dataclass
class PackedBatch:
    """One batch of messages as columns (see the module docstring)."""

    values: PackedColumn
    keys: PackedColumn
    tags: PackedColumn
    msg_ids: PackedColumn
    timestamps: np.ndarray | None = None  # int64 born ms, -1 = store time; None = all
    partitions: np.ndarray | None = None  # int64, -1 = chosen by the node; None = all
    # each message's headers (formats/headers.py's byte string, -1 or 0 bytes = none);
    # None = no message has any
    headers: PackedColumn | None = None
    _hashes: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.values.lens)

    def key_hashes(self) -> np.ndarray:
        """``key_hash`` of every key (0 where none), computed once per batch: the node
        picks partitions with it and the store indexes with it."""
        if self._hashes is None:
            keys = self.keys
            self._hashes = key_hashes(keys.blob, keys.lens, keys.length_range())
        return self._hashes

    @classmethod
    def from_lists(
        cls,
        values: Sequence[bytes],
        keys: Sequence[str | None] | None = None,
        tags: Sequence[str | None] | None = None,
        msg_ids: Sequence[str | None] | None = None,
        timestamps: Sequence[int | None] | None = None,
        partitions: Sequence[int | None] | None = None,
    ) -> PackedBatch:
        """Pack parallel lists (None = not given for all); typed errors for wrong types."""
        check_list_shapes(values, (keys, tags, msg_ids, timestamps, partitions))
        n = len(values)
        try:
            lens = np.fromiter(map(len, values), np.int64, n)
        except TypeError:
            values = _checked_values(values)
            lens = np.fromiter(map(len, values), np.int64, n)
        if int(np.add.reduce(lens)) < GATHER_MIN_VALUE_BYTES * n:
            try:  # the usual case: one join, which also rejects what is not bytes-like
                values_col = PackedColumn(b"".join(values), lens)
            except TypeError:
                values_col = PackedColumn.of_bytes(_checked_values(values))
        else:  # large values stay the caller's objects (one gathering write, no copy)
            parts = list(values)
            if set(map(type, parts)) != {bytes}:  # bytes-like values become bytes
                parts = _checked_values(parts)
                lens = np.fromiter(map(len, parts), np.int64, n)
            values_col = PackedColumn(None, lens, parts)
        absent = PackedColumn.empty(n)  # one column serves every field not given
        return cls(
            values=values_col,
            keys=absent if keys is None else PackedColumn.of_text(keys, "key"),
            tags=absent if tags is None else PackedColumn.of_text(tags, "tag"),
            msg_ids=absent if msg_ids is None else PackedColumn.of_text(msg_ids, "message ID"),
            timestamps=_int_column(timestamps, n, "timestamp"),
            partitions=_int_column(partitions, n, "partition"),
        )


LIST_COLUMNS = ("keys", "tags", "msg_ids", "timestamps", "partitions")
# The optional columns of ``from_lists`` in LIST_COLUMNS order, None = not given.
ListColumns = tuple[
    Sequence[str | None] | None,
    Sequence[str | None] | None,
    Sequence[str | None] | None,
    Sequence[int | None] | None,
    Sequence[int | None] | None,
]


def check_list_shapes(values: object, columns: Sequence[object]) -> None:
    """Values a list, every given column (in LIST_COLUMNS order) a list as long as it."""
    if not isinstance(values, list | tuple):
        raise InvalidBatch("values must be a list of bytes")
    n = len(values)
    for name, column in zip(LIST_COLUMNS, columns, strict=True):
        if column is not None and (not isinstance(column, list | tuple) or len(column) != n):
            raise InvalidBatch(f"{name} must be a list as long as values ({n})")


@dataclass
class ListBatch:
    """A batch still as the caller's parallel lists (shapes checked, contents not yet).

    Concurrent producers' batches are packed together, with one ``from_lists`` for the
    whole group (``pack_batches``), by the thread that writes them: each producer then does
    almost nothing between its wake-up and its next sleep, and the group pays the per-call
    cost of packing once (eight producers in ``sync`` mode: +13% in interleaved runs)."""

    values: Sequence[bytes]
    columns: ListColumns  # None = not given

    def __len__(self) -> int:
        return len(self.values)

    def pack(self) -> PackedBatch:
        return PackedBatch.from_lists(self.values, *self.columns)


def pack_batches(batches: Sequence[PackedBatch | ListBatch]) -> PackedBatch:
    """Several batches back to back as one packed batch: lists are joined and packed once,
    packed batches are concatenated. A content error names an index of the joined batch:
    the caller packs the batches one by one to find whose it is."""
    if len(batches) == 1:
        only = batches[0]
        return only.pack() if isinstance(only, ListBatch) else only
    lists = [b for b in batches if isinstance(b, ListBatch)]
    if len(lists) != len(batches):
        return merge_batches([b.pack() if isinstance(b, ListBatch) else b for b in batches])
    values: list[bytes] = []
    for b in lists:
        values.extend(b.values)

    def column(i: int) -> list[Any] | None:  # contents are checked by from_lists
        given = [b.columns[i] for b in lists]
        if all(c is None for c in given):
            return None
        joined: list[Any] = []
        for b, c in zip(lists, given, strict=True):
            joined.extend([None] * len(b) if c is None else c)
        return joined

    return PackedBatch.from_lists(values, column(0), column(1), column(2), column(3), column(4))


def merge_batches(batches: Sequence[PackedBatch]) -> PackedBatch:
    """Several batches back to back, checked and written as one."""
    if len(batches) == 1:
        return batches[0]

    def joined(arrays: list[np.ndarray | None]) -> np.ndarray | None:
        if all(a is None for a in arrays):
            return None
        return np.concatenate(
            [filled(len(b), NONE) if a is None else a for b, a in zip(batches, arrays, strict=True)]
        )

    headers = None
    if any(b.headers is not None for b in batches):
        headers = concat_columns(
            [PackedColumn.empty(len(b)) if b.headers is None else b.headers for b in batches]
        )
    tags = concat_columns([b.tags for b in batches])
    shared = all(b.msg_ids is b.tags for b in batches)  # one absent column (from_lists)
    return PackedBatch(
        values=concat_columns([b.values for b in batches]),
        keys=concat_columns([b.keys for b in batches]),
        tags=tags,
        msg_ids=tags if shared else concat_columns([b.msg_ids for b in batches]),
        timestamps=joined([b.timestamps for b in batches]),
        partitions=joined([b.partitions for b in batches]),
        headers=headers,
        _hashes=(
            np.concatenate([b._hashes for b in batches])
            if all(b._hashes is not None for b in batches)
            else None
        ),
    )
