# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The records of a Kafka v2 record batch to and from the store's packed columns, compiled.

Kafka's record is a run of zig-zag varints around the key, the value and the headers, one
record after another (Kafka's protocol guide, "Record"); reading follows Kafka's own
``DefaultRecord.readFrom``: the attributes are one byte, the timestamp delta a varlong (at
most 10 bytes), every other number a varint (at most 5 bytes, an int32). Python reads or writes them one
record at a time at a few microseconds each (aiokafka's Cython codec makes a Python object
per record and per header), which made the codec the Kafka listener's largest cost
(docs/PERFORMANCE.md). Here both directions are one C loop over the rows, reading from and
writing to the packed columns' blobs (one bytes object per column, lengths in an int64
array) with no Python object per record; only headers, which are rare, are checked with
Python calls (their names must be UTF-8).

``records.py`` does the batch's header, its CRC and decompression, and turns these
functions' results into the store's ``PackedBatch``; this module sees the records section
only.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

import numpy as np

cdef bytes MSG_ID_NAME = b"msgstore.msg_id"
cdef bytes TAG_NAME = b"msgstore.tag"
MAX_HEADER_BYTES = 0xFFFF  # formats/headers.py: one message's headers fit a u16 length


class HeadersTooLong(ValueError):
    """A record's headers do not fit the store's 16-bit headers length."""


# --- varints ------------------------------------------------------------------------------

cdef inline int varint_size(int64_t value) noexcept nogil:
    cdef uint64_t z = <uint64_t>((value << 1) ^ (value >> 63))
    cdef int n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


cdef inline Py_ssize_t put_varint(uint8_t* out, Py_ssize_t pos, int64_t value) noexcept nogil:
    cdef uint64_t z = <uint64_t>((value << 1) ^ (value >> 63))
    while z >= 0x80:
        out[pos] = <uint8_t>((z & 0x7F) | 0x80)
        pos += 1
        z >>= 7
    out[pos] = <uint8_t>z
    return pos + 1


cdef inline Py_ssize_t get_varint(
    const uint8_t* data, Py_ssize_t pos, Py_ssize_t end, int64_t* value
) noexcept nogil:
    """Read one zig-zag varint at ``pos``; the position after it, or -1 when it is cut or
    longer than 10 bytes."""
    cdef uint64_t z = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if pos >= end or shift > 63:
            return -1
        b = data[pos]
        pos += 1
        z |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            break
        shift += 7
    value[0] = <int64_t>(z >> 1) ^ -(<int64_t>(z & 1))
    return pos


cdef inline Py_ssize_t get_varint32(
    const uint8_t* data, Py_ssize_t pos, Py_ssize_t end, int64_t* value
) noexcept nogil:
    """Kafka's ``varint`` (ByteUtils.readVarint): at most 5 bytes, the value an int32 (bits
    past 32 dropped, as Java's int arithmetic does); -1 when cut or longer."""
    cdef uint32_t z = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if pos >= end:
            return -1
        b = data[pos]
        pos += 1
        if b < 0x80:
            break
        z |= (<uint32_t>(b & 0x7F)) << shift
        shift += 7
        if shift > 28:
            return -1
    z |= (<uint32_t>b) << shift
    value[0] = <int64_t>(<int32_t>((z >> 1) ^ (-(<int32_t>(z & 1)))))
    return pos


# --- stored headers (formats/headers.py: u16 name_len, name, i32 value_len, value; LE) ----

cdef inline uint16_t le16(const uint8_t* p) noexcept nogil:
    return <uint16_t>(p[0] | (p[1] << 8))


cdef inline int32_t le32(const uint8_t* p) noexcept nogil:
    return <int32_t>(<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
                     | (<uint32_t>p[3] << 24))


cdef Py_ssize_t stored_headers_size(
    const uint8_t* h, Py_ssize_t start, Py_ssize_t end, int64_t* count
) noexcept nogil:
    """Bytes the stored headers in [start, end) take as Kafka headers; -1 if they do not
    parse. ``count`` gets their number."""
    cdef Py_ssize_t size = 0, pos = start
    cdef int64_t n = 0, name_len, value_len
    while pos < end:
        if pos + 2 > end:
            return -1
        name_len = le16(h + pos)
        pos += 2
        if pos + name_len + 4 > end:
            return -1
        pos += name_len
        value_len = le32(h + pos)
        pos += 4
        if value_len < -1 or pos + (value_len if value_len > 0 else 0) > end:
            return -1
        if value_len > 0:
            pos += value_len
        size += varint_size(name_len) + name_len + varint_size(value_len)
        size += value_len if value_len > 0 else 0
        n += 1
    count[0] = n
    return size


