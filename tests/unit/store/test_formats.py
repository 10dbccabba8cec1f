"""File formats on their own: record codec, IndexFile chains, compacted forms, message IDs."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from storage_node.backend.objectstore import DirObjectStore, open_object_store
from storage_node.errors import CorruptData, InvalidArgument, NotFound
from storage_node.formats.compressed import (
    BLOCK_RAW_MAX,
    CompressedSegmentReader,
    compact_segment_bytes,
    decompress_all,
    verify_compacted_segment,
)
from storage_node.formats.frame_walker import iter_frames, last_batch_end, scan_frames
from storage_node.formats.key_index_compacted import (
    CompactedKeyIndex,
    compact_key_index_bytes,
    verify_compacted_key_index,
)
from storage_node.formats.key_index_file import KeyIndexFile
from storage_node.formats.message_id import MsgIdIndexFile, format_msg_id, parse_msg_id
from storage_node.formats.packed import PackedColumn
from storage_node.formats.queue_index import ENTRY_DTYPE, QueueIndex
from storage_node.formats.record import (
    FLAG_BATCH_END,
    decode_frame,
    encode_frames,
    frame_flags,
    read_record,
)


def _packed(items: list) -> PackedColumn:
    return PackedColumn.of_bytes(items)


def _records(n: int, big: int = -1, seed: int = 1, target: int = 4096) -> tuple[bytes, object]:
    """A batch of n records (record ``big`` larger than a compressed block) as written."""
    rnd = random.Random(seed)
    values = [
        os.urandom(rnd.randint(0, 300)) if i != big else os.urandom(BLOCK_RAW_MAX * 2)
        for i in range(n)
    ]
    keys = [None if i % 5 == 0 else f"k{i}".encode() for i in range(n)]
    tags = [None if i % 3 else b"tag" for i in range(n)]
    ids = [f"a-0a000001-1-{i}".encode() for i in range(n)]
    encoded = encode_frames(
        b"topic",
        np.array([i % 4 for i in range(n)]),
        np.arange(n),
        np.arange(n),
        99,
        _packed(keys),
        _packed(tags),
        _packed(ids),
        _packed(values),
        (b"prod", 5),
        target,
    )
    encoded.values = values  # type: ignore[attr-defined]
    return b"".join(encoded.pieces), encoded


def test_frame_roundtrip_and_batch_end():
    buf, enc = _records(50)
    frames = list(iter_frames(buf))
    assert len(frames) == len(enc.frame_sizes) > 1 and sum(enc.frame_sizes) == len(buf)
    assert [size for _off, size in frames] == enc.frame_sizes.tolist()
    offs = enc.row_offsets.tolist()
    recs = [read_record(buf, o) for o in offs]
    assert [r.value for r in recs] == enc.values
    assert [r.size for r in recs] == enc.record_sizes.tolist()
    assert (
        recs[7].key == "k7" and recs[5].key is None and recs[4].tag is None and recs[3].tag == "tag"
    )
    assert (
        recs[9].partition == 1
        and recs[9].queue_offset == 9
        and recs[9].born_ms == 9
        and recs[9].store_ms == 99
    )
    assert recs[0].producer_id == "prod" and recs[0].sequence == 5
    assert recs[0].msg_id == "a-0a000001-1-0" and recs[0].topic == "topic"
    # every frame decodes to its records in order
    decoded = [rec for off, _size in frames for _row, rec in decode_frame(buf, off)]
    assert decoded == recs
    last_off = frames[-1][0]
    assert frame_flags(buf, last_off) & FLAG_BATCH_END
    assert not frame_flags(buf, frames[-2][0]) & FLAG_BATCH_END
    assert last_batch_end(buf, 0, len(buf) - 1) == 0  # the batch is incomplete
    assert last_batch_end(buf, 0, len(buf)) == len(buf)
    bad = bytearray(buf)
    victim = offs[3]
    bad[victim + 50] ^= 1
    with pytest.raises(CorruptData):
        read_record(bytes(bad), victim)
    end, corrupt = scan_frames(bytes(bad))
    assert end == len(buf) and corrupt == [frames[0][0]]
    end, corrupt = scan_frames(buf[:-5])
    assert end == last_off and corrupt == []


@pytest.mark.parametrize(
    ("keys", "tags", "ids"),
    [
        ([b"key-%04d" % i for i in range(40)], [b"tg"] * 40, [b"t-0a000001-1-%d" % i for i in range(40)]),
        ([b"key\x00%03d\x00" % i for i in range(40)], [None] * 40, [b"t-0a000001-1-%d" % i for i in range(40)]),
        ([None] * 40, [None] * 40, [b"t-0a000001-1-%03d" % (i + 100) for i in range(40)]),
        ([b""] * 40, [b""] * 40, [b"t-0a000001-1-%03d" % (i + 100) for i in range(40)]),
        ([None if i % 2 else b"kk" for i in range(40)], [b"t"] * 40, [b"t-0a000001-1-%d" % i for i in range(40)]),
    ],
)  # fmt: skip
@pytest.mark.parametrize("target", [1, 512, 1 << 20])
def test_frames_of_any_size_hold_every_field(
    keys: list, tags: list, ids: list, target: int
) -> None:
    """One record per frame, a few per frame, or one frame for all: the same records."""
    values = [bytes([i]) * (i * 37 % 200) for i in range(40)]
    enc = encode_frames(
        b"t",
        np.array([i % 3 for i in range(40)]),
        np.arange(40),
        np.full(40, 7),
        9,
        _packed(keys),
        _packed(tags),
        _packed(ids),
        PackedColumn.of_bytes(values, keep_parts=bool(target % 2)),
        None,
        target,
    )
    buf = b"".join(enc.pieces)
    recs = [read_record(buf, o) for o in enc.row_offsets.tolist()]
    assert [r.value for r in recs] == values
    assert [None if r.key is None else r.key.encode() for r in recs] == keys
    assert [None if r.tag is None else r.tag.encode() for r in recs] == tags
    assert [r.msg_id.encode() for r in recs] == ids
    assert {r.producer_id for r in recs} == {None}
    if target == 1:
        assert len(enc.frame_sizes) == 40
    if target == 1 << 20:
        assert len(enc.frame_sizes) == 1


def _naive_chains(hashes: list[int], slots: int) -> dict[int, list[int]]:
    chains: dict[int, list[int]] = {}
    for number, h in enumerate(hashes, start=1):
        chains.setdefault(h % slots, []).insert(0, number)
    return chains


def test_index_file_batches_match_one_by_one_insertion(tmp_path):
    rnd = random.Random(3)
    f = KeyIndexFile.create(str(tmp_path / "ix"), 7, 400, 1000, 0)
    hashes = [rnd.randrange(30) for _ in range(350)]
    i = 0
    while i < len(hashes):
        n = rnd.randint(1, 40)
        chunk = hashes[i : i + n]
        f.add_batch(
            np.array(chunk, dtype=np.uint32),
            np.arange(i, i + len(chunk), dtype=np.uint64) * 10,
            1000,
        )
        i += n
    for slot, expect in _naive_chains(hashes, 7).items():
        got, number = [], int(f.slots[slot])
        while number:
            got.append(number)
            number = int(f.items["prev"][number])
        assert got == expect
    for h in range(30):
        want = [(n - 1) * 10 for n in range(len(hashes), 0, -1) if hashes[n - 1] == h]
        assert list(f.candidates(h, 0, 2**62)) == want
    # sealed → compacted: the same answers, each from one contiguous run
    raw = f.trimmed_bytes()
    comp = compact_key_index_bytes(raw)
    verify_compacted_key_index(raw, comp)
    c = CompactedKeyIndex(len(comp), lambda o, n: comp[o : o + n], check=True)
    for h in range(30):
        assert list(c.candidates(h, 0, 2**62)) == list(f.candidates(h, 0, 2**62))
    bad = bytearray(comp)
    bad[-10] ^= 1
    with pytest.raises(CorruptData):
        verify_compacted_key_index(raw, bytes(bad))
    f.close()


def test_index_file_full_and_truncate_repairs_heads(tmp_path):
    f = KeyIndexFile.create(str(tmp_path / "ix"), 4, 10, 0, 0)
    assert f.add_batch(np.arange(20, dtype=np.uint32), np.arange(20, dtype=np.uint64), 5) == 9
    assert f.full
    f.truncate_to(5)  # items 5..9 forgotten: heads walk back to items < 5
    assert all(int(h) < 5 for h in f.slots)
    f.add_batch(np.array([0, 4], dtype=np.uint32), np.array([100, 101], dtype=np.uint64), 5)
    assert list(f.candidates(0, 0, 2**62)) == [100, 0]
    assert list(f.candidates(4, 0, 2**62)) == [101]  # item 5 (hash 4, pos 4) was forgotten
    assert list(f.candidates(3, 0, 2**62)) == [3]
    path = f.path
    f.close()
    again = KeyIndexFile.open(path)
    assert again.count == 7 and list(again.candidates(4, 0, 2**62)) == [101]
    again.close()
    # sparse items: the default geometry costs its slot table (faulted in up front, 20 MB)
    # and nothing more on disk until items are written
    big = KeyIndexFile.create(str(tmp_path / "big"), 5_000_000, 20_000_000, 0, 0)
    assert os.path.getsize(big.path) > 400_000_000
    assert os.stat(big.path).st_blocks * 512 < 4 * 5_000_000 + 1_000_000
    big.close()


def test_compressed_segment_random_reads(tmp_path):
    raw, _sizes = _records(600, big=300)
    for compress in (True, False):
        comp = compact_segment_bytes(raw, compress)
        verify_compacted_segment(raw, comp)
        assert decompress_all(comp) == raw
        reader = CompressedSegmentReader(len(comp), lambda o, n, c=comp: c[o : o + n])
        assert (reader.index["raw_len"] <= BLOCK_RAW_MAX).sum() == len(reader.index) - 1
        for off in _sizes.row_offsets.tolist()[::37]:
            block, rel = reader.read_at(off)
            assert read_record(block, rel) == read_record(raw, off)
    with pytest.raises(CorruptData):
        verify_compacted_segment(raw[:-1] + bytes([raw[-1] ^ 0xFF]), compact_segment_bytes(raw))
    with pytest.raises(CorruptData):
        compact_segment_bytes(raw[:-3])


def test_queue_index_files_and_truncate(tmp_path):
    q = QueueIndex(str(tmp_path / "q"), 10)
    e = np.zeros(25, dtype=ENTRY_DTYPE)
    e["pos"] = np.arange(25) * 100
    assert q.append(e[:13]) == 0 and q.append(e[13:]) == 13
    assert q.file_starts == []  # held in memory until a sync: still read back
    assert q.read(8, 5)["pos"].tolist() == [800, 900, 1000, 1100, 1200]
    q.append(e[:0])
    q.sync()
    assert len(q.file_starts) == 3
    assert q.read(8, 5)["pos"].tolist() == [800, 900, 1000, 1100, 1200]
    f = np.zeros(3, dtype=ENTRY_DTYPE)
    f["pos"] = [2500, 2600, 2700]
    q.append(f)  # part in files, part in memory
    assert q.read(23, 4)["pos"].tolist() == [2300, 2400, 2500, 2600]
    q.truncate(12)
    assert q.next_offset == 12 and len(q.file_starts) == 2
    q.close()
    q = QueueIndex(str(tmp_path / "q"), 10)
    assert q.next_offset == 12 and q.read(11, 5)["pos"].tolist() == [1100]
    q.close()


def test_message_id_format_and_index(tmp_path):
    mid = parse_msg_id("shop.service-0a010101-431699-1000")
    assert (mid.app, mid.ip, mid.hour, mid.seq) == ("shop.service", 0x0A010101, 431699, 1000)
    assert (
        str(mid)
        == "shop.service-0a010101-431699-1000"
        == format_msg_id("shop.service", 0x0A010101, 431699, 1000)
    )
    assert parse_msg_id("my-app-name-0a010101-1-2").app == "my-app-name"
    for bad in [
        "x",
        "a-b-c",
        "a-0a01010-1-1",
        "a-0a010101--1",
        "..-0a010101-1-1",
        "a/b-0a010101-1-1",
        "a-0a010101-1-1x",
    ]:
        with pytest.raises(InvalidArgument):
            parse_msg_id(bad)
    f = MsgIdIndexFile(str(tmp_path / "h" / "app"))
    f.put_run(7, 4090, np.arange(20, dtype=np.uint64) * 3)  # crosses a segment boundary
    for ip in range(1, 5000, 97):  # more (IP, base) pairs than one unit holds
        f.put(ip, ip * 4096 + 5, ip)
    assert f.get(7, 4090) == 0 and f.get(7, 4109) == 57 and f.get(7, 4110) is None
    assert f.next_seq(7) == 4110
    f.close()
    f = MsgIdIndexFile(str(tmp_path / "h" / "app"))
    assert all(f.get(ip, ip * 4096 + 5) == ip for ip in range(1, 5000, 97))
    assert f.get(8, 0) is None
    f.close()


def test_dir_object_store_ranged_reads(tmp_path):
    objs = open_object_store(str(tmp_path / "o"))
    assert isinstance(objs, DirObjectStore)
    objs.put("a/b/c", b"0123456789")
    src = tmp_path / "src"
    src.write_bytes(b"x" * 100)
    objs.put("a/file", str(src))
    assert objs.get_range("a/b/c", 3, 4) == b"3456" and objs.get_range("a/b/c", 8, 10) == b"89"
    assert objs.size("a/file") == 100 and objs.list("a/") == ["a/b/c", "a/file"]
    objs.delete("a/b/c")
    with pytest.raises(NotFound):
        objs.get("a/b/c")
    for bad in ["../x", "/abs", "a//b", ""]:
        with pytest.raises(InvalidArgument):
            objs.put(bad, b"x")
    assert isinstance(open_object_store("file://" + str(tmp_path / "o2")), DirObjectStore)


def test_queue_index_stored_bytes_follow_appends_drops_truncates_and_reopens(tmp_path):
    sizes = np.arange(1, 26) * 10  # entry i: a record of 10 * (i + 1) bytes
    e = np.zeros(25, dtype=ENTRY_DTYPE)
    e["pos"], e["size"] = np.cumsum(sizes) - sizes, sizes
    q = QueueIndex(str(tmp_path / "q"), 10)
    assert q.stored_bytes() == 0
    q.append(e[:13])
    q.sync()
    assert q.stored_bytes() == int(sizes[:13].sum())  # summed from files and pending entries
    q.append(e[13:])  # kept from here on
    assert q.stored_bytes() == int(sizes.sum())
    q.drop_before(12)  # retention: the first file goes, offsets 10 and 11 are no longer held
    assert q.first_offset == 12 and q.stored_bytes() == int(sizes[12:].sum())
    q.truncate(20)  # recovery cuts the tail
    assert q.stored_bytes() == int(sizes[12:20].sum())
    q.close()
    q = QueueIndex(str(tmp_path / "q"), 10)  # reopened: first_offset is the first file's start
    assert (q.first_offset, q.next_offset) == (10, 20)
    assert q.stored_bytes() == int(sizes[10:20].sum())
    q.drop_before(15)
    assert q.stored_bytes() == int(sizes[15:20].sum())
    q.close()
