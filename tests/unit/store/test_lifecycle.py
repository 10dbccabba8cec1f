"""Seal → compact → upload → expire, remote compaction, and identical answers in every state."""

from __future__ import annotations

import os
import threading
import time
import zlib

import pytest

from storage_node.errors import InvalidArgument, InvalidName, NotFound
from storage_node.formats.compressed import compact_segment_bytes
from storage_node.formats.filenames import hour_folder
from storage_node.formats.key_index_compacted import compact_key_index_bytes
from storage_node.store import MessageIn, Store, TopicConfig
from tests.unit.store.conftest import small_config


def _fill(s: Store, batches: int = 40) -> list:
    res = []
    for b in range(batches):
        res += s.append(
            "t",
            [
                MessageIn(
                    f"{b}-{i}-".encode() * 10, key=f"k{i % 17}", tag="even" if i % 2 == 0 else "odd"
                )
                for i in range(25)
            ],
        )
    return res


def _answers(s: Store, res: list) -> tuple:
    reads = []
    for p, (first, nxt) in enumerate(s.partition_offsets("t")):
        off = first
        while off < nxt:
            r = s.read("t", p, off, max_messages=500)
            reads += r.messages
            off = r.next_offset
    keys = [s.lookup_key("t", f"k{i}", max_count=1000).messages for i in range(17)]
    ids = [s.get_message(r.msg_id) for r in res[::13]]
    tagged = s.read("t", 0, s.partition_offsets("t")[0][0], max_messages=50, tag="odd").messages
    return reads, keys, ids, tagged


@pytest.fixture
def filled(tmp_path):
    s = Store.open(small_config(tmp_path / "d"))
    s.create_topic(TopicConfig("t", 2))
    res = _fill(s)
    yield s, res
    s.close()


def test_answers_identical_in_every_state(filled, tmp_path):
    s, res = filled
    before = _answers(s, res)
    report = s.compact_now()
    assert report["segments"] >= 2 and report["key_indexes"] >= 2
    assert report["bytes_after"] < report["bytes_before"]
    states = {(f.kind, f.state) for f in s.list_files()}
    assert ("segment", "compacted") in states and ("key_index", "compacted") in states
    assert _answers(s, res) == before
    far = int(time.time() * 1000) + 10 * 3_600_000
    rep = s.run_lifecycle_once(now_ms=far)  # old enough to upload, too young to expire
    assert rep["uploaded"] >= 4 and rep["expired"] == 0
    assert {f.state for f in s.list_files()} <= {"uploaded", "unsealed"}
    assert os.listdir(os.path.join(s.root, "objects", "commitlog"))
    assert _answers(s, res) == before
    s.close()
    s2 = Store.open(small_config(tmp_path / "d"))
    try:
        assert _answers(s2, res) == before  # uploaded files are found again after a restart
    finally:
        s2.close()


def test_expiry_drops_old_files_and_raises_first_offset(filled):
    s, res = filled
    s.seal_active()
    far = int(time.time() * 1000) + 200 * 3_600_000  # past the 168 h retention
    rep = s.run_lifecycle_once(now_ms=far)
    assert rep["expired"] >= 2
    offsets = s.partition_offsets("t")
    assert all(first == nxt for first, nxt in offsets)
    with pytest.raises(NotFound):
        s.get_message(res[0].msg_id)
    assert s.lookup_key("t", "k1").messages == []
    new = s.append("t", [MessageIn(b"fresh", key="k1", partition=0)])
    assert s.read("t", 0, new[0].offset).messages[0].value == b"fresh"
    assert [m.value for m in s.lookup_key("t", "k1").messages] == [b"fresh"]


def test_remote_compaction_round_trip(filled):
    s, res = filled
    before = _answers(s, res)
    s.seal_active()
    sealed = s.sealed_files()
    assert {f.kind for f in sealed} == {"segment", "key_index"}
    for f in sealed:
        raw = s.open_sealed(f.kind, f.name)
        out = compact_segment_bytes(raw) if f.kind == "segment" else compact_key_index_bytes(raw)
        info = s.commit_compacted(f.kind, f.name, out, zlib.crc32(out))
        assert info.state == "compacted" and info.name == f.name
        again = s.commit_compacted(f.kind, f.name, out, zlib.crc32(out))  # a retried task
        assert again.state == "compacted"
    assert s.sealed_files() == []
    assert _answers(s, res) == before


def test_remote_compaction_rejects_bad_rewrites(filled):
    s, _res = filled
    s.seal_active()
    seg = next(f for f in s.sealed_files() if f.kind == "segment")
    raw = s.open_sealed("segment", seg.name)
    good = compact_segment_bytes(raw)
    with pytest.raises(InvalidArgument):
        s.commit_compacted("segment", seg.name, good, zlib.crc32(good) ^ 1)
    tampered = bytearray(good)
    tampered[40] ^= 0xFF
    with pytest.raises(InvalidArgument):
        s.commit_compacted("segment", seg.name, bytes(tampered), zlib.crc32(bytes(tampered)))
    kx = next(f for f in s.sealed_files() if f.kind == "key_index")
    with pytest.raises(InvalidArgument):
        s.commit_compacted("key_index", kx.name, good, zlib.crc32(good))
    for kind, name in [("segment", "../x"), ("key_index", "a/b"), ("bogus", seg.name)]:
        with pytest.raises(InvalidArgument):
            s.open_sealed(kind, name)
    with pytest.raises(InvalidName):
        s.open_sealed("segment", "12")
    with pytest.raises(NotFound):
        s.open_sealed("segment", "9" * 20)
    assert {f.name for f in s.sealed_files()} >= {seg.name, kx.name}  # nothing changed


