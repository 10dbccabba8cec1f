"""The commit log's public surface for log shipping and recovery: whole batches read from a
position, appended to another log as they are at the same positions, the log cut back to
a position."""

from __future__ import annotations

import os

import pytest

from storage_node.errors import CorruptData, InvalidArgument, OffsetOutOfRange
from storage_node.formats.frame_walker import iter_frames
from storage_node.formats.record import FLAG_BATCH_END, frame_flags
from storage_node.store import Store, TopicConfig
from storage_node.store.commitlog import CommitLog

from .conftest import small_config


def _log(path: str, segment_bytes: int = 64 * 1024) -> CommitLog:
    log = CommitLog(path, segment_bytes, "sync", 1000, 1 << 20, 5)
    log.set_end(0)
    log.start()
    return log


def _source(tmp_path) -> Store:
    store = Store.open(small_config(tmp_path / "src"))
    store.create_topic(TopicConfig("orders", 2))
    for i in range(40):  # several segments of 64 KiB
        store.append_columns("orders", [b"%d-%d" % (i, j) * 20 for j in range(50)])
    return store


def _ship(src: CommitLog, dst: CommitLog, max_bytes: int) -> int:
    pos = src.start_pos
    while True:
        seg, chunk = src.read_frames(pos, max_bytes)
        if not chunk:
            return pos
        dst.append_frames(chunk, pos, seg)
        pos += len(chunk)


def test_frames_shipped_from_one_log_to_another_read_back_the_same(tmp_path) -> None:
    store = _source(tmp_path)
    dst = _log(str(tmp_path / "dst"))
    try:
        src = store.log
        src.flush()
        assert len(src.starts) > 2
        assert _ship(src, dst, 5000) == src.end
        dst.flush()
        assert dst.end == src.end
        for pos in range(src.start_pos, src.end, 997):
            try:
                want = src.read(pos)
            except Exception as exc:  # not a row position: both logs say the same
                with pytest.raises(type(exc)):
                    dst.read(pos)
                continue
            assert dst.read(pos) == want
        whole = b"".join(src.read_segment(s) for s in src.starts)
        assert b"".join(dst.read_segment(s) for s in dst.starts) == whole
        # from compacted (LZ4 block) segments too: frames come a block at a time
        assert store.compact_now()["segments"] > 1
        again = _log(str(tmp_path / "again"))
        try:
            assert _ship(store.log, again, 5000) == src.end
            again.flush()
            assert b"".join(again.read_segment(s) for s in again.starts) == whole
        finally:
            again.close()
    finally:
        dst.close()
        store.close()


def test_read_frames_returns_whole_frames_within_the_limit(tmp_path) -> None:
    store = _source(tmp_path)
    try:
        log = store.log
        _seg, one = log.read_frames(0, 1)  # one whole batch, whatever the limit
        frames = list(iter_frames(one))
        assert sum(s for _o, s in frames) == len(one)
        ends = [o for o, _s in frames if frame_flags(one, o) & FLAG_BATCH_END]
        assert ends == [frames[-1][0]]  # the last frame ends the batch, no other does
        _seg, chunk = log.read_frames(0, 50_000)
        assert len(chunk) <= 50_000 and sum(s for _o, s in iter_frames(chunk)) == len(chunk)
        assert log.read_frames(log.end, 100) == (log.end, b"")
        with pytest.raises(OffsetOutOfRange):
            log.read_frames(log.end + 1, 100)
    finally:
        store.close()


def test_append_frames_refuses_anything_but_whole_valid_frames(tmp_path) -> None:
    store = _source(tmp_path)
    dst = _log(str(tmp_path / "dst"))
    try:
        seg, chunk = store.log.read_frames(0, 50_000)
        bad = bytearray(chunk)
        bad[40] ^= 1
        with pytest.raises(InvalidArgument):
            dst.append_frames(b"", 0, seg)
        for data in (chunk[:-1], bytes(bad), chunk + b"\0" * 40):
            with pytest.raises(CorruptData):
                dst.append_frames(data, 0, seg)
            assert dst.end == 0  # nothing was written
        with pytest.raises(OffsetOutOfRange):  # not at the copy's end
            dst.append_frames(chunk, 1, seg)
        assert dst.end == 0
        assert dst.append_frames(chunk, 0, seg) == len(list(iter_frames(chunk)))
        assert dst.end == len(chunk)
    finally:
        dst.close()
        store.close()


def test_truncate_to_cuts_the_log_back_and_appends_go_on_from_there(tmp_path) -> None:
    src_store = _source(tmp_path)
    dst = _log(str(tmp_path / "dst"), segment_bytes=16 * 1024)
    try:
        src_store.log.flush()
        _ship(src_store.log, dst, 3000)
        dst.flush()
        segments_before = len(dst.starts)
        frames = list(iter_frames(dst.read_segment(dst.starts[1])))
        cut = dst.starts[1] + frames[1][0]  # a frame boundary inside the second segment
        end = dst.end
        assert dst.truncate_to(cut) == end - cut
        assert dst.end == cut and len(dst.starts) == 2 < segments_before
        seg_path = os.path.join(dst.dirs["unsealed"], f"{dst.starts[1]:020d}")
        assert os.path.getsize(seg_path) == cut - dst.starts[1]
        with pytest.raises(OffsetOutOfRange):
            dst.read(cut)
        assert dst.truncate_to(end) == 0  # past the end: nothing to cut
        with pytest.raises(InvalidArgument):
            dst.truncate_to(-1)
        seg, again = src_store.log.read_frames(cut, 3000)  # the same bytes, shipped again
        dst.append_frames(again, cut, seg)
        dst.flush()
        assert dst.end == cut + len(again)
        assert dst.read_frames(cut, 3000) == (seg, again)
    finally:
        dst.close()
        src_store.close()
