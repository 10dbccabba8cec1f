"""The binary read framing: round trips (non-UTF-8 values, absent fields, empty answers),
content negotiation, and a clear MalformedAnswer for every malformed body."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_node.store import Message
from storage_node.wire.read_answer import (
    READ_HEADER,
    READ_MAGIC,
    MalformedAnswer,
    accepts_headers,
    accepts_read_columns,
    decode_read_answer,
    encode_read_answer,
)

opt_text = st.one_of(st.none(), st.text(max_size=12))
stamp = st.integers(0, 2**62)

message = st.builds(
    Message,
    topic=st.just("orders"),
    partition=st.integers(0, 1023),
    offset=st.integers(0, 2**62),
    key=opt_text,
    tag=opt_text,
    msg_id=st.text(min_size=1, max_size=30),
    timestamp=stamp,
    store_timestamp=stamp,
    value=st.binary(max_size=64),
)


def as_row(m: Message) -> dict:
    return {
        "topic": m.topic,
        "partition": m.partition,
        "offset": m.offset,
        "key": m.key,
        "tag": m.tag,
        "msg_id": m.msg_id,
        "timestamp": m.timestamp,
        "store_timestamp": m.store_timestamp,
        "value": m.value,
    }


@settings(max_examples=150, deadline=None)
@given(
    st.lists(message, max_size=25),
    st.one_of(st.none(), st.integers(0, 2**62)),
    st.booleans(),
    st.booleans(),
)
def test_round_trip(messages, next_offset, end_reached, limit_reached):
    body = encode_read_answer(
        messages, next_offset, end_reached=end_reached, limit_reached=limit_reached
    )
    cols = decode_read_answer(body)
    assert len(cols) == len(messages)
    assert cols.to_rows("orders") == [as_row(m) for m in messages]
    assert cols.next_offset == next_offset
    assert (cols.end_reached, cols.limit_reached) == (end_reached, limit_reached)
    assert cols.meta == {}


def test_non_utf8_values_and_absent_fields_keep_their_bytes():
    messages = [
        Message("t", 0, 5, None, None, "id-1", 10, 11, b"\xff\xfe\x00binary"),
        Message("t", 0, 6, "k\u00e9y", "tag", "id-2", 12, 13, b""),
        Message("t", 0, 7, "", "", "id-3", 14, 15, "caf\u00e9".encode()),
    ]
    cols = decode_read_answer(encode_read_answer(messages, 8))
    assert cols.value_list() == [b"\xff\xfe\x00binary", b"", "caf\u00e9".encode()]
    assert cols.key_text() == [None, "k\u00e9y", ""]
    assert cols.tag_text() == [None, "tag", ""]
    assert cols.key_lengths.tolist() == [-1, 4, 0]
    assert cols.offsets.tolist() == [5, 6, 7] and cols.next_offset == 8


def test_empty_answer():
    cols = decode_read_answer(encode_read_answer([], 42))
    assert len(cols) == 0 and cols.next_offset == 42 and cols.to_rows("t") == []
    none = decode_read_answer(encode_read_answer([], None))
    assert none.next_offset is None


def test_meta_travels_after_the_values():
    m = Message("t", 1, 0, "k", None, "id", 1, 2, b"v")
    cols = decode_read_answer(
        encode_read_answer([m], None, limit_reached=True, meta={"unreachable_nodes": ["node-2"]})
    )
    assert cols.meta == {"unreachable_nodes": ["node-2"]} and cols.limit_reached


def test_columns_are_aligned_views_of_the_body():
    """The 24-byte header and 64-bit columns first keep every column aligned (zero copy)."""
    m = Message("t", 1, 9, "k", None, "id", 1, 2, b"v")
    body = encode_read_answer([m, m], 10)
    cols = decode_read_answer(body)
    assert READ_HEADER.size % 8 == 0
    assert cols.offsets.base is not None and cols.offsets.dtype == np.dtype("<i8")
    # also decodes from a view that starts at an odd address
    shifted = memoryview(b"\x00" + body)[1:]
    assert decode_read_answer(shifted).offsets.tolist() == [9, 9]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_crashes(data):
    try:
        decode_read_answer(data)
    except MalformedAnswer:
        pass


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 400), st.binary(min_size=1, max_size=4))
def test_corrupted_answers_fail_cleanly(cut, junk):
    messages = [
        Message("t", 0, 1, "k", None, "id-1", 1, 2, b"abc"),
        Message("t", 0, 2, None, "tg", "id-2", 3, 4, b"\xff"),
    ]
    body = encode_read_answer(messages, 3, meta={"unreachable_nodes": ["n"]})
    mutated = body[:cut] + junk + body[cut + len(junk) :]
    try:
        decode_read_answer(mutated)
    except MalformedAnswer:
        pass


def _one() -> bytearray:
    return bytearray(encode_read_answer([Message("t", 0, 1, "\u00e9", None, "i", 1, 2, b"v")], 2))


def _patch(body: bytearray, pos: int, fmt: str, value: int) -> bytes:
    struct.pack_into(fmt, body, pos, value)
    return bytes(body)


H = READ_HEADER.size  # columns of a one-message answer: offsets at H, born time H+8, ...


@pytest.mark.parametrize(
    "body, message",
    [
        (b"MSR", "too short"),
        (READ_HEADER.pack(b"MSB1", 0, 0, 0, 0), "magic"),
        (READ_HEADER.pack(READ_MAGIC, 0, 0, 8, 0), "flags"),
        (READ_HEADER.pack(READ_MAGIC, 2_000_000, 0, 0, 0), "at most"),
        (READ_HEADER.pack(READ_MAGIC, 0, -5, 0, 0), "negative"),
        (READ_HEADER.pack(READ_MAGIC, 3, 0, 0, 0), "truncated inside its column"),
        (READ_HEADER.pack(READ_MAGIC, 0, 0, 0, 2**31), "too large"),
        (READ_HEADER.pack(READ_MAGIC, 0, 0, 0, 4) + b"[1] ", "JSON object"),
        (READ_HEADER.pack(READ_MAGIC, 0, 0, 0, 2) + b"{x", "not valid JSON"),
        (bytes(_one()) + b"!", "unexpected bytes"),
        (bytes(_one()[:-1]), "truncated inside its data"),
        (_patch(_one(), H, "<q", -1), ">= 0"),
        (_patch(_one(), H + 24, "<i", -3), "partitions"),
        (_patch(_one(), H + 28, "<i", -2), "field lengths"),
        (_patch(_one(), H + 40, "<i", -1), "values >= 0"),
        (_patch(_one(), H + 28, "<i", 2**30), "truncated"),
    ],
)
def test_errors_name_the_problem(body, message):
    with pytest.raises(MalformedAnswer, match=message):
        decode_read_answer(body)


def test_invalid_utf8_key_rejected():
    body = _one()
    idx = body.index("\u00e9".encode())
    body[idx + 1] = 0x41  # a lead byte followed by ASCII
    with pytest.raises(MalformedAnswer, match="key .* UTF-8"):
        decode_read_answer(bytes(body))


def test_malformed_answer_is_a_typed_error():
    err = MalformedAnswer("x")
    assert err.code == "malformed_answer" and err.status == 500


@pytest.mark.parametrize(
    "accept, binary",
    [
        (None, False),
        ("", False),
        ("*/*", False),
        ("application/json", False),
        ("application/x-msgstore-batch", True),
        ("Application/X-Msgstore-Batch", True),
        ("application/json, application/x-msgstore-batch", True),
        ("application/x-msgstore-batch;q=0", False),
        ("application/x-msgstore-batch;q=0.5, application/json", False),
        ("application/x-msgstore-batch, application/json;q=0.9", True),
        ("application/x-msgstore-batch;q=nonsense", False),
    ],
)
def test_content_negotiation(accept, binary):
    assert accepts_read_columns(accept) is binary


def test_headers_are_framed_only_when_a_message_has_some():
    def msg(i: int, headers: tuple = ()) -> Message:
        return Message("t", 0, i, None, None, f"id-{i}", 1, 2, b"v%d" % i, headers)

    plain = encode_read_answer([msg(0), msg(1)], 2, with_headers=True)
    assert READ_HEADER.unpack_from(plain)[3] == 0  # what clients before headers read
    assert decode_read_answer(plain).header_lists() == [(), ()]
    some = [msg(0, (("a", b"\xff"), ("a", None))), msg(1)]
    unasked = encode_read_answer(some, 2)  # a reader that did not ask gets no headers column
    assert READ_HEADER.unpack_from(unasked)[3] == 0
    with_h = encode_read_answer(some, 2, with_headers=True)
    cols = decode_read_answer(with_h)
    assert cols.header_lists() == [(("a", b"\xff"), ("a", None)), ()]
    rows = cols.to_rows("t")
    assert rows[0]["headers"] == [("a", b"\xff"), ("a", None)] and "headers" not in rows[1]
    with pytest.raises(MalformedAnswer):
        decode_read_answer(with_h[:-1])


def test_headers_are_sent_only_to_readers_that_ask():
    assert accepts_headers("application/x-msgstore-batch; headers=1")
    assert accepts_headers("application/json;q=0.5, application/x-msgstore-batch;headers=1")
    assert not accepts_headers("application/x-msgstore-batch")
    assert not accepts_headers("application/json; headers=1")
    assert not accepts_headers(None)
