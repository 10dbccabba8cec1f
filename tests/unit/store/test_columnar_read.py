"""The columnar read (``Store.read_columns``, and ``Store.read`` built on it) against the
record-at-a-time definition (tests/unit/store/reference_read.py) over random histories: several
topics sharing segments, tags, ``max_bytes`` cut-offs, files in every state (write cache,
unsealed, compacted LZ4, uploaded to the directory object store), restarts; and corrupt
frames, which are reported with their offsets and never served."""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_node.errors import CorruptData, InvalidArgument
from storage_node.store import MessageIn, Store, TopicConfig
from storage_node.store.columnar import Span, SpanMemo, among
from storage_node.store.read_batch import ReadBatch
from storage_node.store.types import Message
from tests.unit.store.conftest import small_config
from tests.unit.store.reference_read import reference_read

TOPICS = (("a", 3, "lz4"), ("b", 1, "lz4"), ("c", 2, "none"))
TAGS = ("red", "blue", "", "grün")
FAR_MS = 10 * 3_600_000  # old enough to upload, too young to expire


def as_messages(batch: ReadBatch) -> list[Message]:
    """Rebuild Message objects from the arrays directly (independent of ``messages()``)."""

    def texts(col) -> list[str | None]:  # noqa: ANN001
        return [None if b is None else b.decode() for b in col.to_list()]

    return [
        Message(batch.topic, batch.partition, o, k, t, i, ts, sts, v)
        for o, k, t, i, ts, sts, v in zip(
            batch.offsets.tolist(),
            texts(batch.keys),
            texts(batch.tags),
            texts(batch.msg_ids),
            batch.timestamps.tolist(),
            batch.store_timestamps.tolist(),
            batch.values.to_list(),
            strict=True,
        )
    ]


def outcome(fn, *args, **kwargs):  # noqa: ANN001, ANN201
    try:
        return ("ok", fn(*args, **kwargs))
    except CorruptData as exc:
        return ("corrupt", exc.details.get("offset"))


def check_reads(s: Store, data: st.DataObject, rounds: int = 6) -> None:
    for _ in range(rounds):
        name, parts, _c = data.draw(st.sampled_from(TOPICS), label="topic")
        p = data.draw(st.integers(0, parts - 1), label="partition")
        first, nxt = s.partition_offsets(name)[p]
        offset = data.draw(st.integers(first, nxt), label="offset")
        max_messages = data.draw(st.sampled_from([1, 2, 7, 100, 10_000]), label="max_messages")
        max_bytes = data.draw(
            st.sampled_from([1, 50, 300, 5000, 20_000, 1 << 20]) | st.integers(1, 100_000),
            label="max_bytes",
        )
        tag = data.draw(st.sampled_from([None, None, *TAGS, "absent"]), label="tag")
        args = (name, p, offset, max_messages, max_bytes, tag)
        want = reference_read(s, *args)
        cols = s.read_columns(*args)
        got = s.read(*args)
        context = f"read{args}: reference {len(want.messages)} -> {want.next_offset}"
        assert as_messages(cols) == want.messages, context
        assert cols.next_offset == want.next_offset, context
        assert got.messages == want.messages, context
        assert got.next_offset == want.next_offset, context
        for col in (cols.keys, cols.tags, cols.msg_ids, cols.values):
            assert len(col.blob) == int(np.maximum(col.lens, 0).sum()), context


def scan_all(s: Store) -> None:
    """Whole partitions, page by page, compared with the definition."""
    for name, parts, _c in TOPICS:
        for p in range(parts):
            first, nxt = s.partition_offsets(name)[p]
            off = first
            while off < nxt:
                want = reference_read(s, name, p, off, 97, 4000)
                got = s.read_columns(name, p, off, 97, 4000)
                assert as_messages(got) == want.messages, (name, p, off)
                assert got.next_offset == want.next_offset > off
                off = got.next_offset


