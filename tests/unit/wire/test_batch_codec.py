"""The binary batch framing: round trips and clear errors for every malformation."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_node.errors import InvalidBatch
from storage_node.wire.batch_codec import HEADER, MAGIC, decode_batch, encode_batch

opt_text = st.one_of(st.none(), st.text(max_size=20))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=64),
            opt_text,
            opt_text,
            opt_text,
            st.one_of(st.none(), st.integers(0, 2**62)),
            st.one_of(st.none(), st.integers(0, 1023)),
        ),
        max_size=30,
    ),
    st.one_of(st.none(), st.text(min_size=1, max_size=10)),
)
def test_round_trip(rows, producer):
    values = [r[0] for r in rows]
    body = encode_batch(
        values,
        keys=[r[1] for r in rows],
        tags=[r[2] for r in rows],
        msg_ids=[r[3] for r in rows],
        timestamps=[r[4] for r in rows],
        partitions=[r[5] for r in rows],
        producer_id=producer,
        sequence=None if producer is None else 7,
    )
    batch = decode_batch(body)
    assert batch.values == values
    assert batch.keys == [r[1] for r in rows]
    assert batch.tags == [r[2] for r in rows]
    assert batch.msg_ids == [r[3] for r in rows]
    assert batch.timestamps == [r[4] for r in rows]
    assert batch.partitions == [r[5] for r in rows]
    assert batch.producer_id == producer
    assert batch.sequence == (None if producer is None else 7)


def test_values_only_columns_default_to_absent():
    batch = decode_batch(encode_batch([b"x", b""]))
    assert (
        batch.values == [b"x", b""]
        and batch.keys == [None, None]
        and batch.partitions == [None, None]
    )


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_crashes(data):
    try:
        decode_batch(data)
    except InvalidBatch:
        pass


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.binary(min_size=1, max_size=4))
def test_corrupted_frames_fail_cleanly(cut, junk):
    body = encode_batch([b"abc", b"defg"], keys=["k", None], tags=[None, "t"])
    mutated = body[:cut] + junk + body[cut + len(junk) :]
    try:
        decode_batch(mutated)
    except InvalidBatch:
        pass


@pytest.mark.parametrize(
    "body, message",
    [
        (b"MS", "too short"),
        (struct.pack("<4sIqHH", b"NOPE", 0, -1, 0, 0), "magic"),
        (struct.pack("<4sIqHH", MAGIC, 0, -1, 0, 2), "flags"),
        (struct.pack("<4sIqHH", MAGIC, 2_000_000, -1, 0, 0), "at most"),
        (struct.pack("<4sIqHH", MAGIC, 3, -1, 0, 0), "truncated"),
        (encode_batch([b"a"]) + b"!", "unexpected bytes"),
    ],
)
def test_errors_name_the_problem(body, message):
    with pytest.raises(InvalidBatch, match=message):
        decode_batch(body)


def test_negative_value_length_rejected():
    body = bytearray(encode_batch([b"a"]))
    # value length column is the last 4-byte array before the blobs
    pos = HEADER.size + 4 + 8 + 4 * 3
    body[pos : pos + 4] = struct.pack("<i", -1)
    with pytest.raises(InvalidBatch, match="value"):
        decode_batch(bytes(body[:-1]))


def test_invalid_utf8_key_rejected():
    body = bytearray(encode_batch([b"a"], keys=["é"]))
    idx = body.index("é".encode())
    body[idx] = 0xFF
    with pytest.raises(InvalidBatch, match="UTF-8"):
        decode_batch(bytes(body))


def test_headers_travel_in_a_flagged_batch_and_a_batch_without_them_is_unchanged():
    plain = encode_batch([b"a", b"b"], keys=["k", None])
    assert struct.unpack_from("<4sIqHH", plain)[4] == 0  # what nodes before headers take
    headers = [[("h", b"\x00\xff"), ("h", None)], []]
    body = encode_batch([b"a", b"b"], keys=["k", None], headers=headers)
    assert struct.unpack_from("<4sIqHH", body)[4] == 1
    decoded = decode_batch(body)
    assert decoded.headers == [tuple(headers[0]), ()]
    assert decoded.values == [b"a", b"b"] and decoded.keys == ["k", None]
    assert decode_batch(plain).headers is None


def test_malformed_headers_in_a_batch_are_refused():
    body = bytearray(encode_batch([b"a"], headers=[[("h", b"v")]]))
    body[-1:] = b""  # the headers blob one byte short
    with pytest.raises(InvalidBatch):
        decode_batch(bytes(body))
    good = encode_batch([b"a"], headers=[[("h", b"v")]])
    cut = good[:-8] + b"\x09\x00" + good[-6:]  # a name length past the blob
    with pytest.raises(InvalidBatch, match="malformed headers"):
        decode_batch(cut)
