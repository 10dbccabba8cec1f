"""Bounded decompression of produced batches: what Kafka's clients compress (aiokafka's
encoders, the Java client's Xerial snappy framing among them) comes back byte for byte, and
a batch that would decompress past the bound is refused without producing it."""

from __future__ import annotations

import os

import pytest
from aiokafka import codec

from storage_node.errors import MessageTooLarge
from storage_node.kafka.decompress import CODECS

ENCODERS = {  # as bytes, as a Produce request carries them
    1: lambda data: bytes(codec.gzip_encode(data)),
    2: lambda data: bytes(
        codec.snappy_encode(data, xerial_compatible=True, xerial_blocksize=32 * 1024)
    ),
    3: lambda data: bytes(codec.lz4_encode(data)),
    4: lambda data: bytes(codec.zstd_encode(data)),
}
NAMES = {1: "gzip", 2: "snappy-xerial", 3: "lz4", 4: "zstd"}


@pytest.mark.parametrize("number", sorted(ENCODERS), ids=NAMES.get)
@pytest.mark.parametrize("size", [0, 1, 1000, 300_000])
def test_what_clients_compress_comes_back(number: int, size: int) -> None:
    data = os.urandom(size // 2) + b"log line " * (size // 18)
    assert CODECS[number](ENCODERS[number](data), 1 << 20) == data


def test_raw_snappy_and_gzip_of_two_members_come_back() -> None:
    data = b"abc" * 10_000
    assert CODECS[2](bytes(codec.snappy_encode(data, xerial_compatible=False)), 1 << 20) == data
    two = codec.gzip_encode(data) + codec.gzip_encode(b"tail")
    assert CODECS[1](two, 1 << 20) == data + b"tail"


@pytest.mark.parametrize("number", sorted(ENCODERS), ids=NAMES.get)
def test_a_bomb_is_refused_at_the_bound(number: int) -> None:
    limit = 1 << 20
    bomb = ENCODERS[number](b"\0" * (limit + 1))
    assert len(bomb) < limit // 10
    with pytest.raises(MessageTooLarge, match="more than 1048576 bytes"):
        CODECS[number](bomb, limit)
    # exactly the bound is taken
    assert len(CODECS[number](ENCODERS[number](b"\0" * limit), limit)) == limit


@pytest.mark.parametrize("number", sorted(ENCODERS), ids=NAMES.get)
def test_cut_or_garbled_input_raises(number: int) -> None:
    whole = ENCODERS[number](b"some records " * 1000)
    for broken in (whole[: len(whole) // 2], b"\x82SNAPPY\x00" + b"\0" * 9 + b"junk" * 5):
        with pytest.raises(Exception) as info:  # noqa: PT011 - each codec its own error
            CODECS[number](broken, 1 << 20)
        assert not isinstance(info.value, MessageTooLarge)