message = st.tuples(
    st.integers(0, 400) | st.integers(0, 40_000),  # value size: mostly small, some large
    st.none() | st.sampled_from(["k1", "k2", "ключ", "k", "long-key-" * 40]),
    st.none() | st.sampled_from(TAGS),
    st.none() | st.integers(0, 2),  # partition
)
step = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.lists(message, min_size=1, max_size=150)),
    st.tuples(st.sampled_from(["seal", "compact", "upload", "restart", "flush", "read"])),
)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    steps=st.lists(step, min_size=3, max_size=30),
    cached=st.booleans(),
    data=st.data(),
)
def test_columnar_read_matches_definition(steps, cached, data) -> None:  # noqa: ANN001
    with tempfile.TemporaryDirectory() as tmp:
        # ``cached``: appends stay in the write cache until a flush or a seal
        overrides = {"flush_max_age_ms": 60_000, "flush_max_messages": 1_000_000} if cached else {}
        config = small_config(os.path.join(tmp, "d"), **overrides)
        s = Store.open(config)
        try:
            for name, parts, compression in TOPICS:
                s.create_topic(TopicConfig(name, parts, compression))
            serial = 0
            for st_ in steps:
                kind = st_[0]
                if kind == "append":
                    name, parts, _c = TOPICS[st_[1]]
                    batch = []
                    for size, key, tag, part in st_[2]:
                        serial += 1
                        value = (b"%d:" % serial + b"x" * size)[: max(size, 1)]
                        batch.append(
                            MessageIn(
                                value,
                                key=key,
                                tag=tag,
                                partition=None if part is None else part % parts,
                            )
                        )
                    s.append(name, batch)
                elif kind == "seal":
                    s.seal_active()
                elif kind == "compact":
                    s.compact_now()
                elif kind == "upload":
                    s.run_lifecycle_once(now_ms=int(time.time() * 1000) + FAR_MS)
                elif kind == "restart":
                    s.close()
                    s = Store.open(config)
                elif kind == "flush":
                    s.log.flush()
                else:
                    check_reads(s, data, rounds=2)
            check_reads(s, data)
            scan_all(s)
        finally:
            s.close()


def _filled(tmp: str, compression: str = "none") -> tuple[Store, list]:
    s = Store.open(small_config(os.path.join(tmp, "d")))
    s.create_topic(TopicConfig("t", 1, compression))
    s.create_topic(TopicConfig("u", 1, compression))
    res = []
    for b in range(12):
        res += s.append("t", [MessageIn(b"%d-%d" % (b, i) * 20, key="k") for i in range(30)])
        s.append("u", [MessageIn(b"other" * 30) for _ in range(10)])
    s.seal_active()
    return s, res


def _flip_in_frame_of(s: Store, offset: int) -> int:
    """Flip one byte of the value of partition t/0's ``offset`` in its segment file; returns
    the offset's log position."""
    ((pos, _size, _tag),) = s.queue("t", 0).entries(offset, 1)
    rec = s.log.read(pos)
    seg_start = max(x for x in s.log.starts if x <= pos)
    seg = s.log.segments[seg_start]
    assert seg.state == "unsealed"
    s.log._frames = []  # the frame cache must not hide the damage
    # the value of the record is somewhere after its row: find its bytes in the file
    with open(seg.path, "r+b") as fh:
        raw = fh.read()
        at = raw.index(rec.value, pos - seg_start)
        fh.seek(at + 3)
        fh.write(bytes([raw[at + 3] ^ 0x40]))
    return pos


def test_corrupt_frame_is_reported_with_offsets_never_served() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        s, _res = _filled(tmp)
        try:
            good = s.read_columns("t", 0, 0, max_messages=10_000, max_bytes=1 << 30)
            assert len(good) == 360
            _flip_in_frame_of(s, 200)
            with pytest.raises(CorruptData) as caught:
                s.read_columns("t", 0, 0, max_messages=10_000, max_bytes=1 << 30)
            details = caught.value.details
            first, last = details["first_offset"], details["last_offset"]
            assert first <= 200 <= last, details
            assert f"offsets {first}..{last}" in caught.value.message
            with pytest.raises(CorruptData):
                reference_read(s, "t", 0, 0, max_messages=10_000, max_bytes=1 << 30)
            # the rows before the damaged frame are served when the read stops before it
            before = s.read_columns("t", 0, 0, max_messages=first)
            assert before.next_offset == first and len(before) == first
            assert as_messages(before) == reference_read(s, "t", 0, 0, max_messages=first).messages
            # ... and so are the rows after it
            after = s.read_columns("t", 0, last + 1, max_messages=10_000)
            assert after.offsets.tolist() == list(range(last + 1, 360))
            # never served record by record either
            with pytest.raises(CorruptData):
                s.read("t", 0, 200, max_messages=1)
        finally:
            s.close()


