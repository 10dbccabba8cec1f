"""Columnar reads: a range of a partition decoded as arrays, one frame at a time.

``Store.read_columns`` takes the queue-index entries of the range as one numpy array, and
this module turns the rows they name into packed columns (the shape the append path and
the binary read answer use):

1. ``fetch_frames`` walks the rows' log positions in order and fetches each frame once: a
   run of consecutive frames of an unsealed segment comes with one positional read, a
   compacted or uploaded segment yields one decompressed LZ4 block (one ranged read for an
   uploaded file), not yet written bytes come from the write cache. Every frame's CRC is
   checked before anything in it is used.
2. ``decode_rows`` copies the frames into one buffer, gathers the 48-byte rows of the
   wanted records with one fancy index, checks them against the queue index (frame, topic,
   partition, offset, field bounds) with array comparisons, applies an exact tag filter,
   and gathers the four byte columns (keys, tags, message IDs, values): one slice per run
   of adjacent fields (a frame of one partition is one run), else one numpy gather.

Nothing is done per message in Python. A frame that fails its checks raises CorruptData
naming the partition offsets it holds; rows before it are still returned when the read's
limits stop before it (as the record-at-a-time definition would).

Over 400 lines on purpose: fetching, checking and gathering are one pipeline over the same
arrays; the pieces are only ever used together.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import repeat

import numpy as np
from crc32c import crc32c

from storage_node.errors import CorruptData
from storage_node.formats.packed import PackedColumn, concat_columns
from storage_node.formats.record import (
    FRAME,
    FRAME_SIZE,
    MAGIC,
    ROW,
    ROW_DTYPE,
    ROW_KEY,
    ROW_TAG,
    frame_offset_of_row,
)
from storage_node.store.commitlog import CommitLog
from storage_node.store.types import Message

SPAN_ROWS = 2048  # a positional read reaches this many rows ahead (up to SPAN_MAX bytes)
GATHER_PAD = 4096  # spare bytes after the frames: fields up to this long gather by windows
_PAD = bytes(GATHER_PAD)


@dataclass
class ReadBatch:
    """Messages of one partition as columns, in offset order.

    ``offsets``, ``timestamps`` (born ms) and ``store_timestamps`` are int64 arrays; the
    four byte columns are PackedColumns (``lens`` int64, -1 = absent key or tag; message
    IDs and values are always present). ``next_offset`` is where the next read continues.
    """

    topic: str
    partition: int
    offsets: np.ndarray
    timestamps: np.ndarray
    store_timestamps: np.ndarray
    keys: PackedColumn
    tags: PackedColumn
    msg_ids: PackedColumn
    values: PackedColumn
    next_offset: int

    def __len__(self) -> int:
        return len(self.offsets)

    @classmethod
    def empty(cls, topic: str, partition: int, next_offset: int) -> ReadBatch:
        none = np.zeros(0, dtype=np.int64)
        col = PackedColumn(b"", none)
        return cls(topic, partition, none, none, none, col, col, col, col, next_offset)

    @property
    def value_bytes(self) -> int:
        return len(self.values.blob)

    def head(self, k: int) -> ReadBatch:
        """The first ``k`` messages."""
        if k >= len(self):
            return self
        return ReadBatch(
            self.topic,
            self.partition,
            self.offsets[:k],
            self.timestamps[:k],
            self.store_timestamps[:k],
            _head(self.keys, k),
            _head(self.tags, k),
            _head(self.msg_ids, k),
            _head(self.values, k),
            self.next_offset,
        )

    def messages(self) -> list[Message]:
        """The engine's ``Message`` objects (for JSON answers and record-shaped callers)."""
        n = len(self)
        if not n:
            return []
        return list(
            map(
                Message,
                repeat(self.topic, n),
                repeat(self.partition, n),
                self.offsets.tolist(),
                _texts(self.keys),
                _texts(self.tags),
                _texts(self.msg_ids),
                self.timestamps.tolist(),
                self.store_timestamps.tolist(),
                self.values.to_list(),
            )
        )


def concat_batches(parts: list[ReadBatch], next_offset: int) -> ReadBatch:
    first = parts[0]
    if len(parts) == 1:
        first.next_offset = next_offset
        return first
    return ReadBatch(
        first.topic,
        first.partition,
        np.concatenate([p.offsets for p in parts]),
        np.concatenate([p.timestamps for p in parts]),
        np.concatenate([p.store_timestamps for p in parts]),
        concat_columns([p.keys for p in parts]),
        concat_columns([p.tags for p in parts]),
        concat_columns([p.msg_ids for p in parts]),
        concat_columns([p.values for p in parts]),
        next_offset,
    )


