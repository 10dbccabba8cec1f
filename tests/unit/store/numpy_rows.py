"""The columnar read's per-row work as numpy did it before the compiled read kernel
(storage_node/formats/read_kernel.pyx), kept to check the kernel against: the same rows, the
same checks, the same columns and errors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from crc32c import crc32c

from storage_node.errors import CorruptData
from storage_node.formats.packed import PackedColumn
from storage_node.formats.record import (
    FRAME_DTYPE,
    FRAME_SIZE,
    MAGIC,
    ROW,
    ROW_DTYPE,
    ROW_HEADERS,
    ROW_KEY,
    ROW_TAG,
)
from storage_node.store.columnar import Rows, Span, among
from storage_node.store.read_batch import ReadBatch

GATHER_PAD = 4096


@dataclass
class Chunk:
    span: Span
    first: int
    recs: np.ndarray
    fst: np.ndarray
    fid: np.ndarray
    frame_size: np.ndarray
    frame_count: np.ndarray
    frame_ms: np.ndarray
    topic_ok: np.ndarray

    def __len__(self) -> int:
        return len(self.recs)


def at_every_byte(arr: np.ndarray, width: int) -> np.ndarray:
    """``arr`` (uint8) seen as one opaque ``width``-byte item starting at each of its bytes,
    without a copy: indexing it with byte positions copies whole items with one memcpy each
    (2-5 times as fast as a fancy index over a 2-D ``sliding_window_view``, or over a
    structured dtype, which copies field by field); view the result as the dtype wanted."""
    return np.ndarray(
        buffer=arr, dtype=f"V{width}", shape=(max(0, len(arr) - width + 1),), strides=(1,)
    )


def gather(
    arr: np.ndarray, joined: memoryview, starts: np.ndarray, lens: np.ndarray
) -> bytes | memoryview:
    """The byte ranges ``[starts[i], starts[i] + lens[i])`` of ``joined`` (``arr`` is the
    same bytes as an array), back to back; one range is a view of ``joined``, else the
    gathered array's own buffer (one copy in all)."""
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
        return b"".join(
            [joined[a:b] for a, b in zip(starts[heads].tolist(), ends[tails].tolist(), strict=True)]
        )
    widest = int(lens.max())
    if (
        widest <= GATHER_PAD
        and widest * n <= 2 * total + 64 * n
        and int(starts.max()) + widest <= len(arr)
    ):
        # fields of similar lengths: copy a fixed-width window per field (a row copy, not a
        # byte index), then drop each window's tail
        windows = at_every_byte(arr, widest)[starts]
        if int(lens.min()) == widest:
            return windows.view(np.uint8).data  # the copy the index made, not another
        rows = windows.view(np.uint8).reshape(n, widest)
        return rows[np.arange(widest) < lens[:, None]].data
    before = np.cumsum(lens) - lens
    index = np.repeat(starts - before, lens)
    index += np.arange(total, dtype=np.int64)
    return arr[index].data


def numpy_chunk(
    span: Span, topic: bytes, rows: Rows, i: int
) -> tuple[Chunk, CorruptData | None] | None:
    """The rows from ``i`` on that lie in ``span`` with their frames whole there, checked;
    None when row ``i``'s frame is not whole in it. A frame that fails its checks ends the
    chunk before its rows, with the error."""
    arr, size = span.arr, len(span.arr)
    rel = rows.positions[i:] - span.lo
    inside = (rel >= 0) & (rel <= size - ROW)
    if not inside.all():
        rel = rel[: int(np.argmin(inside))]
    if not len(rel):
        return None
    recs = at_every_byte(arr, ROW)[rel].view(ROW_DTYPE)
    fst = rel - FRAME_SIZE - ROW * recs["index"].astype(np.int64)  # where its frame starts
    brk = np.empty(len(fst), dtype=bool)
    brk[0] = True
    np.not_equal(fst[1:], fst[:-1], out=brk[1:])
    heads = np.flatnonzero(brk)
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
    fid = np.cumsum(brk[:end]) - 1
    chunk = Chunk(span, i, recs[:end], fst[:end], fid, fsize, count, hdr["store_ms"], topic_ok)
    return chunk, error