def test_corrupt_compacted_block_is_reported_never_served() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        s, _res = _filled(tmp, "lz4")
        try:
            want = s.read_columns("t", 0, 0, max_messages=10_000)
            s.compact_now()
            assert as_messages(s.read_columns("t", 0, 0, max_messages=10_000)) == as_messages(want)
            s.close()
            compacted = os.path.join(s.root, "commitlog", "compacted")
            name = sorted(os.listdir(compacted))[0]
            with open(os.path.join(compacted, name), "r+b") as fh:
                fh.seek(40)  # inside the first block
                b = fh.read(1)
                fh.seek(40)
                fh.write(bytes([b[0] ^ 0xFF]))
            s = Store.open(small_config(os.path.join(tmp, "d")))
            with pytest.raises(CorruptData) as caught:
                s.read_columns("t", 0, 0, max_messages=10_000)
            assert caught.value.details["offset"] == 0
            with pytest.raises(CorruptData):
                reference_read(s, "t", 0, 0, max_messages=10_000)
        finally:
            s.close()


def test_max_bytes_cut_after_several_steps() -> None:
    """Small values behind long keys: the first step's estimate (entry bytes) reaches only a
    part of ``max_bytes``, so the cut falls in a later step."""
    with tempfile.TemporaryDirectory() as tmp:
        s = Store.open(small_config(os.path.join(tmp, "d")))
        try:
            s.create_topic(TopicConfig("t", 1))
            for _b in range(20):
                s.append("t", [MessageIn(b"v%d" % i * 3, key="k" * 300) for i in range(50)])
            for max_bytes in (1, 10, 100, 555, 1000, 2345, 4000):
                for offset in (0, 17, 499):
                    want = reference_read(s, "t", 0, offset, 10_000, max_bytes)
                    got = s.read_columns("t", 0, offset, 10_000, max_bytes)
                    assert as_messages(got) == want.messages, (max_bytes, offset)
                    assert got.next_offset == want.next_offset, (max_bytes, offset)
                    assert len(got) > 1 or max_bytes < 20
        finally:
            s.close()


def test_read_columns_shapes_and_errors() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        s, res = _filled(tmp)
        try:
            page = s.read_columns("t", 0, 5, max_messages=3)
            assert page.offsets.dtype == np.int64 and page.offsets.tolist() == [5, 6, 7]
            assert page.keys.lens.tolist() == [1, 1, 1] and bytes(page.keys.blob) == b"kkk"
            assert page.tags.lens.tolist() == [-1, -1, -1]
            assert page.msg_ids.to_list() == [r.msg_id.encode() for r in res[5:8]]
            assert page.next_offset == 8
            empty = s.read_columns("t", 0, 360)
            assert len(empty) == 0 and empty.next_offset == 360
            from storage_node.errors import InvalidArgument, OffsetOutOfRange

            with pytest.raises(OffsetOutOfRange):
                s.read_columns("t", 0, 361)
            with pytest.raises(InvalidArgument):
                s.read_columns("t", 0, 0, max_messages=0)
            with pytest.raises(InvalidArgument):
                s.read_columns("t", 0, 0, tag=b"x")  # type: ignore[arg-type]
        finally:
            s.close()


