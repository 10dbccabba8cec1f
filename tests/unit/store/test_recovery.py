"""Crash recovery: torn tails, mid-file corruption, temporaries, files in two folders, replay."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from storage_node.errors import CorruptData
from storage_node.store import MessageIn, Store, TopicConfig
from tests.unit.store.conftest import small_config

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from storage_node.store import MessageIn, Store, TopicConfig
    from tests.unit.store.conftest import small_config
    cfg = small_config(sys.argv[1], flush_mode=sys.argv[2])
    s = Store.open(cfg)
    s.create_topic(TopicConfig("t", 2))
    for b in range(int(sys.argv[3])):
        res = s.append("t", [MessageIn(f"{b}-{i}".encode(), key=f"k{(b * 10 + i) % 13}") for i in range(10)])
        print(b, res[0].msg_id, flush=True)
        if b == 3:
            s.checkpoint()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _run_child(data_dir: str, mode: str, batches: int) -> list[str]:
    root = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    )
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, data_dir, mode, str(batches)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return proc.stdout.split("\n")[:-1]


def _all_values(s: Store, topic: str) -> list[bytes]:
    out = []
    for p, (first, nxt) in enumerate(s.partition_offsets(topic)):
        off = first
        while off < nxt:
            r = s.read(topic, p, off, max_messages=1000)
            out += [m.value for m in r.messages]
            off = r.next_offset
    return out


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigkill_then_replay_from_checkpoint(tmp_path, mode):
    d = str(tmp_path / "d")
    lines = _run_child(d, mode, 40)
    assert len(lines) == 40
    s = Store.open(small_config(d))
    try:
        rep = s.recovery_report
        assert not rep["clean"]
        values = _all_values(s, "t")
        assert len(values) == len(set(values))  # nothing duplicated
        if mode == "sync":  # every acknowledged batch survived and is findable three ways
            assert sorted(values) == sorted(
                f"{b}-{i}".encode() for b in range(40) for i in range(10)
            )
            assert rep["replayed_records"] > 0
            for line in lines:
                b, mid = line.split()
                assert s.get_message(mid).value == f"{b}-0".encode()
            expect = sum(1 for b in range(40) for i in range(10) if (b * 10 + i) % 13 == 5)
            assert len(s.lookup_key("t", "k5", max_count=1000).messages) == expect
        more = s.append("t", [MessageIn(b"after", key="k5")])
        assert s.get_message(more[0].msg_id).value == b"after"
    finally:
        s.close()


def _write_some(d, n=200, **kw) -> None:
    s = Store.open(small_config(d, **kw))
    s.create_topic(TopicConfig("t", 1))
    for b in range(n // 10):
        s.append("t", [MessageIn(f"{b}-{i}".encode() * 20, key=f"k{i}") for i in range(10)])
    s.close()


def _mark_unclean(d) -> None:
    """Turn a clean shutdown into a crash: drop the clean flag and the checkpoint position."""
    import json

    path = os.path.join(d, "checkpoint")
    with open(path) as fh:
        ck = json.load(fh)
    ck.update(clean=False, log_end=0, queues={}, key_index_name=None, key_index_count=1)
    with open(path, "w") as fh:
        json.dump(ck, fh)


def _last_segment(d) -> str:
    u = os.path.join(d, "commitlog", "unsealed")
    return os.path.join(u, sorted(os.listdir(u))[-1])


def test_torn_tail_is_truncated(tmp_path):
    d = str(tmp_path / "d")
    _write_some(d)
    seg = _last_segment(d)
    size = os.path.getsize(seg)
    with open(seg, "ab") as fh:
        fh.write(b"\x90\x01\x00\x00garbage-partial-record")
    _mark_unclean(d)
    s = Store.open(small_config(d))
    try:
        assert s.recovery_report["truncated_bytes"] == 26
        assert os.path.getsize(seg) == size
        assert len(_all_values(s, "t")) == 200
        assert len(s.lookup_key("t", "k3", max_count=100).messages) == 20
    finally:
        s.close()


def test_mid_file_corruption_is_reported_not_served(tmp_path):
    d = str(tmp_path / "d")
    _write_some(d)
    seg = _last_segment(d)
    with open(seg, "r+b") as fh:
        fh.seek(100)  # inside the first frame
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    _mark_unclean(d)
    s = Store.open(small_config(d))
    try:
        rep = s.recovery_report
        assert len(rep["corrupt_records"]) == 1 and rep["truncated_bytes"] == 0
        first, nxt = s.partition_offsets("t")[0]
        with pytest.raises(CorruptData):
            s.read("t", 0, first)
        # the records of the damaged frame are reported, everything after it is served
        offset = first
        while offset < nxt:
            try:
                s.read("t", 0, offset, max_messages=1)
                break
            except CorruptData:
                offset += 1
        assert first < offset < nxt
        r = s.read("t", 0, offset, max_messages=1000)
        assert len(r.messages) == min(1000, nxt - offset)
    finally:
        s.close()


def test_corruption_in_sealed_segment_read_raises(tmp_path):
    d = str(tmp_path / "d")
    _write_some(d, 400)
    u = os.path.join(d, "commitlog", "unsealed")
    first = os.path.join(u, sorted(os.listdir(u))[0])
    with open(first, "r+b") as fh:
        fh.seek(60)
        fh.write(b"\x00\x00\x00")
    s = Store.open(small_config(d))  # clean restart: no rescan
    try:
        with pytest.raises(CorruptData):
            s.read("t", 0, 0)
    finally:
        s.close()


def test_temporaries_deleted_and_furthest_state_kept(tmp_path):
    d = str(tmp_path / "d")
    _write_some(d, 800)
    s = Store.open(small_config(d))
    s.compact_now()
    names = sorted(os.listdir(os.path.join(d, "commitlog", "compacted")))
    s.close()
    # a crash between "write compacted" and "delete unsealed" leaves both copies
    raw_copy = os.path.join(d, "commitlog", "unsealed", names[0])
    with open(raw_copy, "wb") as fh:
        fh.write(b"stale raw copy")
    tmp = os.path.join(d, "commitlog", "compacted", names[1] + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(b"half written")
    s = Store.open(small_config(d))
    try:
        rep = s.recovery_report
        assert any(p.endswith(".tmp") for p in rep["temporaries_removed"])
        assert rep["duplicates_removed"] == [f"unsealed/{names[0]}"]
        assert not os.path.exists(raw_copy) and not os.path.exists(tmp)
        assert len(_all_values(s, "t")) == 800
    finally:
        s.close()


def test_lost_checkpoint_rebuilds_all_indexes(tmp_path):
    d = str(tmp_path / "d")
    _write_some(d, 300)
    s = Store.open(small_config(d))
    before = (s.partition_offsets("t"), len(s.lookup_key("t", "k1", max_count=1000).messages))
    s.close()
    os.unlink(os.path.join(d, "checkpoint"))
    shutil.rmtree(os.path.join(d, "queues"))
    shutil.rmtree(os.path.join(d, "msgid"))
    s = Store.open(small_config(d))
    try:
        assert s.recovery_report["replayed_records"] == 300
        after = (s.partition_offsets("t"), len(s.lookup_key("t", "k1", max_count=1000).messages))
        assert after == before
        m = s.read("t", 0, 17).messages[0]
        assert s.get_message(m.msg_id) == m
    finally:
        s.close()