cdef Py_ssize_t put_stored_headers(
    uint8_t* out, Py_ssize_t at, const uint8_t* h, Py_ssize_t pos, Py_ssize_t end
) noexcept nogil:
    """Write the (already checked) stored headers in [pos, end) as Kafka headers."""
    cdef int64_t name_len, value_len
    while pos < end:
        name_len = le16(h + pos)
        pos += 2
        at = put_varint(out, at, name_len)
        memcpy(out + at, h + pos, name_len)
        at += name_len
        pos += name_len
        value_len = le32(h + pos)
        pos += 4
        at = put_varint(out, at, value_len)
        if value_len > 0:
            memcpy(out + at, h + pos, value_len)
            at += value_len
            pos += value_len
    return at


cdef inline Py_ssize_t put_header(
    uint8_t* out, Py_ssize_t at, const uint8_t* name, Py_ssize_t name_len,
    const uint8_t* value, int64_t value_len
) noexcept nogil:
    at = put_varint(out, at, name_len)
    memcpy(out + at, name, name_len)
    at += name_len
    at = put_varint(out, at, value_len)
    if value_len > 0:
        memcpy(out + at, value, value_len)
        at += value_len
    return at


# --- out: rows to records -----------------------------------------------------------------

def encode_records(
    const int64_t[::1] offset_deltas not None,
    const int64_t[::1] timestamp_deltas not None,
    const uint8_t[::1] keys not None,
    const int64_t[::1] key_lens not None,
    const uint8_t[::1] values not None,
    const int64_t[::1] value_lens not None,
    const uint8_t[::1] msg_ids not None,
    const int64_t[::1] msg_id_lens not None,
    const uint8_t[::1] tags not None,
    const int64_t[::1] tag_lens not None,
    const uint8_t[::1] headers not None,
    const int64_t[::1] header_lens not None,
    Py_ssize_t reserve=0,
):
    """The records section of a v2 batch for these rows, after ``reserve`` zero bytes (room
    for the batch's header, so the batch is one allocation and no copy): each record's
    stored headers, then its message ID as ``msgstore.msg_id`` and, when it has one, its tag
    as ``msgstore.tag``. Lengths of -1 are null keys (absent IDs, tags and headers); blobs
    hold the present entries back to back. ValueError when a stored header does not parse.
    """
    cdef Py_ssize_t n = offset_deltas.shape[0], i, total = reserve, at = reserve
    cdef Py_ssize_t k_at = 0, v_at = 0, id_at = 0, t_at = 0, h_at = 0, h_len, h_size
    cdef int64_t k_len, v_len, id_len, t_len, h_count
    cdef const uint8_t* kp = &keys[0] if keys.shape[0] else NULL
    cdef const uint8_t* vp = &values[0] if values.shape[0] else NULL
    cdef const uint8_t* ip = &msg_ids[0] if msg_ids.shape[0] else NULL
    cdef const uint8_t* tp = &tags[0] if tags.shape[0] else NULL
    cdef const uint8_t* hp = &headers[0] if headers.shape[0] else NULL
    cdef const uint8_t* id_name = MSG_ID_NAME
    cdef const uint8_t* tag_name = TAG_NAME
    cdef Py_ssize_t id_name_len = len(MSG_ID_NAME), tag_name_len = len(TAG_NAME)
    cdef Py_ssize_t bad = -1
    if not (timestamp_deltas.shape[0] == key_lens.shape[0] == value_lens.shape[0] == n
            and msg_id_lens.shape[0] == tag_lens.shape[0] == header_lens.shape[0] == n):
        raise ValueError("every column needs one entry per row")
    sizes = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] body = sizes
    cdef int64_t[::1] counts = np.empty(n, dtype=np.int64)
    with nogil:
        for i in range(n):  # pass 1: every record's size
            k_len = key_lens[i]
            v_len = value_lens[i] if value_lens[i] > 0 else 0
            id_len = msg_id_lens[i]
            t_len = tag_lens[i]
            h_len = header_lens[i] if header_lens[i] > 0 else 0
            h_count = 0
            h_size = 0
            if h_len:
                h_size = stored_headers_size(hp, h_at, h_at + h_len, &h_count)
                if h_size < 0:
                    bad = i
                    break
                h_at += h_len
            h_count += 1  # the message ID
            h_size += varint_size(id_name_len) + id_name_len + varint_size(id_len)
            h_size += id_len if id_len > 0 else 0
            if t_len >= 0:
                h_count += 1
                h_size += varint_size(tag_name_len) + tag_name_len + varint_size(t_len) + t_len
            counts[i] = h_count
            body[i] = (
                1 + varint_size(timestamp_deltas[i]) + varint_size(offset_deltas[i])
                + varint_size(k_len) + (k_len if k_len > 0 else 0)
                + varint_size(v_len) + v_len + varint_size(h_count) + h_size
            )
            total += varint_size(body[i]) + body[i]
    if bad >= 0:
        raise ValueError(f"row {bad}: its stored headers do not parse")
    out = PyByteArray_FromStringAndSize(NULL, total)
    cdef uint8_t* o = <uint8_t*>PyByteArray_AS_STRING(out)
    memset(o, 0, reserve)
    h_at = 0
    with nogil:
        for i in range(n):  # pass 2: write them
            at = put_varint(o, at, body[i])
            o[at] = 0  # attributes
            at += 1
            at = put_varint(o, at, timestamp_deltas[i])
            at = put_varint(o, at, offset_deltas[i])
            k_len = key_lens[i]
            at = put_varint(o, at, k_len)
            if k_len > 0:
                memcpy(o + at, kp + k_at, k_len)
                at += k_len
                k_at += k_len
            v_len = value_lens[i] if value_lens[i] > 0 else 0
            at = put_varint(o, at, v_len)
            if v_len:
                memcpy(o + at, vp + v_at, v_len)
                at += v_len
                v_at += v_len
            at = put_varint(o, at, counts[i])
            h_len = header_lens[i] if header_lens[i] > 0 else 0
            if h_len:
                at = put_stored_headers(o, at, hp, h_at, h_at + h_len)
                h_at += h_len
            id_len = msg_id_lens[i]
            at = put_header(o, at, id_name, id_name_len, ip + id_at, id_len)
            if id_len > 0:
                id_at += id_len
            t_len = tag_lens[i]
            if t_len >= 0:
                at = put_header(o, at, tag_name, tag_name_len, tp + t_at, t_len)
                t_at += t_len
    if at != total:  # pragma: no cover - the two passes disagree: a bug, never bad input
        raise AssertionError(f"encoded {at} bytes, sized {total}")
    return out