def test_reads_racing_appends_see_whole_consistent_prefixes() -> None:
    """A reader scanning while a writer appends (flushing now and then, sealing, compacting)
    always gets consecutive offsets whose values are exactly what was appended there."""
    import threading

    with tempfile.TemporaryDirectory() as tmp:
        s = Store.open(small_config(os.path.join(tmp, "d"), flush_max_age_ms=2))
        s.create_topic(TopicConfig("t", 1))
        s.create_topic(TopicConfig("u", 1))
        stop = threading.Event()
        errors: list[BaseException] = []

        def write() -> None:
            try:
                for b in range(150):
                    s.append(
                        "t", [MessageIn(b"t-%d-%d|" % (b, i) + b"v" * (i % 50)) for i in range(20)]
                    )
                    s.append("u", [MessageIn(b"noise" * 7) for _ in range(5)])
                    if b % 40 == 39:
                        s.compact_now()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
            finally:
                stop.set()

        writer = threading.Thread(target=write)
        writer.start()
        reads = 0
        try:
            while not stop.is_set() or reads < 5:
                offset = 0
                while True:
                    page = s.read_columns("t", 0, offset, max_messages=333, max_bytes=9000)
                    if not len(page):
                        break
                    offsets = page.offsets.tolist()
                    assert offsets == list(range(offset, offset + len(offsets))), offsets[:5]
                    for o, v in zip(offsets, page.values.to_list(), strict=True):
                        b, i = divmod(o, 20)
                        assert v == b"t-%d-%d|" % (b, i) + b"v" * (i % 50), (o, v)
                    offset = page.next_offset
                reads += 1
        finally:
            writer.join()
            s.close()
        assert not errors, errors
        assert reads >= 5


def test_fetch_columns_answers_each_partition_as_its_own_read() -> None:
    """``Reads.fetch_columns`` reads several partitions through one memo of checked spans
    (their rows share frames): each page equals that partition's own ``read_columns``, in
    every file state, and a damaged frame is reported as the single read reports it."""
    with tempfile.TemporaryDirectory() as tmp:
        s = Store.open(small_config(os.path.join(tmp, "d")))
        try:
            s.create_topic(TopicConfig("m", 3, "lz4"))
            s.create_topic(TopicConfig("o", 1, "none"))
            for b in range(30):
                batch = [MessageIn(b"%d-%d" % (b, i) * (1 + i % 9), key=f"k{i}") for i in range(40)]
                s.append("m", batch)
                s.append("o", [MessageIn(b"other")])
                if b == 10:
                    s.seal_active()
                    s.compact_now()
            ends = s.partition_offsets("m")
            for limits in ((10_000, 1 << 30), (7, 1 << 20), (500, 300)):
                for starts in ({0: 0, 1: 0, 2: 0}, {2: 5, 0: None}, {1: ends[1][1]}):
                    pages = s.reads.fetch_columns("m", starts, *limits)
                    assert list(pages) == list(starts)
                    for p, offset in starts.items():
                        first = ends[p][0] if offset is None else offset
                        alone = s.read_columns("m", p, first, *limits)
                        assert as_messages(pages[p]) == as_messages(alone), (p, limits)
                        assert pages[p].next_offset == alone.next_offset
            with pytest.raises(InvalidArgument):
                s.reads.fetch_columns("m", {3: 0})
        finally:
            s.close()
    with tempfile.TemporaryDirectory() as tmp:
        s, _res = _filled(tmp)
        try:
            _flip_in_frame_of(s, 200)
            with pytest.raises(CorruptData) as alone:
                s.read_columns("t", 0, 0, max_messages=10_000, max_bytes=1 << 30)
            with pytest.raises(CorruptData) as fetched:
                s.reads.fetch_columns("t", {0: 0}, 10_000, 1 << 30)
            assert fetched.value.details == alone.value.details
        finally:
            s.close()


@given(
    st.lists(st.integers(0, 60), max_size=30),
    st.lists(st.integers(0, 60), max_size=30),
)
def test_among_is_membership_in_a_sorted_pool(values: list[int], pool: list[int]) -> None:
    """The frames already checked in a span are found by binary search: the same answer as
    ``np.isin``, for values before, inside and past the pool, and for an empty pool."""
    sorted_pool = np.unique(np.array(pool, dtype=np.int64))
    got = among(np.array(values, dtype=np.int64), sorted_pool)
    assert got.dtype == bool
    assert got.tolist() == np.isin(values, sorted_pool).tolist()


