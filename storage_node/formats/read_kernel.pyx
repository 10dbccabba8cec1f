# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The per-row work of a columnar read (``store/columnar.py``), compiled.

In numpy every check and every gathered column was an array pass with its own temporaries
(the fields widened to int64, the masks, the gather indexes), a few dozen passes per chunk
of rows; the row decode alone was a quarter of a Kafka page's read (docs/PERFORMANCE.md).
These two loops do the same work in one pass over the rows each, with no Python object per
row:

- ``frame_rows``: which rows from ``i`` on lie in a span, and where each one's frame starts
  (from the row's own index), numbered frame by frame;
- ``gather_rows``: a chunk's per-row checks against the queue index and its frames (index
  within the frame's count, the frame's topic, partition, queue offset, every field inside
  its frame), the exact tag filter, and the columns, each gathered into one ``bytes``.

Frames themselves (header, CRC, topic) are still checked by ``columnar.py``, once each,
before any of their rows is used; this module trusts what it is told of them. It reads
``record.py``'s layout (a 32-byte frame header, then 48-byte rows, little-endian), so it
lives beside it, below the store.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

import numpy as np

cdef enum:
    FRAME_SIZE = 32
    ROW = 48
    ROW_KEY = 1
    ROW_TAG = 2
    ROW_HEADERS = 4


cdef inline uint16_t u16(const uint8_t* p) noexcept nogil:
    return <uint16_t>(p[0] | (p[1] << 8))


cdef inline uint32_t u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
            | (<uint32_t>p[3] << 24))


cdef inline uint64_t u64(const uint8_t* p) noexcept nogil:
    return <uint64_t>u32(p) | (<uint64_t>u32(p + 4) << 32)


def frame_rows(const uint8_t[::1] data, int64_t lo, const int64_t[::1] positions, Py_ssize_t i):
    """The rows ``positions[i:]`` up to the first one not inside ``data`` (a span whose first
    byte is log position ``lo``): ``(rel, fst, fid, heads)``, each row's position in the
    span, where its frame starts there, its frame's number among the rows' frames, and the
    first row of each frame (a new frame wherever the start changes). int64 arrays."""
    cdef Py_ssize_t n = positions.shape[0] - i if positions.shape[0] > i else 0
    cdef Py_ssize_t size = data.shape[0], k, m = 0, h = 0
    cdef const uint8_t* d = &data[0] if size else NULL
    cdef int64_t r, f, last = 0
    rel_a = np.empty(n, dtype=np.int64)
    fst_a = np.empty(n, dtype=np.int64)
    fid_a = np.empty(n, dtype=np.int64)
    heads_a = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] rel = rel_a
    cdef int64_t[::1] fst = fst_a
    cdef int64_t[::1] fid = fid_a
    cdef int64_t[::1] heads = heads_a
    with nogil:
        for k in range(n):
            r = positions[i + k] - lo
            if r < 0 or r > size - ROW:
                break
            f = r - FRAME_SIZE - ROW * <int64_t>u16(d + r)
            if k == 0 or f != last:
                heads[h] = k
                h += 1
                last = f
            rel[k] = r
            fst[k] = f
            fid[k] = h - 1
            m += 1
    return rel_a[:m], fst_a[:m], fid_a[:m], heads_a[:h]