# --- in: records to rows ------------------------------------------------------------------

def decode_records(const uint8_t[::1] data not None, Py_ssize_t count):
    """Read exactly ``count`` records from a (decompressed) records section.

    Returns ``(keys, key_lens, values, value_lens, timestamp_deltas, headers, header_lens,
    special)``: key and value blobs with their lengths (-1: a null key; a null value is
    stored empty, length 0; any negative length is null, as Kafka reads it); each record's other headers in the store's form
    (``headers`` is None when no record has any; length -1 for none); ``special`` lists
    ``(row, name, value)`` for every ``msgstore.tag`` / ``msgstore.msg_id`` header with a
    value, in order, which set the message's tag and ID instead of being stored.
    ValueError says where the bytes do not parse; HeadersTooLong when a record's headers
    exceed what the store keeps.
    """
    cdef Py_ssize_t end = data.shape[0], pos = 0, rec_end, i, hpos, total_keys = 0
    cdef Py_ssize_t total_values = 0, with_headers = 0
    cdef const uint8_t* d = &data[0] if end else NULL
    cdef int64_t length, value, n_headers, j, name_len, value_len
    if count < 0:
        raise ValueError(f"a batch of {count} records")
    key_lens_a = np.empty(count, dtype=np.int64)
    value_lens_a = np.empty(count, dtype=np.int64)
    deltas_a = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] key_lens = key_lens_a
    cdef int64_t[::1] value_lens = value_lens_a
    cdef int64_t[::1] ts = deltas_a
    cdef int64_t[::1] key_at = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] value_at = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] headers_at = np.empty(count, dtype=np.int64)  # -1: none
    cdef int64_t[::1] headers_n = np.empty(count, dtype=np.int64)
    cdef const char* problem = NULL
    with nogil:
        for i in range(count):
            pos = get_varint32(d, pos, end, &length)
            if pos < 0 or length < 0 or pos + length > end:
                problem = "a record's length is cut or wrong"
                break
            rec_end = pos + length
            pos += 1  # attributes (unused in v2)
            if pos > rec_end:
                problem = "a record is cut before its attributes"
                break
            pos = get_varint(d, pos, rec_end, &value)
            if pos < 0:
                problem = "a record's timestamp delta is cut"
                break
            ts[i] = value
            pos = get_varint32(d, pos, rec_end, &value)  # offset delta (the order is the row's)
            if pos < 0:
                problem = "a record's offset delta is cut"
                break
            pos = get_varint32(d, pos, rec_end, &value)
            if pos < 0 or pos + (value if value > 0 else 0) > rec_end:
                problem = "a record's key is cut or has a wrong length"
                break
            if value < 0:
                value = -1  # any negative length is a null key, as Kafka reads it
            key_lens[i] = value
            key_at[i] = pos
            if value > 0:
                pos += value
                total_keys += value
            pos = get_varint32(d, pos, rec_end, &value)
            if pos < 0 or pos + (value if value > 0 else 0) > rec_end:
                problem = "a record's value is cut or has a wrong length"
                break
            value_at[i] = pos
            if value > 0:
                pos += value
                total_values += value
            value_lens[i] = value if value > 0 else 0
            pos = get_varint32(d, pos, rec_end, &n_headers)
            if pos < 0 or n_headers < 0:
                problem = "a record's header count is cut or negative"
                break
            headers_n[i] = n_headers
            headers_at[i] = pos if n_headers else -1
            for j in range(n_headers):
                pos = get_varint32(d, pos, rec_end, &name_len)
                if pos < 0 or name_len < 0 or pos + name_len > rec_end:
                    problem = "a header name is cut or has a wrong length"
                    break
                pos += name_len
                pos = get_varint32(d, pos, rec_end, &value_len)
                if pos < 0 or pos + (value_len if value_len > 0 else 0) > rec_end:
                    problem = "a header value is cut or has a wrong length"
                    break
                if value_len > 0:
                    pos += value_len
            if problem != NULL:
                break
            if n_headers:
                with_headers += 1
            if pos != rec_end:
                problem = "a record's fields do not add up to its length"
                break
        if problem == NULL and pos != end:
            problem = "bytes follow the last record the batch counts"
    if problem != NULL:
        raise ValueError(f"record {i}: {problem.decode()}" if count else problem.decode())

    keys = PyBytes_FromStringAndSize(NULL, total_keys)
    values = PyBytes_FromStringAndSize(NULL, total_values)
    cdef uint8_t* kout = <uint8_t*>PyBytes_AS_STRING(keys)
    cdef uint8_t* vout = <uint8_t*>PyBytes_AS_STRING(values)
    cdef Py_ssize_t k_at = 0, v_at = 0
    with nogil:
        for i in range(count):
            if key_lens[i] > 0:
                memcpy(kout + k_at, d + key_at[i], key_lens[i])
                k_at += key_lens[i]
            if value_lens[i] > 0:
                memcpy(vout + v_at, d + value_at[i], value_lens[i])
                v_at += value_lens[i]
    if not with_headers:
        return keys, key_lens_a, values, value_lens_a, deltas_a, None, None, []

    # headers (rare): names checked as UTF-8 with Python's codec, the rest copied
    header_lens_a = np.full(count, -1, dtype=np.int64)
    cdef int64_t[::1] header_lens = header_lens_a
    stored = bytearray()
    special = []
    cdef Py_ssize_t before
    for i in range(count):
        if headers_at[i] < 0:
            continue
        hpos = headers_at[i]
        before = len(stored)
        for j in range(headers_n[i]):
            hpos = get_varint32(d, hpos, end, &name_len)
            name = bytes(data[hpos:hpos + name_len])
            hpos += name_len
            name.decode("utf-8")  # UnicodeDecodeError (a ValueError) names the problem
            hpos = get_varint32(d, hpos, end, &value_len)
            if value_len >= 0 and (name == TAG_NAME or name == MSG_ID_NAME):
                special.append((i, name, bytes(data[hpos:hpos + value_len])))
                hpos += value_len
                continue
            if name_len > MAX_HEADER_BYTES:
                raise HeadersTooLong(f"record {i}: headers longer than {MAX_HEADER_BYTES} bytes")
            stored += int(name_len).to_bytes(2, "little")
            stored += name
            stored += int(max(value_len, -1)).to_bytes(4, "little", signed=True)  # null
            if value_len > 0:
                stored += data[hpos:hpos + value_len]
                hpos += value_len
            if len(stored) - before > MAX_HEADER_BYTES:
                raise HeadersTooLong(f"record {i}: headers longer than {MAX_HEADER_BYTES} bytes")
        if len(stored) > before:
            header_lens[i] = len(stored) - before
    if not len(stored):
        return keys, key_lens_a, values, value_lens_a, deltas_a, None, None, special
    return keys, key_lens_a, values, value_lens_a, deltas_a, bytes(stored), header_lens_a, special