def test_compaction_never_blocks_appends(tmp_path):
    s = Store.open(small_config(tmp_path / "d", segment_bytes=256 * 1024))
    s.create_topic(TopicConfig("t", 1))
    _fill(s, 60)
    stop = threading.Event()
    written = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            written.extend(s.append("t", [MessageIn(f"w{i}".encode(), key="live")]))
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(3):
            s.compact_now()
    finally:
        stop.set()
        t.join()
    try:
        got = s.lookup_key("t", "live", max_count=10_000).messages
        assert len(got) == len(written) > 0
        for r in written[:: max(1, len(written) // 20)]:
            assert s.get_message(r.msg_id).key == "live"
    finally:
        s.close()


def test_message_ids_from_many_ips(tmp_path):
    s = Store.open(small_config(tmp_path / "d"))
    s.create_topic(TopicConfig("t", 1))
    ids = [
        f"app.svc-{ip:08x}-431699-{seq}"
        for ip in range(0x0A000001, 0x0A000001 + 40)
        for seq in (0, 4095, 4096, 99_999)
    ]
    for i in range(0, len(ids), 50):
        s.append("t", [MessageIn(m.encode(), msg_id=m) for m in ids[i : i + 50]])
    try:
        for m in ids:
            assert s.get_message(m).value == m.encode()
        with pytest.raises(NotFound):
            s.get_message("app.svc-0a000001-431699-1")
        with pytest.raises(NotFound):
            s.get_message("app.svc-0b000001-431699-0")
        files = os.listdir(os.path.join(s.root, "msgid", hour_folder(431699)))
        assert files == ["app.svc"]
    finally:
        s.close()


def test_background_worker_compacts_and_uploads(tmp_path):
    cfg = small_config(
        tmp_path / "d", lifecycle_interval_s=0.05, compact_after_s=0, upload_after_s=0
    )
    s = Store.open(cfg)
    try:
        s.create_topic(TopicConfig("t", 1))
        res = _fill(s, 30)
        s.seal_active()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = {f.state for f in s.list_files()}
            if states <= {"uploaded", "unsealed"}:
                break
            time.sleep(0.05)
        assert {f.state for f in s.list_files()} <= {"uploaded", "unsealed"}
        assert s.get_message(res[3].msg_id).value == b"0-3-" * 10
        assert s.stats()["uploaded_files"] >= 2
    finally:
        s.close()


def test_restart_after_everything_expired(tmp_path):
    cfg = small_config(tmp_path / "d")
    s = Store.open(cfg)
    s.create_topic(TopicConfig("t", 2))
    _fill(s, 20)
    s.seal_active()
    s.run_lifecycle_once(now_ms=int(time.time() * 1000) + 200 * 3_600_000)
    offsets = s.partition_offsets("t")
    s.close()
    s = Store.open(cfg)
    try:
        assert s.partition_offsets("t") == offsets
        r = s.append("t", [MessageIn(b"new", partition=1)])
        assert r[0].offset == offsets[1][1]
        assert s.read("t", 1, r[0].offset).messages[0].value == b"new"
    finally:
        s.close()


def test_uncompressed_topics_keep_blocks_stored(tmp_path):
    s = Store.open(small_config(tmp_path / "d"))
    try:
        s.create_topic(TopicConfig("raw", 1, compression="none"))
        res = s.append("raw", [MessageIn(b"z" * 500, key="k") for _ in range(300)])
        rep = s.compact_now()
        assert rep["segments"] >= 1 and rep["bytes_after"] >= rep["bytes_before"] * 0.9
        assert s.get_message(res[-1].msg_id).value == b"z" * 500
    finally:
        s.close()


def test_partitions_allowed(tmp_path):
    from storage_node.errors import NotOwner

    s = Store.open(small_config(tmp_path / "d"))
    try:
        s.create_topic(TopicConfig("t", 4))
        res = s.append("t", [MessageIn(b"a"), MessageIn(b"b")], partitions_allowed=[2])
        assert {r.partition for r in res} == {2}
        with pytest.raises(NotOwner):
            s.append("t", [MessageIn(b"a", partition=1)], partitions_allowed=[2, 3])
        with pytest.raises(NotOwner):
            s.append("t", [MessageIn(b"a")], partitions_allowed=[])
        assert s.partition_offsets("t") == [(0, 0), (0, 0), (0, 2), (0, 0)]
    finally:
        s.close()
