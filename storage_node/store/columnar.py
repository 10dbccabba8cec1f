"""Columnar reads: a range of a partition decoded as arrays, a span of log bytes at a time.

``Store.read_columns`` takes the queue-index entries of the range as one numpy array, and
this module turns the rows they name into packed columns (the shape the append path and
the binary read answer use):

1. ``fetch_chunks`` fetches the log bytes holding the rows a span at a time (a run of
   consecutive frames of an unsealed segment with one positional read, one decompressed LZ4
   block of a compacted or uploaded segment, not yet written bytes from the write cache),
   finds every row's frame from the row's own index (``read_kernel.frame_rows``), reads
   the frame headers as one array and checks each frame (header, CRC) once before anything
   in it is used.
2. ``decode_rows`` checks each span's rows against the queue index (frame, topic,
   partition, offset, field bounds), applies an exact tag filter and gathers the columns
   (keys, tags, message IDs, values, headers) in one compiled pass over the rows
   (``read_kernel.gather_rows``), where numpy made a few dozen array passes with their
   temporaries.

Nothing is done per message in Python, and per frame only its CRC. A ``SpanMemo`` keeps
the spans of one request with the frames already checked in them: the steps of one read
and the partitions of one fetch (``Reads.fetch_columns``) fetch and check a frame once,
though it holds rows of every partition of the topic. A frame that fails its checks raises
CorruptData naming the partition offsets it holds; rows before it are still returned when
the read's limits stop before it (as the record-at-a-time definition would).

Fetching, checking and gathering are one pipeline over the same arrays; the pieces are only
ever used together.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from crc32c import crc32c

from storage_node.errors import CorruptData
from storage_node.formats.packed import PackedColumn
from storage_node.formats.read_kernel import frame_rows, gather_rows
from storage_node.formats.record import (
    FRAME_DTYPE,
    FRAME_SIZE,
    MAGIC,
    ROW,
    frame_offset_of_row,
)
from storage_node.store.commitlog import CommitLog
from storage_node.store.read_batch import ReadBatch

SPAN_ROWS = 16_384  # a positional read reaches this many rows ahead (up to SCAN_SPAN_MAX bytes)
MEMO_BYTES = 64 << 20  # log bytes one request keeps for its later steps and partitions


def among(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in ``pool`` (sorted, no repeats): one binary search each,
    where ``np.isin`` sorts both arrays together again."""
    if not len(pool):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(pool, values), len(pool) - 1)
    return pool[at] == values


def at_every_byte(arr: np.ndarray, width: int) -> np.ndarray:
    """``arr`` (uint8) seen as one opaque ``width``-byte item starting at each of its bytes,
    without a copy: indexing it with byte positions copies whole items with one memcpy each
    (2-5 times as fast as a fancy index over a 2-D ``sliding_window_view``, or over a
    structured dtype, which copies field by field); view the result as the dtype wanted."""
    return np.ndarray(
        buffer=arr, dtype=f"V{width}", shape=(max(0, len(arr) - width + 1),), strides=(1,)
    )


@dataclass
class Span:
    """A buffer of log bytes (from ``CommitLog.span``, or one frame the log kept) and the
    starts (relative, sorted) of the frames in it that passed their checks."""

    lo: int  # log position of the buffer's first byte
    data: bytes | memoryview
    arr: np.ndarray
    where: str
    checked: np.ndarray

    @classmethod
    def of(cls, lo: int, data: bytes | memoryview, where: str, checked: bool = False) -> Span:
        done = np.zeros(1 if checked else 0, dtype=np.int64)
        return cls(lo, data, np.frombuffer(data, dtype=np.uint8), where, done)


