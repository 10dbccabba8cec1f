"""The one frame walker (formats/record.py) on whole, corrupt and truncated input: what
recovery's tail scan and replay and log shipping rely on."""

from __future__ import annotations

import numpy as np
import pytest

from storage_node.formats.frame_walker import (
    FrameHeader,
    frame_step,
    last_batch_end,
    scan_frames,
    walk_frames,
)
from storage_node.formats.packed import PackedColumn
from storage_node.formats.record import (
    FLAG_PRODUCER,
    FRAME_SIZE,
    encode_frames,
    frame_length,
    row_frame_start,
)


def _frames(n: int = 40, producer: tuple[bytes, int] | None = (b"p1", 7)) -> tuple[bytes, list]:
    """One batch of ``n`` records in several small frames: (bytes, frame offsets)."""
    col = PackedColumn.of_bytes
    encoded = encode_frames(
        b"orders",
        np.zeros(n, dtype=np.int64),
        np.arange(n),
        np.arange(n),
        1234,
        col([b"k%d" % i for i in range(n)]),
        col([None] * n),
        col([b"orders-0a000001-1-%d" % i for i in range(n)]),
        col([b"v" * 200] * n),
        producer,
        1024,
    )
    sizes = encoded.frame_sizes.tolist()
    offsets = [int(x) for x in np.cumsum([0, *sizes[:-1]])]
    return b"".join(encoded.pieces), offsets


def test_whole_input_walks_every_frame() -> None:
    data, offsets = _frames()
    assert len(offsets) > 3
    walked = list(walk_frames(data))
    assert [off for off, _size, _bad in walked] == offsets
    assert not any(bad for _off, _size, bad in walked)
    assert scan_frames(data) == (len(data), [])
    assert [frame_length(data, off) for off in offsets] == [s for _o, s, _b in walked]
    assert list(walk_frames(b"")) == [] and scan_frames(b"") == (0, [])


def test_a_walk_can_start_at_any_frame_boundary() -> None:
    data, offsets = _frames()
    walked = list(walk_frames(data, offsets[2]))
    assert [off for off, _s, _b in walked] == offsets[2:]


@pytest.mark.parametrize("cut", [1, 7, FRAME_SIZE - 1, FRAME_SIZE, FRAME_SIZE + 60])
def test_a_truncated_tail_ends_the_walk(cut: int) -> None:
    """Any cut inside the last frame: the run ends at the frame before, which the walk
    reports as a torn tail (size 0), and no whole batch remains (the end flag was cut)."""
    data, offsets = _frames()
    torn = data[: offsets[-1] + cut]
    walked = list(walk_frames(torn))
    assert walked[-1] == (offsets[-1], 0, True)
    assert scan_frames(torn) == (offsets[-1], [])
    assert last_batch_end(torn, 0, offsets[-1]) == 0
    assert last_batch_end(data, 0, len(data)) == len(data)
    assert frame_step(torn, offsets[-1]) == (0, True)


def test_a_damaged_middle_frame_is_stepped_over_and_reported() -> None:
    data, offsets = _frames()
    bad = bytearray(data)
    bad[offsets[1] + FRAME_SIZE + 5] ^= 0xFF  # inside the second frame's rows
    walked = list(walk_frames(bytes(bad)))
    assert [off for off, _s, _b in walked] == offsets
    assert [damaged for _o, _s, damaged in walked] == [i == 1 for i in range(len(offsets))]
    assert scan_frames(bytes(bad)) == (len(data), [offsets[1]])


def test_a_damaged_last_frame_is_a_torn_tail() -> None:
    data, offsets = _frames()
    bad = bytearray(data)
    bad[-3] ^= 0xFF
    assert scan_frames(bytes(bad)) == (offsets[-1], [])


@pytest.mark.parametrize("claimed", [0, 5, FRAME_SIZE - 1, 1 << 30])
def test_an_implausible_length_is_a_torn_tail(claimed: int) -> None:
    data, offsets = _frames()
    bad = bytearray(data)
    bad[offsets[1] : offsets[1] + 4] = claimed.to_bytes(4, "little")
    assert scan_frames(bytes(bad)) == (offsets[1], [])


def test_frame_header_and_row_back_links() -> None:
    data, offsets = _frames()
    view = memoryview(data)
    first = FrameHeader.of(view[offsets[0] :])
    second = FrameHeader.of(view[offsets[1] :])
    assert first.topic == b"orders" and first.producer == b"p1" and first.sequence == 7
    assert first.flags & FLAG_PRODUCER and first.store_ms == 1234
    assert first.batch_key() == second.batch_key()  # frames of one batch group together
    rows = first.rows(view[offsets[0] :])
    assert len(rows) == first.count and rows["qoff"].tolist() == list(range(first.count))
    last_row = offsets[1] + FRAME_SIZE + 48 * (second.count - 1)
    assert row_frame_start(data[last_row : last_row + 2], last_row) == offsets[1]
    other, _ = _frames(producer=None)
    assert FrameHeader.of(other).batch_key() != first.batch_key()