def numpy_decode_chunk(chunk: Chunk, rows: Rows, tag: bytes | None) -> tuple[ReadBatch, int | None]:
    """A chunk's rows as columns (those with exactly ``tag`` when given), and the first row
    that disagrees with the queue index (None: none does); nothing from it on is taken."""
    arr, recs, fst, fid = chunk.span.arr, chunk.recs, chunk.fst, chunk.fid
    k = len(recs)
    fl = chunk.frame_size[fid]
    klen = recs["klen"].astype(np.int64)
    tlen = recs["taglen"].astype(np.int64)
    ilen = recs["idlen"].astype(np.int64)
    vlen = recs["vlen"].astype(np.int64)
    koff = recs["koff"].astype(np.int64)
    toff = recs["toff"].astype(np.int64)
    ioff = recs["ioff"].astype(np.int64)
    voff = recs["voff"].astype(np.int64)
    with_headers = bool((recs["flags"] & ROW_HEADERS).any())
    hlen = np.where(recs["flags"] & ROW_HEADERS, recs["hlen"], 0).astype(np.int64)
    bad = (
        (recs["index"] >= chunk.frame_count[fid])
        | ~chunk.topic_ok[fid]
        | (recs["partition"] != rows.partition)
        | (recs["qoff"] != rows.offsets[chunk.first : chunk.first + k].astype(np.uint64))
        | (koff + klen > fl)
        | (toff + tlen > fl)
        | (ioff + ilen > fl)
        | (voff + vlen + hlen > fl)
    )
    first_bad: int | None = None
    sel: slice | np.ndarray = slice(None)
    if bad.any():  # a row outside its frame or not the one asked for: nothing past it
        first_bad = int(np.argmax(bad))
        sel = slice(0, first_bad)
    flags = recs["flags"][sel]
    has_tag = (flags & ROW_TAG) != 0
    if tag is not None:  # exact tag comparison on the arrays (the hash matched already)
        keep = has_tag & (tlen[sel] == len(tag))
        cand = np.flatnonzero(keep)
        if len(cand) and len(tag):
            at = (fst[sel] + toff[sel])[cand][:, None] + np.arange(len(tag))
            keep[cand] = (arr[at] == np.frombuffer(tag, dtype=np.uint8)).all(axis=1)
        sel = np.flatnonzero(keep)  # ``keep`` covers a prefix of the rows
        flags, has_tag = flags[keep], has_tag[keep]
    has_key = (flags & ROW_KEY) != 0
    fst, recs = fst[sel], recs[sel]
    klen, tlen, ilen, vlen = klen[sel], tlen[sel], ilen[sel], vlen[sel]
    data = memoryview(chunk.span.data)
    headers = None
    if with_headers:  # each record's headers follow its value
        hlen = hlen[sel]
        hstart = fst + voff[sel] + vlen
        headers = PackedColumn(gather(arr, data, hstart, hlen), hlen)
    batch = ReadBatch(
        rows.topic,
        rows.partition,
        recs["qoff"].astype(np.int64),
        recs["born"].astype(np.int64),
        chunk.frame_ms[fid[sel]].astype(np.int64),
        PackedColumn(gather(arr, data, fst + koff[sel], klen), np.where(has_key, klen, -1)),
        PackedColumn(gather(arr, data, fst + toff[sel], tlen), np.where(has_tag, tlen, -1)),
        PackedColumn(gather(arr, data, fst + ioff[sel], ilen), ilen),
        PackedColumn(gather(arr, data, fst + voff[sel], vlen), vlen),
        0,
        headers,
    )
    return batch, first_bad