def test_reads_sharing_a_memo_read_the_log_once_and_answer_as_alone() -> None:
    """``Store.read_columns(..., memo=)`` (the Kafka Fetch's reads of one request): the
    partitions of batches written together lie in the same frames, so with one memo the
    second partition's read finds every span it needs already fetched and checked, and each
    page equals that partition's read alone."""
    with tempfile.TemporaryDirectory() as tmp:
        s = Store.open(small_config(os.path.join(tmp, "d")))
        try:
            s.create_topic(TopicConfig("m", 2, "lz4"))
            for b in range(20):  # one batch holds rows of both partitions
                s.append(
                    "m", [MessageIn(b"%d-%d" % (b, i) * 9, partition=i % 2) for i in range(60)]
                )
            s.seal_active()
            fetched: list[int] = []
            span = s.log.span

            def counted(pos: int, want_end: int):  # noqa: ANN202 - the log's own signature
                fetched.append(pos)
                return span(pos, want_end)

            s.log.span = counted  # type: ignore[method-assign]
            memo = SpanMemo()
            first = s.read_columns("m", 0, 0, 10_000, 1 << 30, memo=memo)
            after_first = len(fetched)
            second = s.read_columns("m", 1, 0, 10_000, 1 << 30, memo=memo)
            assert after_first > 0 and len(fetched) == after_first  # nothing read again
            alone = s.read_columns("m", 1, 0, 10_000, 1 << 30)
            assert len(fetched) > after_first  # without the memo the log is read
            assert as_messages(second) == as_messages(alone) and len(second) == 600
            assert as_messages(first) == as_messages(s.read_columns("m", 0, 0, 10_000, 1 << 30))
        finally:
            s.close()


def test_a_memo_kept_across_a_cut_of_the_log_serves_the_new_bytes() -> None:
    """A memo kept from one request to the next (a Kafka connection's Fetches) holds log
    bytes by position; a follower's log cut back (``truncate_to``) and written again holds
    other bytes at the same positions, so the kept memo must not serve the old ones."""
    with tempfile.TemporaryDirectory() as tmp:
        s = Store.open(small_config(os.path.join(tmp, "d")))
        try:
            s.create_topic(TopicConfig("m", 2, "none"))
            s.append("m", [MessageIn(b"base-%d" % i, partition=i % 2) for i in range(10)])
            cut_at = s.log_ends().end
            s.append("m", [MessageIn(b"old-%03d" % i, partition=i % 2) for i in range(40)])
            memo = SpanMemo()
            before = s.read_columns("m", 0, 0, 10_000, 1 << 30, memo=memo)
            assert b"old-000" in before.values.to_list()
            cut_log = s.log
            assert s.truncate_to(cut_at)
            assert cut_log.cuts == 1  # the log object cut (the store reads a rebuilt one)
            s.append("m", [MessageIn(b"new-%03d" % i, partition=i % 2) for i in range(40)])
            kept = s.read_columns("m", 0, 0, 10_000, 1 << 30, memo=memo)
            alone = s.read_columns("m", 0, 0, 10_000, 1 << 30)
            assert as_messages(kept) == as_messages(alone)
            assert b"new-000" in kept.values.to_list() and b"old-000" not in kept.values.to_list()
        finally:
            s.close()


def test_a_memo_trimmed_keeps_the_spans_used_last() -> None:
    """``SpanMemo.trim`` drops the least recently used buffers first (a span found again is
    the most recent), and keeps at least one while the bound is positive."""
    memo = SpanMemo()
    spans = [memo.add(Span.of(i * 100, bytes(100), "test")) for i in range(4)]
    assert memo.find(50) is spans[0]  # used again: now the most recent
    memo.trim(250)
    assert [sp.lo for sp in memo.spans] == [300, 0] and memo.size == 200
    memo.trim(10)
    assert [sp.lo for sp in memo.spans] == [0] and memo.size == 100
    memo.trim(0)
    assert memo.spans == [] and memo.size == 0