class SpanMemo:
    """The log buffers one request fetched, with the frames already checked in them: the
    steps of one read and the partitions of one fetch share them, so a frame holding rows of
    several partitions is fetched and CRC-checked once per request. At most MEMO_BYTES of
    buffers are kept (the least recently used go first).

    A memo may also be kept from one request to the next (a Kafka connection's Fetches,
    kafka/fetch.py): a consumer's partitions move through the log at different places, and
    each page of one of them spans frames holding the others' rows, so consecutive Fetches
    ask for much of the same log bytes again. It is tied to one log and the number of times
    that log was cut (``CommitLog.cuts``): a cut log may hold other bytes at the same
    positions, so a memo of a log cut since is emptied before use (``bind``)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.size = 0
        self.log: CommitLog | None = None
        self.cuts = 0

    def bind(self, log: CommitLog) -> None:
        """Use this memo for ``log`` (emptied if it held another log's bytes, or this log's
        from before a cut)."""
        if self.log is not log or self.cuts != log.cuts:
            self.spans, self.size = [], 0
            self.log, self.cuts = log, log.cuts

    def find(self, pos: int) -> Span | None:
        spans = self.spans
        for i in range(len(spans) - 1, -1, -1):
            span = spans[i]
            if span.lo <= pos <= span.lo + len(span.data) - 2:
                if i != len(spans) - 1:  # the most recently used last
                    spans.append(spans.pop(i))
                return span
        return None

    def add(self, span: Span) -> Span:
        self.spans.append(span)
        self.size += len(span.data)
        self.trim(MEMO_BYTES)
        return span

    def trim(self, max_bytes: int) -> None:
        """Keep at most ``max_bytes`` of buffers (at least the most recently used one when
        ``max_bytes`` > 0), the least recently used dropped first."""
        while self.spans and (self.size > max_bytes and (len(self.spans) > 1 or max_bytes <= 0)):
            self.size -= len(self.spans.pop(0).data)


@dataclass
class Chunk:
    """Rows of a read lying in one span, each in a checked frame: the read's row number of
    the first, the rows' and their frames' starts in the span and the frames' numbers
    (``fid``), and per frame its length, row count, store time and whether it names the
    topic read."""

    span: Span
    first: int
    rel: np.ndarray
    fst: np.ndarray
    fid: np.ndarray
    frame_size: np.ndarray
    frame_count: np.ndarray
    frame_ms: np.ndarray
    topic_ok: np.ndarray

    def __len__(self) -> int:
        return len(self.rel)


@dataclass
class Fetched:
    chunks: list[Chunk]
    ok: int  # rows whose frame was fetched and checked
    error: CorruptData | None  # why row ``ok`` could not be (None: every row was)


@dataclass
class Rows:
    """Rows of a read: their offsets in the partition and queue-index entries."""

    topic: str
    partition: int
    offsets: np.ndarray
    positions: np.ndarray
    sizes: np.ndarray

    def __getitem__(self, sel: slice | np.ndarray) -> Rows:
        return Rows(
            self.topic,
            self.partition,
            self.offsets[sel],
            self.positions[sel],
            self.sizes[sel],
        )

    def corrupt(self, exc: CorruptData, i: int, buf: bytes | memoryview, lo: int) -> CorruptData:
        """A frame that failed its checks, reported with the partition offsets it holds (as
        far as its unchecked length says; at least the offset of row ``i``)."""
        first = last = int(self.offsets[i])
        p = int(self.positions[i])
        try:
            foff = frame_offset_of_row(buf, p - lo)
            size = int.from_bytes(buf[foff : foff + 4], "little") if 0 <= foff < len(buf) else 0
            end = lo + foff + size
            inside = np.flatnonzero((self.positions[i:] >= p) & (self.positions[i:] < end))
            if len(inside):
                last = max(last, int(self.offsets[i + int(inside[-1])]))
        except (IndexError, ValueError):
            pass
        span = f"offset {first}" if first == last else f"offsets {first}..{last}"
        return CorruptData(
            f"{exc.message}: it holds {self.topic}/{self.partition} {span} (not served)",
            offset=first,
            first_offset=first,
            last_offset=last,
        )

    def disagrees(self, i: int) -> CorruptData:
        offset = int(self.offsets[i])
        return CorruptData(
            f"queue index of {self.topic}/{self.partition} disagrees with the log at offset "
            f"{offset}",
            offset=offset,
        )


def fetch_chunks(log: CommitLog, rows: Rows, memo: SpanMemo) -> Fetched:
    """Fetch and check, once each, the frames holding ``rows``: a span of log bytes at a
    time, the frame starts of all its rows from their row indexes, the headers read as one
    array, one CRC per frame not already checked in this request."""
    positions = rows.positions
    n = len(positions)
    out = Fetched([], n, None)
    memo.bind(log)
    if n and not memo.spans:
        hit = log.cached_frame(int(positions[0]))
        if hit is not None:  # a tailing reader asks for the frame it read last time
            memo.add(Span.of(hit[0], hit[1], "in the frame cache", checked=True))
    topic = rows.topic.encode()
    i = 0
    while i < n:
        p = int(positions[i])
        span = memo.find(p)
        got = None if span is None else _chunk(span, topic, rows, i)
        if got is None:  # not held, or its frame not whole in a kept span: read anew
            try:
                buf, lo, where = log.span(p, max(p, int(positions[min(n - 1, i + SPAN_ROWS)])))
            except CorruptData as exc:
                out.ok, out.error = i, rows.corrupt(exc, i, b"", 0)
                break
            span = memo.add(Span.of(lo, buf, where))
            got = _chunk(span, topic, rows, i)
            if got is None:
                short = CorruptData(f"truncated record frame at log position {p} ({where})")
                out.ok, out.error = i, rows.corrupt(short, i, buf, lo)
                break
        chunk, error = got
        if len(chunk):
            out.chunks.append(chunk)
        i += len(chunk)
        if error is not None:
            out.ok, out.error = i, error
            break
    if out.chunks:
        # the last frame, for a reader that comes back for it (a tailing consumer): a copy,
        # so that the log's frame cache does not hold a whole span alive
        last = out.chunks[-1]
        start = int(last.fst[-1])
        frame = bytes(last.span.data[start : start + int(last.frame_size[last.fid[-1]])])
        log.keep_frame(last.span.lo + start, memoryview(frame))
    return out


def _chunk(span: Span, topic: bytes, rows: Rows, i: int) -> tuple[Chunk, CorruptData | None] | None:
    """The rows from ``i`` on that lie in ``span`` with their frames whole there, checked;
    None when row ``i``'s frame is not whole in it. A frame that fails its checks ends the
    chunk before its rows, with the error."""
    arr, size = span.arr, len(span.arr)
    rel, fst, fid, heads = frame_rows(span.data, span.lo, rows.positions, i)
    if not len(rel):
        return None
    starts = fst[heads]
    readable = (starts >= 0) & (starts + FRAME_SIZE <= size)
    windows = at_every_byte(arr, FRAME_SIZE)
    if readable.all():
        hdr = windows[starts].view(FRAME_DTYPE)
    else:
        hdr = np.zeros(len(starts), dtype=FRAME_DTYPE)
        hdr[readable] = windows[starts[readable]].view(FRAME_DTYPE)
    fsize = hdr["size"].astype(np.int64)
    fits = readable & (starts + fsize <= size)
    if not fits[0]:
        return None
    frames = len(starts) if fits.all() else int(np.argmin(fits))  # the rest: another span
    hdr, starts, fsize = hdr[:frames], starts[:frames], fsize[:frames]
    count = hdr["count"].astype(np.int64)
    tlen = hdr["tlen"].astype(np.int64)
    lead = starts + FRAME_SIZE + ROW * count
    valid = (hdr["magic"] == MAGIC) & (count > 0) & (fsize >= lead - starts + tlen + hdr["plen"])
    todo = valid & ~among(starts, span.checked)
    if todo.any():
        view = memoryview(span.data)
        sums = zip(
            starts[todo].tolist(), fsize[todo].tolist(), hdr["crc"][todo].tolist(), strict=True
        )
        good = np.array([crc32c(view[s + 8 : s + z]) == c for s, z, c in sums], dtype=bool)
        valid[todo] = good
        passed = starts[todo][good]
        if len(span.checked) or (len(passed) > 1 and not (passed[1:] > passed[:-1]).all()):
            passed = np.union1d(span.checked, passed)
        span.checked = passed  # sorted, no repeats (frame starts in log order already are)
    topic_ok = valid & (tlen == len(topic))
    if len(topic) and topic_ok.any():
        near = np.flatnonzero(topic_ok)
        at = lead[near][:, None] + np.arange(len(topic))
        topic_ok[near] = (arr[at] == np.frombuffer(topic, dtype=np.uint8)).all(axis=1)
    error = None
    end = int(heads[frames]) if frames < len(heads) else len(rel)
    if not valid.all():
        bad = int(np.argmin(valid))
        end = int(heads[bad])
        p = int(rows.positions[i + end])
        exc = CorruptData(
            f"record frame checksum or header mismatch at log position {p} ({span.where})"
        )
        error = rows.corrupt(exc, i + end, span.data, span.lo)
    ms = hdr["store_ms"].astype(np.int64)
    chunk = Chunk(span, i, rel[:end], fst[:end], fid[:end], fsize, count, ms, topic_ok)
    return chunk, error


@dataclass
class Decoded:
    parts: list[ReadBatch]  # the rows that passed the tag filter, a batch per chunk
    scanned_sizes: np.ndarray  # entry sizes of the rows decoded (for the byte estimate)
    ok: int  # rows decoded
    error: CorruptData | None  # why row ``ok`` could not be


def decode_rows(log: CommitLog, rows: Rows, tag: bytes | None, memo: SpanMemo) -> Decoded:
    """Decode ``rows`` as columns, keeping those whose tag is exactly ``tag`` (all when
    None): a batch per span of log bytes they lie in, not joined. Stops at the first row
    that cannot be served, and says why."""
    limit = len(rows.positions)
    error: CorruptData | None = None
    lost = np.flatnonzero(rows.sizes == 0)
    if len(lost):
        limit = int(lost[0])
        off = int(rows.offsets[limit])
        error = CorruptData(
            f"{rows.topic}/{rows.partition} offset {off} was lost to corruption", offset=off
        )
    fetched = fetch_chunks(log, rows[:limit], memo)
    if fetched.error is not None:
        error = fetched.error
    ok = fetched.ok
    parts: list[ReadBatch] = []
    for chunk in fetched.chunks:
        batch, bad = _decode_chunk(chunk, rows, tag)
        if len(batch):
            parts.append(batch)
        if bad is not None:
            ok = chunk.first + bad
            error = rows.disagrees(ok)
            break
    return Decoded(parts, rows.sizes[:ok], ok, error)


def _decode_chunk(chunk: Chunk, rows: Rows, tag: bytes | None) -> tuple[ReadBatch, int | None]:
    """A chunk's rows as columns (those with exactly ``tag`` when given), and the first row
    that disagrees with the queue index (None: none does); nothing from it on is taken. The
    per-row checks and gathers are one compiled pass (read_kernel.pyx)."""
    k = len(chunk)
    (bad, _kept, qoff, born, ms, klen, keys, tlen, tags, ilen, ids, vlen, values, hlen, hdrs) = (
        gather_rows(
            chunk.span.data,
            chunk.rel,
            chunk.fst,
            chunk.fid,
            chunk.frame_size,
            chunk.frame_count,
            chunk.frame_ms,
            chunk.topic_ok.view(np.uint8),
            rows.offsets[chunk.first : chunk.first + k],
            rows.partition,
            tag,
        )
    )
    batch = ReadBatch(
        rows.topic,
        rows.partition,
        qoff,
        born,
        ms,
        PackedColumn(keys, klen),
        PackedColumn(tags, tlen),
        PackedColumn(ids, ilen),
        PackedColumn(values, vlen),
        0,
        None if hdrs is None else PackedColumn(hdrs, hlen),
    )
    return batch, None if bad < 0 else bad