def gather_rows(
    const uint8_t[::1] data,
    const int64_t[::1] rel,
    const int64_t[::1] fst,
    const int64_t[::1] fid,
    const int64_t[::1] frame_size,
    const int64_t[::1] frame_count,
    const int64_t[::1] frame_ms,
    const uint8_t[::1] topic_ok,
    const int64_t[::1] offsets,
    int64_t partition,
    bytes tag,
):
    """A chunk's rows as columns. Row ``k`` is at ``rel[k]`` in ``data``, in the frame at
    ``fst[k]`` (frame ``fid[k]``: its length, row count, store time and whether it names the
    topic read, all checked already), and must be the partition's offset ``offsets[k]``.

    Returns ``(bad, kept, offsets, born, store_ms, key_lens, keys, tag_lens, tags, id_lens,
    ids, value_lens, values, header_lens, headers)``: ``bad`` is the first row that
    disagrees (-1: none; no row from it on is taken), ``kept`` how many of the rows before
    it passed the tag filter (all when ``tag`` is None: else a present tag of exactly those
    bytes), then their columns (int64 arrays; key and tag lengths -1 where absent; the
    header lengths 0 where none, and ``headers`` None when no row of the chunk has any)."""
    cdef Py_ssize_t n = rel.shape[0], k, kept = 0, bad = -1, j = 0
    cdef const uint8_t* d = &data[0] if data.shape[0] else NULL
    cdef const uint8_t* row
    cdef const uint8_t* tp = NULL
    cdef Py_ssize_t tag_len = -1
    cdef int64_t fl, f, hl, vl
    cdef uint8_t flags
    cdef bint any_headers = False
    cdef Py_ssize_t k_total = 0, t_total = 0, i_total = 0, v_total = 0, h_total = 0
    if tag is not None:
        tag_len = len(tag)
        tp = <const uint8_t*>PyBytes_AS_STRING(tag)
    if not (fst.shape[0] == fid.shape[0] == n and offsets.shape[0] >= n):
        raise ValueError("every row needs its frame and offset")
    keep_a = np.empty(n, dtype=np.uint8)
    cdef uint8_t[::1] keep = keep_a
    with nogil:
        for k in range(n):  # pass 1: the checks, the filter and the columns' sizes
            row = d + rel[k]
            f = fid[k]
            fl = frame_size[f]
            flags = row[4]
            hl = u16(row + 10) if flags & ROW_HEADERS else 0
            if flags & ROW_HEADERS:
                any_headers = True
            vl = u32(row + 44)
            if bad < 0 and (
                u16(row) >= frame_count[f]
                or not topic_ok[f]
                or u16(row + 2) != partition
                or u64(row + 12) != <uint64_t>offsets[k]
                or <int64_t>u32(row + 28) + u16(row + 6) > fl
                or <int64_t>u32(row + 32) + u16(row + 8) > fl
                or <int64_t>u32(row + 36) + row[5] > fl
                or <int64_t>u32(row + 40) + vl + hl > fl
            ):
                bad = k
            if bad >= 0:
                keep[k] = 0
                if any_headers:
                    break
                continue  # only whether a later row has headers still counts
            keep[k] = 1
            if tag_len >= 0 and not (
                flags & ROW_TAG
                and u16(row + 8) == tag_len
                and memcmp(d + fst[k] + u32(row + 32), tp, tag_len) == 0
            ):
                keep[k] = 0
                continue
            kept += 1
            k_total += u16(row + 6)
            t_total += u16(row + 8)
            i_total += row[5]
            v_total += vl
            h_total += hl
    qoff_a = np.empty(kept, dtype=np.int64)
    born_a = np.empty(kept, dtype=np.int64)
    ms_a = np.empty(kept, dtype=np.int64)
    klen_a = np.empty(kept, dtype=np.int64)
    tlen_a = np.empty(kept, dtype=np.int64)
    ilen_a = np.empty(kept, dtype=np.int64)
    vlen_a = np.empty(kept, dtype=np.int64)
    hlen_a = np.empty(kept, dtype=np.int64)
    cdef int64_t[::1] qoff = qoff_a
    cdef int64_t[::1] born = born_a
    cdef int64_t[::1] ms = ms_a
    cdef int64_t[::1] klen = klen_a
    cdef int64_t[::1] tlen = tlen_a
    cdef int64_t[::1] ilen = ilen_a
    cdef int64_t[::1] vlen = vlen_a
    cdef int64_t[::1] hlen = hlen_a
    keys = PyBytes_FromStringAndSize(NULL, k_total)
    tags = PyBytes_FromStringAndSize(NULL, t_total)
    ids = PyBytes_FromStringAndSize(NULL, i_total)
    values = PyBytes_FromStringAndSize(NULL, v_total)
    headers = PyBytes_FromStringAndSize(NULL, h_total)
    cdef uint8_t* ko = <uint8_t*>PyBytes_AS_STRING(keys)
    cdef uint8_t* to = <uint8_t*>PyBytes_AS_STRING(tags)
    cdef uint8_t* io = <uint8_t*>PyBytes_AS_STRING(ids)
    cdef uint8_t* vo = <uint8_t*>PyBytes_AS_STRING(values)
    cdef uint8_t* ho = <uint8_t*>PyBytes_AS_STRING(headers)
    cdef const uint8_t* frame
    cdef Py_ssize_t length
    with nogil:
        for k in range(bad if bad >= 0 else n):  # pass 2: the kept rows' columns
            if not keep[k]:
                continue
            row = d + rel[k]
            frame = d + fst[k]
            flags = row[4]
            qoff[j] = <int64_t>u64(row + 12)
            born[j] = <int64_t>u64(row + 20)
            ms[j] = frame_ms[fid[k]]
            length = u16(row + 6)
            memcpy(ko, frame + u32(row + 28), length)
            ko += length
            klen[j] = length if flags & ROW_KEY else -1
            length = u16(row + 8)
            memcpy(to, frame + u32(row + 32), length)
            to += length
            tlen[j] = length if flags & ROW_TAG else -1
            length = row[5]
            memcpy(io, frame + u32(row + 36), length)
            io += length
            ilen[j] = length
            vl = u32(row + 44)
            memcpy(vo, frame + u32(row + 40), vl)
            vo += vl
            vlen[j] = vl
            hl = u16(row + 10) if flags & ROW_HEADERS else 0
            memcpy(ho, frame + u32(row + 40) + vl, hl)
            ho += hl
            hlen[j] = hl
            j += 1
    return (
        bad, kept, qoff_a, born_a, ms_a, klen_a, keys, tlen_a, tags, ilen_a, ids, vlen_a,
        values, hlen_a, headers if any_headers else None,
    )