def _head(col: PackedColumn, k: int) -> PackedColumn:
    lens = col.lens[:k]
    size = int(np.maximum(lens, 0).sum()) if k else 0
    return PackedColumn(memoryview(col.blob)[:size], lens)


def _texts(col: PackedColumn) -> list[str | None]:
    """A text column as str objects (None = absent), one decode for an ASCII blob."""
    lens = col.lens
    n = len(lens)
    if col.absent():
        return [None] * n
    blob = bytes(col.blob)
    if not blob.isascii():
        return [None if b is None else b.decode() for b in col.to_list()]
    text = blob.decode("ascii")
    sizes = np.maximum(lens, 0)
    ends = np.cumsum(sizes).tolist()
    starts = (np.cumsum(sizes) - sizes).tolist()
    if col.length_range()[0] >= 0:
        return [text[s:e] for s, e in zip(starts, ends, strict=True)]
    present = (lens >= 0).tolist()
    return [text[s:e] if p else None for s, e, p in zip(starts, ends, present, strict=True)]


def gather(arr: np.ndarray, joined: bytes, starts: np.ndarray, lens: np.ndarray) -> bytes:
    """The byte ranges ``[starts[i], starts[i] + lens[i])`` of ``joined``, back to back."""
    n = len(lens)
    if not n:
        return b""
    total = int(lens.sum())
    if total == 0:
        return b""
    ends = starts + lens
    brk = np.empty(n, dtype=bool)
    brk[0] = True
    np.not_equal(starts[1:], ends[:-1], out=brk[1:])
    heads = np.flatnonzero(brk)
    if len(heads) == 1:
        return joined[int(starts[0]) : int(ends[-1])]
    if len(heads) * 8 <= n:  # long runs of adjacent fields: one slice per run
        tails = np.empty(len(heads), dtype=np.int64)
        tails[:-1] = heads[1:] - 1
        tails[-1] = n - 1
        view = memoryview(joined)
        return b"".join(
            [view[a:b] for a, b in zip(starts[heads].tolist(), ends[tails].tolist(), strict=True)]
        )
    widest = int(lens.max())
    if widest <= GATHER_PAD and widest * n <= 2 * total + 64 * n:
        # fields of similar lengths: copy a fixed-width window per field (a row copy, not a
        # byte index), then drop each window's tail; ``arr`` ends in GATHER_PAD spare bytes
        windows = np.lib.stride_tricks.sliding_window_view(arr, widest)[starts]
        if int(lens.min()) == widest:
            return windows.tobytes()
        return windows[np.arange(widest) < lens[:, None]].tobytes()
    before = np.cumsum(lens) - lens
    index = np.repeat(starts - before, lens)
    index += np.arange(total, dtype=np.int64)
    return arr[index].tobytes()


@dataclass
class Frames:
    """Checked frames holding a run of rows, and which frame holds each row."""

    frames: list[memoryview]
    starts: list[int]  # log position of each frame
    counts: list[int]  # rows in each frame
    store_ms: list[int]
    topic_ok: list[bool]
    fid: np.ndarray  # frame number of each row (valid for the first ``ok`` rows)
    ok: int  # rows whose frame was fetched and checked
    error: CorruptData | None  # why row ``ok`` could not be (None: every row was)


