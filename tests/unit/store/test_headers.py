"""Record headers in the store: written with their records, read back byte for byte by every
read (columns, records, key and ID lookups), kept through compaction, recovery and a crash;
files written before headers existed read as records without headers."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from storage_node.errors import InvalidBatch
from storage_node.formats.headers import MAX_HEADER_BYTES, decode_headers, encode_headers
from storage_node.formats.packed import PackedBatch, PackedColumn
from storage_node.store import MessageIn, Store, TopicConfig
from tests.unit.store.conftest import small_config

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).parent / "fixtures" / "old_format_store.tar.gz"


def headers_of(i: int) -> tuple[tuple[str, bytes | None], ...]:
    """Every third message has none; the others: a repeated name, a null value, binary."""
    if i % 3 == 0:
        return ()
    return (("trace", b"t-%d" % i), ("dup", b"1"), ("dup", None), ("bin", bytes([0, 255, i % 256])))


def messages(n: int, start: int = 0) -> list[MessageIn]:
    return [
        MessageIn(b"v%d" % i * (1 + i % 5), key=f"k{i % 4}", headers=headers_of(i))
        for i in range(start, start + n)
    ]


def all_messages(s: Store, topic: str = "t") -> dict[bytes, tuple]:
    out = {}
    for p, (first, end) in enumerate(s.partition_offsets(topic)):
        off = first
        while off < end:
            page = s.read(topic, p, off, max_messages=1000)
            for m in page.messages:
                out[m.value] = m.headers
            off = page.next_offset
    return out


def expected(n: int) -> dict[bytes, tuple]:
    return {m.value: tuple(m.headers) for m in messages(n)}


def test_codec_round_trip_and_refusals():
    pairs = [("a", b""), ("a", None), ("é", b"\x00\xff"), ("", b"x")]
    raw = encode_headers(pairs)
    assert decode_headers(raw) == tuple(pairs)
    assert encode_headers([]) == b""
    with pytest.raises(InvalidBatch):
        encode_headers([("a", "text")])  # type: ignore[list-item]
    with pytest.raises(InvalidBatch):
        encode_headers([(b"\xff", b"")])
    with pytest.raises(InvalidBatch):
        encode_headers([("big", b"x" * MAX_HEADER_BYTES)])
    with pytest.raises(ValueError):
        decode_headers(raw[:-1])


def test_every_read_gives_headers_back(store: Store):
    s = store
    s.create_topic(TopicConfig("t", 3))
    results = s.append("t", messages(60))
    assert all_messages(s) == expected(60)
    for i in (0, 1, 2, 59):
        m = s.get_message(results[i].msg_id)
        assert m.headers == headers_of(i)
    found = s.lookup_key("t", "k1", max_count=100).messages
    assert found and all(m.headers == headers_of(int(m.value[1:].split(b"v")[0])) for m in found)
    page = s.read_columns("t", results[1].partition, 0, 1000)
    assert page.headers is not None
    assert page.head(2).header_lists() == page.header_lists()[:2]


def test_headers_survive_compaction_and_reopen(tmp_path):
    cfg = small_config(tmp_path / "d")
    s = Store.open(cfg)
    s.create_topic(TopicConfig("t", 2))
    s.append("t", messages(200))
    s.compact_now()
    assert any(f.state == "compacted" for f in s.list_files() if f.kind == "segment")
    s.append("t", messages(30, 200))
    assert all_messages(s) == {
        **expected(200),
        **{m.value: tuple(m.headers) for m in messages(30, 200)},
    }
    s.close()
    s = Store.open(cfg)
    try:
        assert len(all_messages(s)) == 230
    finally:
        s.close()


def test_rebuilt_indexes_equal_the_appended_ones(tmp_path):
    """Recovery re-indexes frames with headers exactly as the append did (entry sizes
    included: they count the headers)."""
    d = tmp_path / "d"
    s = Store.open(small_config(d))
    s.create_topic(TopicConfig("t", 2))
    for b in range(10):
        s.append("t", messages(20, b * 20))
    s.close()
    queues = {p: p.read_bytes() for p in sorted((d / "queues").rglob("*")) if p.is_file()}
    os.unlink(d / "checkpoint")
    shutil.rmtree(d / "queues")
    shutil.rmtree(d / "msgid")
    s = Store.open(small_config(d))
    try:
        assert s.recovery_report["replayed_records"] == 200
        rebuilt = {p: p.read_bytes() for p in sorted((d / "queues").rglob("*")) if p.is_file()}
        assert rebuilt == queues
        assert len(all_messages(s)) == 200
    finally:
        s.close()


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from storage_node.store import Store, TopicConfig
    from tests.unit.store.conftest import small_config
    from tests.unit.store.test_headers import messages
    s = Store.open(small_config(sys.argv[1], flush_mode="sync"))
    s.create_topic(TopicConfig("t", 2))
    for b in range(30):
        s.append("t", messages(10, b * 10))
        print(b, flush=True)
        if b == 5:
            s.checkpoint()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_crash_keeps_headers_of_every_acknowledged_batch(tmp_path):
    d = str(tmp_path / "d")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, d], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert len(proc.stdout.split()) == 30
    s = Store.open(small_config(d))
    try:
        assert not s.recovery_report["clean"]
        assert s.recovery_report["replayed_records"] > 0
        assert all_messages(s) == expected(300)
    finally:
        s.close()


def test_bad_headers_are_refused_and_nothing_is_stored(store: Store):
    s = store
    s.create_topic(TopicConfig("t", 1))
    good = encode_headers([("a", b"1")])
    for blob in (good[:-1], b"\x05\x00ab"):
        batch = PackedBatch.from_lists([b"x", b"y"])
        batch.headers = PackedColumn.of_bytes([good, blob])
        with pytest.raises(InvalidBatch) as err:
            s.append_packed("t", batch)
        assert err.value.details["index"] == 1
    with pytest.raises(InvalidBatch):
        s.append("t", [MessageIn(b"x", headers=[("a", b"x" * MAX_HEADER_BYTES)])])
    assert s.partition_offsets("t") == [(0, 0)]


def test_files_written_before_headers_read_as_no_headers(tmp_path):
    """A store written by the code before the headers column (fixtures/
    make_old_format_store.py): a compacted and an unsealed segment, indexes rebuilt from
    the old frames; then new records with headers go into the same log."""
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    cfg = small_config(tmp_path / "data")
    s = Store.open(cfg)
    try:
        states = {f.state for f in s.list_files() if f.kind == "segment"}
        assert {"compacted", "unsealed"} <= states
        old = all_messages(s)
        assert sorted(old) == sorted(b"old-%d" % i for i in range(60))
        assert set(old.values()) == {()}
        hit = s.lookup_key("t", "k3", max_count=100).messages
        assert len(hit) == len([i for i in range(60) if i % 7 == 3])
        assert s.get_message(hit[0].msg_id).headers == ()
        assert s.read("t", 0, 0, 5).messages[0].tag == "even"
        s.append("t", [MessageIn(b"new", key="k3", headers=[("h", b"1")])])
        assert s.lookup_key("t", "k3", max_count=1).messages[0].headers == (("h", b"1"),)
    finally:
        s.close()
