"""The append path's helpers: packed-batch checks, remembered column ranges, batch key
hashes, numbered IDs and the message-ID index's write-behind, against plain definitions."""

from __future__ import annotations

import numpy as np
import pytest

from storage_node.errors import InvalidBatch, MessageTooLarge
from storage_node.formats.keyhash import key_hash, key_hashes
from storage_node.formats.message_id import MsgIdIndexFile, numbered_ids
from storage_node.formats.packed import PackedBatch, PackedColumn, concat_columns, merge_batches
from storage_node.store import Store, partition_for_key
from storage_node.store.batches import prepare
from storage_node.store.types import TopicConfig

CFG = TopicConfig("orders", 5)


def column(blob: bytes, lens: list[int]) -> PackedColumn:
    return PackedColumn(blob, np.array(lens, dtype=np.int64))


def test_length_range_is_remembered_and_joined() -> None:
    keys = PackedColumn.of_text(["ab", None, "c"], "key")
    assert keys.length_range() == (-1, 2) and not keys.absent()
    assert PackedColumn.empty(3).length_range() == (-1, -1) and PackedColumn.empty(3).absent()
    assert PackedColumn.empty(0).absent()
    joined = concat_columns([PackedColumn.empty(2), PackedColumn.of_text(["xyz"], "key")])
    assert joined.length_range() == (-1, 3) and joined.to_list() == [None, None, b"xyz"]
    # an empty column's range does not narrow the joined one
    joined = concat_columns([PackedColumn.empty(0), PackedColumn.of_text(["xyz", "q"], "k")])
    assert joined.length_range() == (1, 3)
    assert concat_columns([column(b"ab", [2]), column(b"", [-1])]).length_range() == (-1, 2)


@pytest.mark.parametrize(
    "keys",
    [
        ["t0-000000123"],
        [f"t0-{i:09d}" for i in range(300)],  # one length: a matrix product
        [None, "a", "bcd", None, "e"],
        [None, None],
        ["x", "y"],
        ["ключ", "日本語", "k"],
    ],
)
def test_prepare_partitions_and_hashes_match_one_by_one(keys: list[str | None]) -> None:
    batch = PackedBatch.from_lists([b"v"] * len(keys), keys)
    prep = prepare(CFG, batch, None, 1024)
    want = [-1 if k is None else partition_for_key(k, CFG.partitions) for k in keys]
    assert prep.parts.tolist() == want and prep.parts.dtype == np.int64
    hashes = key_hashes(batch.keys.blob, batch.keys.lens).tolist()
    assert hashes == [0 if k is None else key_hash(k) for k in keys]
    if all(k is None for k in keys):
        assert prep.hashes is None and prep.keyed is None
    else:
        assert prep.keyed.tolist() == [k is not None for k in keys]  # type: ignore[union-attr]


def test_merged_batches_keep_given_ids_and_partitions() -> None:
    one = PackedBatch.from_lists([b"a", b"b"], ["k1", None], msg_ids=[None, "app-0a000001-7-3"])
    two = PackedBatch.from_lists([b"c"], ["k2"], tags=["t"], partitions=[4])
    prep = prepare(CFG, merge_batches([one, two]), None, 1024)
    assert prep.parts.tolist() == [partition_for_key("k1", 5), -1, 4]
    assert [(i, str(m)) for i, m in prep.given_ids] == [(1, "app-0a000001-7-3")]


@pytest.mark.parametrize(
    ("values", "keys", "what"),
    [
        (column(b"ab", [2, -1]), None, "every message needs a value"),
        (column(b"abc", [2]), None, "do not add up"),
        (column(b"ab", [1, 1]), column(b"kk", [1, -2]), "lengths must be >= 0"),
        (column(b"ab", [1, 1]), column(b"k", [1]), "one entry per message"),
        (column(b"ab", [1, 1]), column(b"kkk", [1, 1]), "do not add up"),
        (column(b"ab", [1, 1]), column(b"k\xff", [1, 1]), "not valid UTF-8"),
        (column(b"ab", [1, 1]), column("é".encode(), [1, 1]), "message 1: key is not valid"),
        (column(b"ab", [1, 1]), column(b"k" * 70_000, [-1, 70_000]), "message 1: key longer"),
        (column(b"ab", [1, 1]), column(b"k", [1, 0]), "message 1: a key must not be empty"),
    ],
)
def test_bad_packed_batches_are_refused_and_change_nothing(
    store: Store, values: PackedColumn, keys: PackedColumn | None, what: str
) -> None:
    n = len(values.lens)
    batch = PackedBatch(
        values, keys or PackedColumn.empty(n), PackedColumn.empty(n), PackedColumn.empty(n)
    )
    before = store.partition_offsets("orders")
    with pytest.raises(InvalidBatch, match=what):
        store.append_packed("orders", batch)
    assert store.partition_offsets("orders") == before
    assert store.counters["appended_messages"] == 0


def test_too_large_packed_value_names_its_message(store: Store) -> None:
    big = 256 * 1024 + 1
    batch = PackedBatch(
        column(b"a" + b"x" * big, [1, big]),
        PackedColumn.empty(2),
        PackedColumn.empty(2),
        PackedColumn.empty(2),
    )
    with pytest.raises(MessageTooLarge) as caught:
        store.append_packed("orders", batch)
    assert caught.value.details["index"] == 1
    assert store.counters["appended_messages"] == 0


@pytest.mark.parametrize(("first", "n"), [(0, 1), (0, 1200), (9, 2), (95, 30), (10**9 - 7, 9)])
def test_numbered_ids_across_widths(first: int, n: int) -> None:
    ids = numbered_ids(b"app-0a000001-5-", first, n)
    want = [b"app-0a000001-5-%d" % s for s in range(first, first + n)]
    assert ids.to_list() == want
    assert ids.length_range() == (min(map(len, want)), max(map(len, want)))
    assert numbered_ids(b"p-", 5, 0).to_list() == []


def test_message_id_runs_reach_the_file_at_once(tmp_path) -> None:
    """Written when put, not at sync: after a crash of the process the page cache still
    holds them, so IDs of a frame recovery cannot replay still lead to it."""
    path = str(tmp_path / "h" / "app")
    f = MsgIdIndexFile(path)
    f.put_run(7, 4090, np.arange(4, dtype=np.int64) * 10)
    f.put_run(7, 4094, np.arange(4, 8, dtype=np.uint64) * 10)  # crosses a segment boundary
    f.put(9, 0, 5)
    other = MsgIdIndexFile(path)  # a second handle, before any sync or close
    assert [other.get(7, s) for s in range(4089, 4099)] == [None, *range(0, 80, 10), None]
    assert other.get(9, 0) == 5 and other.next_seq(7) == 4098
    other.close()
    f.close()