def fetch_frames(
    log: CommitLog, topic: bytes, partition: int, offsets: np.ndarray, positions: np.ndarray
) -> Frames:
    """Fetch and check, once each, the frames holding the rows at ``positions``."""
    n = len(positions)
    out = Frames([], [], [], [], [], np.empty(n, dtype=np.intp), n, None)
    pos_list = positions.tolist()
    monotone = n < 2 or bool((positions[1:] > positions[:-1]).all())
    buf: bytes | memoryview = b""
    view = memoryview(buf)
    lo = hi = 0
    where = ""
    i = 0
    bounds = [0]  # rows [bounds[f], bounds[f + 1]) are in frame f
    frames, starts, counts, stamps, topic_ok = (
        out.frames,
        out.starts,
        out.counts,
        out.store_ms,
        out.topic_ok,
    )
    unpack = FRAME.unpack_from
    hit = log.cached_frame(pos_list[0]) if n else None
    while i < n:
        p = pos_list[i]
        if hit is not None:
            start, frame = hit
            hit = None
            _s, _c, _m, _f, count, tlen, _pl, _r, store_ms, _seq = unpack(frame)
        else:
            try:
                if not lo <= p <= hi - 2:
                    buf, lo, where = log.span(p, max(p, pos_list[min(n - 1, i + SPAN_ROWS)]))
                    view, hi = memoryview(buf), lo + len(buf)
                # the row's index says where its frame starts (frame_offset_of_row, inlined:
                # this loop runs once per frame of a scan)
                rel_p = p - lo
                foff = rel_p - FRAME_SIZE - ROW * int.from_bytes(view[rel_p : rel_p + 2], "little")
                fits = 0 <= foff and foff + FRAME_SIZE <= hi - lo
                if fits:
                    head = unpack(view, foff)
                if not fits or foff + head[0] > hi - lo:
                    # the frame does not lie whole in this buffer: a new read from its start
                    buf, lo, where = log.span(p, max(p, pos_list[min(n - 1, i + SPAN_ROWS)]))
                    view, hi = memoryview(buf), lo + len(buf)
                    foff = frame_offset_of_row(buf, p - lo)
                    if foff < 0 or foff + FRAME_SIZE > len(buf):
                        raise CorruptData(f"truncated record frame at log position {p} ({where})")
                    head = unpack(buf, foff)
                size, crc, magic, _f, count, tlen, plen, _r, store_ms, _seq = head
                if (
                    magic != MAGIC
                    or count == 0
                    or foff + size > len(buf)
                    or size < FRAME_SIZE + ROW * count + tlen + plen
                    or crc32c(view[foff + 8 : foff + size]) != crc
                ):
                    raise CorruptData(
                        f"record frame checksum or header mismatch at log position {p} ({where})"
                    )
            except CorruptData as exc:
                out.ok = i
                out.error = _corrupt_frame(exc, topic, partition, offsets, positions, i, buf, lo)
                break
            frame = view[foff : foff + size]
            start = lo + foff
        end = start + len(frame)
        if not start <= p < end:
            out.ok = i
            out.error = _disagrees(topic, partition, int(offsets[i]))
            break
        if monotone:
            j = bisect_left(pos_list, end, i + 1)
        else:
            j = i + 1
            while j < n and start <= pos_list[j] < end:
                j += 1
        lead = FRAME_SIZE + ROW * count
        bounds.append(j)
        frames.append(frame)
        starts.append(start)
        counts.append(count)
        stamps.append(store_ms)
        topic_ok.append(frame[lead : lead + tlen] == topic)
        i = j
    if frames:
        out.fid = np.repeat(np.arange(len(frames), dtype=np.intp), np.diff(bounds))
    return _finish(log, out)


def _finish(log: CommitLog, out: Frames) -> Frames:
    if out.frames:
        log.keep_frame(out.starts[-1], out.frames[-1])
    return out


def _disagrees(topic: bytes, partition: int, offset: int) -> CorruptData:
    return CorruptData(
        f"queue index of {topic.decode()}/{partition} disagrees with the log at offset {offset}",
        offset=offset,
    )


def _corrupt_frame(
    exc: CorruptData,
    topic: bytes,
    partition: int,
    offsets: np.ndarray,
    positions: np.ndarray,
    i: int,
    buf: bytes | memoryview,
    lo: int,
) -> CorruptData:
    """A frame that failed its checks, reported with the partition offsets it holds (as far
    as its unchecked length says; at least the offset that was asked for)."""
    first = last = int(offsets[i])
    p = int(positions[i])
    try:
        foff = frame_offset_of_row(buf, p - lo)
        size = int.from_bytes(buf[foff : foff + 4], "little") if 0 <= foff < len(buf) else 0
        end = lo + foff + size
        inside = np.flatnonzero((positions[i:] >= p) & (positions[i:] < end))
        if len(inside):
            last = max(last, int(offsets[i + int(inside[-1])]))
    except (IndexError, ValueError):
        pass
    span = f"offset {first}" if first == last else f"offsets {first}..{last}"
    return CorruptData(
        f"{exc.message}: it holds {topic.decode()}/{partition} {span} (not served)",
        offset=first,
        first_offset=first,
        last_offset=last,
    )


@dataclass
class Decoded:
    batch: ReadBatch  # the rows that passed the tag filter
    scanned_sizes: np.ndarray  # entry sizes of the rows decoded (for the byte estimate)
    ok: int  # rows decoded
    error: CorruptData | None  # why row ``ok`` could not be


