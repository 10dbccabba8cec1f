"""Bad input raises a clear, typed error and changes nothing.

A store with data, sealed files, committed offsets and topics is snapshotted (every file's
size and SHA-256, every path under the test folder, the topic list, partition offsets and
committed offsets); each bad call must raise its documented error class and leave that
snapshot exactly as it was. Afterwards the store still accepts and serves good input.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from storage_node.errors import (
    CorruptData,
    InvalidArgument,
    InvalidName,
    MessageTooLarge,
    MsgStoreError,
    NotFound,
    OffsetOutOfRange,
    TopicConflict,
    UnknownTopic,
)
from storage_node.formats.limits import MAX_PARTITIONS
from storage_node.store import MessageIn, Store, TopicConfig

from .support import KIB, dir_listing, small_config, tree_snapshot

TOPIC = "orders"
MAX_MESSAGE = 32 * KIB
BAD_NAMES = [
    "a/b",
    "../evil",
    "..",
    ".",
    "a\\b",
    "",
    "/abs",
    "x" * 201,
    "a\x00b",
    "sp ace",
    "new\nline",
]


def create_named_topic(name: str, store: Store) -> object:
    return store.create_topic(TopicConfig(name=name, partitions=1))


def commit_for_group(group: str, store: Store) -> object:
    return store.commit_offset(group, TOPIC, 0, 0)


def good(value: bytes = b"ok", **fields: object) -> MessageIn:
    return MessageIn(value=value, **fields)


BadCall = Callable[[Store], object]

CASES: list[tuple[str, BadCall, type[MsgStoreError] | tuple[type[MsgStoreError], ...]]] = [
    # oversized messages, alone or hidden in a batch of good ones
    (
        "oversized",
        lambda s: s.append(TOPIC, [good(b"x" * (MAX_MESSAGE + 1))]),
        MessageTooLarge,
    ),
    (
        "oversized-in-batch",
        lambda s: s.append(TOPIC, [good(), good(key="k"), good(b"x" * (MAX_MESSAGE + 1)), good()]),
        MessageTooLarge,
    ),
    # unknown topics
    ("append-unknown-topic", lambda s: s.append("nope", [good()]), UnknownTopic),
    ("read-unknown-topic", lambda s: s.read("nope", 0, 0), UnknownTopic),
    ("lookup-unknown-topic", lambda s: s.lookup_key("nope", "k"), UnknownTopic),
    ("offsets-unknown-topic", lambda s: s.partition_offsets("nope"), UnknownTopic),
    ("get-unknown-topic", lambda s: s.get_topic("nope"), UnknownTopic),
    ("time-unknown-topic", lambda s: s.offset_for_timestamp("nope", 0, 0), UnknownTopic),
    ("commit-unknown-topic", lambda s: s.commit_offset("g", "nope", 0, 0), UnknownTopic),
    # topic definitions
    *[
        (
            f"topic-name-{i}",
            functools.partial(create_named_topic, name),
            InvalidName,
        )
        for i, name in enumerate(BAD_NAMES)
    ],
    (
        "topic-partitions-0",
        lambda s: s.create_topic(TopicConfig(name="p0", partitions=0)),
        InvalidArgument,
    ),
    (
        "topic-partitions-over-the-limit",
        lambda s: s.create_topic(TopicConfig(name="p-over", partitions=MAX_PARTITIONS + 1)),
        InvalidArgument,
    ),
    (
        "topic-compression",
        lambda s: s.create_topic(TopicConfig(name="zz", partitions=1, compression="zip")),
        InvalidArgument,
    ),
    (
        "topic-conflict",
        lambda s: s.create_topic(TopicConfig(name=TOPIC, partitions=3)),
        TopicConflict,
    ),
    # consumer groups with path tricks
    *[
        (
            f"group-name-{i}",
            functools.partial(commit_for_group, name),
            InvalidName,
        )
        for i, name in enumerate(["../g", "g/h", "..", "", "a\\b"])
    ],
    ("commit-partition", lambda s: s.commit_offset("g", TOPIC, 7, 0), InvalidArgument),
    ("commit-negative", lambda s: s.commit_offset("g", TOPIC, 0, -1), InvalidArgument),
    # offsets and partitions out of range
    ("read-past-end", lambda s: s.read(TOPIC, 0, 10_000), OffsetOutOfRange),
    ("read-negative", lambda s: s.read(TOPIC, 0, -1), OffsetOutOfRange),
    ("read-partition", lambda s: s.read(TOPIC, 2, 0), InvalidArgument),
    ("read-partition-negative", lambda s: s.read(TOPIC, -1, 0), InvalidArgument),
    ("read-max-messages", lambda s: s.read(TOPIC, 0, 0, max_messages=-1), InvalidArgument),
    ("time-partition", lambda s: s.offset_for_timestamp(TOPIC, 9, 0), InvalidArgument),
    ("lookup-max-count", lambda s: s.lookup_key(TOPIC, "k", max_count=-1), InvalidArgument),
    # malformed messages and batches
    ("append-partition", lambda s: s.append(TOPIC, [good(), good(partition=2)]), InvalidArgument),
    ("append-partition-neg", lambda s: s.append(TOPIC, [good(partition=-1)]), InvalidArgument),
    ("append-bad-msgid", lambda s: s.append(TOPIC, [good(msg_id="not-an-id")]), InvalidArgument),
    (
        "append-msgid-path",
        lambda s: s.append(TOPIC, [good(msg_id="../../x-0a000001-480000-1")]),
        InvalidArgument,
    ),
    (
        "append-str-value",
        lambda s: s.append(TOPIC, [good(), MessageIn(value="text")]),
        InvalidArgument,
    ),
    # message IDs
    ("get-malformed-id", lambda s: s.get_message("garbage"), InvalidArgument),
    ("get-path-id", lambda s: s.get_message("../x-0a000001-480000-1"), InvalidArgument),
    ("get-slash-id", lambda s: s.get_message("a/b-0a000001-480000-1"), InvalidArgument),
    ("get-unknown-id", lambda s: s.get_message("orders-0a000001-480000-99999"), NotFound),
    # remote compaction hand-over
    (
        "open-sealed-path",
        lambda s: s.open_sealed("segment", "../../topics.json"),
        (InvalidArgument, NotFound),
    ),
    ("open-sealed-kind", lambda s: s.open_sealed("passwd", "x"), (InvalidArgument, NotFound)),
    (
        "commit-compacted-garbage",
        lambda s: commit_garbage(s),
        (InvalidArgument, CorruptData),
    ),
    (
        "commit-compacted-crc",
        lambda s: commit_wrong_crc(s),
        (InvalidArgument, CorruptData),
    ),
]


def commit_garbage(store: Store) -> object:
    sealed = store.sealed_files()
    assert sealed, "the fixture leaves sealed files to compact"
    data = b"definitely not a compacted file" * 10
    return store.commit_compacted(sealed[0].kind, sealed[0].name, data, zlib.crc32(data))


def commit_wrong_crc(store: Store) -> object:
    """A real rewrite of a sealed file, sent with the wrong checksum."""
    from storage_node.formats.compressed import compact_segment_bytes
    from storage_node.formats.key_index_compacted import compact_key_index_bytes

    sealed = store.sealed_files()[0]
    raw = store.open_sealed(sealed.kind, sealed.name)
    rewrite = compact_segment_bytes if sealed.kind == "segment" else compact_key_index_bytes
    data = rewrite(raw)
    return store.commit_compacted(sealed.kind, sealed.name, data, zlib.crc32(data) ^ 1)


def state_of(store: Store, root: Path) -> dict[str, object]:
    return {
        "files": tree_snapshot(root / "data"),
        "paths": dir_listing(root),
        "topics": sorted((t.name, t.partitions) for t in store.list_topics()),
        "offsets": store.partition_offsets(TOPIC),
        "committed": store.committed_offsets("g"),
    }


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("bad-input")
    # no periodic checkpoint while the module runs (it takes longer than the default 10 s
    # under load): its temporary file would show up in a state taken at that moment
    store = Store.open(
        small_config(root / "data", max_message_bytes=MAX_MESSAGE, checkpoint_interval_s=3600)
    )
    store.create_topic(TopicConfig(name=TOPIC, partitions=2))
    for batch in range(4):
        store.append(TOPIC, [good(b"v%d-%d" % (batch, i) * 50, key=f"k{i}") for i in range(40)])
        store.seal_active()
    store.commit_offset("g", TOPIC, 0, 3)
    assert store.sealed_files()
    store.checkpoint()  # index entries held in memory reach their files now, not mid-test
    store.keyidx.prepare_spare()  # the next key-index file too (else made in the background)
    yield store, root
    store.close()


@pytest.mark.parametrize(("name", "call", "error"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_typed_error_and_changes_nothing(populated, name, call, error) -> None:
    store, root = populated
    before = state_of(store, root)
    with pytest.raises(error) as raised:
        call(store)
    assert raised.value.code and raised.value.message, "the error names the problem"
    assert 400 <= raised.value.status < 500 or isinstance(raised.value, CorruptData)
    assert state_of(store, root) == before


def test_store_still_serves_after_bad_input(populated) -> None:
    store, _root = populated
    first, nxt = store.partition_offsets(TOPIC)[0]
    result = store.append(TOPIC, [good(b"after", partition=0, key="after")])
    assert result[0].offset == nxt
    assert store.read(TOPIC, 0, nxt).messages[0].value == b"after"
    assert store.lookup_key(TOPIC, "after").messages[0].value == b"after"
    assert store.get_message(result[0].msg_id).value == b"after"
    assert first == 0