def decode_rows(
    log: CommitLog,
    topic: str,
    partition: int,
    offsets: np.ndarray,
    positions: np.ndarray,
    sizes: np.ndarray,
    tag: bytes | None = None,
) -> Decoded:
    """Decode the records at ``positions`` (which the queue index gives for ``offsets`` of
    ``topic``/``partition``) as columns, keeping those whose tag is exactly ``tag`` (all when
    None). Stops at the first row that cannot be served, and says why."""
    topic_b = topic.encode()
    n = len(positions)
    limit = n
    error: CorruptData | None = None
    lost = np.flatnonzero(sizes == 0)
    if len(lost):
        limit = int(lost[0])
        off = int(offsets[limit])
        error = CorruptData(f"{topic}/{partition} offset {off} was lost to corruption", offset=off)
    fr = fetch_frames(log, topic_b, partition, offsets[:limit], positions[:limit])
    if fr.error is not None:
        error = fr.error
    k = fr.ok
    if k == 0:
        return Decoded(ReadBatch.empty(topic, partition, 0), sizes[:0], 0, error)
    joined = b"".join([*fr.frames, _PAD])
    arr = np.frombuffer(joined, dtype=np.uint8)
    flen = np.fromiter(map(len, fr.frames), dtype=np.int64, count=len(fr.frames))
    base = np.cumsum(flen) - flen
    fid = fr.fid[:k]
    rel = positions[:k] - np.asarray(fr.starts, dtype=np.int64)[fid]
    at = base[fid] + rel
    inside = (rel >= FRAME_SIZE) & (rel + ROW <= flen[fid])
    if not inside.all():  # a row outside its frame: nothing past it is gathered
        bad = int(np.argmin(inside))
        return _cut(log, topic, partition, offsets, positions, sizes, tag, bad, error, True)
    rows = np.lib.stride_tricks.sliding_window_view(arr, ROW)[at].view(ROW_DTYPE).reshape(k)
    index = rows["index"].astype(np.int64)
    fl = flen[fid]
    klen = rows["klen"].astype(np.int64)
    tlen = rows["taglen"].astype(np.int64)
    ilen = rows["idlen"].astype(np.int64)
    vlen = rows["vlen"].astype(np.int64)
    koff = rows["koff"].astype(np.int64)
    toff = rows["toff"].astype(np.int64)
    ioff = rows["ioff"].astype(np.int64)
    voff = rows["voff"].astype(np.int64)
    bad = (
        (rel != FRAME_SIZE + ROW * index)
        | (index >= np.asarray(fr.counts, dtype=np.int64)[fid])
        | ~np.asarray(fr.topic_ok, dtype=bool)[fid]
        | (rows["partition"] != partition)
        | (rows["qoff"] != offsets[:k].astype(np.uint64))
        | (koff + klen > fl)
        | (toff + tlen > fl)
        | (ioff + ilen > fl)
        | (voff + vlen > fl)
    )
    if bad.any():
        first_bad = int(np.argmax(bad))
        return _cut(log, topic, partition, offsets, positions, sizes, tag, first_bad, error, True)
    flags = rows["flags"]
    has_tag = (flags & ROW_TAG) != 0
    base_row = base[fid]
    if tag is not None:  # exact tag comparison on the arrays (the hash matched already)
        want = np.frombuffer(tag, dtype=np.uint8)
        keep = has_tag & (tlen == len(tag))
        cand = np.flatnonzero(keep)
        if len(cand) and len(tag):
            starts = (base_row + toff)[cand]
            same = (arr[starts[:, None] + np.arange(len(tag))] == want).all(axis=1)
            keep[cand] = same
        sel = np.flatnonzero(keep)
        rows, fid, base_row, flags, has_tag = (
            rows[sel],
            fid[sel],
            base_row[sel],
            flags[sel],
            has_tag[sel],
        )
        klen, tlen, ilen, vlen = klen[sel], tlen[sel], ilen[sel], vlen[sel]
        koff, toff, ioff, voff = koff[sel], toff[sel], ioff[sel], voff[sel]
    has_key = (flags & ROW_KEY) != 0
    batch = ReadBatch(
        topic,
        partition,
        rows["qoff"].astype(np.int64),
        rows["born"].astype(np.int64),
        np.asarray(fr.store_ms, dtype=np.int64)[fid],
        PackedColumn(gather(arr, joined, base_row + koff, klen), np.where(has_key, klen, -1)),
        PackedColumn(gather(arr, joined, base_row + toff, tlen), np.where(has_tag, tlen, -1)),
        PackedColumn(gather(arr, joined, base_row + ioff, ilen), ilen),
        PackedColumn(gather(arr, joined, base_row + voff, vlen), vlen),
        0,
    )
    return Decoded(batch, sizes[:k], k, error)


def _cut(
    log: CommitLog,
    topic: str,
    partition: int,
    offsets: np.ndarray,
    positions: np.ndarray,
    sizes: np.ndarray,
    tag: bytes | None,
    bad: int,
    error: CorruptData | None,
    disagrees: bool,
) -> Decoded:
    """Decode the rows before ``bad`` (which disagrees with the index) and report it."""
    if disagrees:
        error = _disagrees(topic.encode(), partition, int(offsets[bad]))
    if bad == 0:
        return Decoded(ReadBatch.empty(topic, partition, 0), sizes[:0], 0, error)
    head = decode_rows(log, topic, partition, offsets[:bad], positions[:bad], sizes[:bad], tag)
    head.error = error
    return head
