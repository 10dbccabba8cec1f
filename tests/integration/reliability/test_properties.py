"""Property tests: hypothesis drives random appends, reads, key and message-ID lookups,
seals, compactions, lifecycle runs (upload to the object store) and restarts against the
store and against a brute-force in-memory model, and every answer must be identical.

The store runs with tiny segments, key-index files and queue files, so a few dozen messages
already cross every rollover, and the messages read right after an append become the model's
truth: every later answer, whatever state (write cache, unsealed, compacted, uploaded, after a
restart) its files are in, must equal them field for field.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from storage_node.errors import NotFound, OffsetOutOfRange
from storage_node.formats.partitioning import partition_for_key
from storage_node.store import MessageIn, Store, TopicConfig

from .model import StoreModel
from .support import small_config

TOPICS = (
    TopicConfig(name="orders", partitions=2, compression="lz4"),
    TopicConfig(name="logs.app-1", partitions=3, compression="none"),
)
TOPIC_NAMES = [t.name for t in TOPICS]
KEYS = [f"k{i}" for i in range(6)] + ["order/17", "клиент-ü"]
TAGS = ["a", "b"]
ID_APPS = ["shop.service", "billing"]
ID_IPS = [0x0A010101, 0x0A010102, 0xC0A80001, 0x7F000001]
HOUR_NOW = int(time.time() * 1000) // 3_600_000
MSG_ID_RE = re.compile(r"^[A-Za-z0-9._-]+-[0-9a-f]{8}-\d+-\d+$")
NODE_IP_HEX = "7f000001"  # small_config keeps the default node_ip 127.0.0.1
VALUE_SIZES = [0, 1, 7, 100, 1000, 5000, 9000]

message_specs = st.fixed_dictionaries(
    {
        "key": st.sampled_from([*KEYS, None]),
        "tag": st.sampled_from([*TAGS, None]),
        "seed": st.integers(0, 2**32 - 1),
        "size": st.sampled_from(VALUE_SIZES),
        "compressible": st.booleans(),
        "supply_id": st.booleans(),
        "partition": st.one_of(st.none(), st.integers(0, 2)),
        "born": st.booleans(),
    }
)


def value_for(seed: int, size: int, compressible: bool) -> bytes:
    rng = random.Random(seed)
    if compressible:
        return (b"msg-%d " % seed * (size // 8 + 1))[:size]
    return rng.randbytes(size)


class StoreMachine(RuleBasedStateMachine):
    """One store, one model; hypothesis picks the operations and shrinks any mismatch."""

    def __init__(self) -> None:
        super().__init__()
        self.workdir = Path(tempfile.mkdtemp(prefix="msgstore-prop-"))
        self.config = small_config(self.workdir / "data")
        self.store: Store | None = None
        self.model = StoreModel()
        self.id_next: dict[tuple[str, int, int], int] = {}
        self.producer_sequence = 0
        self.last_idempotent: tuple | None = None

    @initialize()
    def open_store(self) -> None:
        self.store = Store.open(self.config)
        for topic in TOPICS:
            assert self.store.create_topic(topic) is True
            self.model.add_topic(topic)
        assert self.store.create_topic(TOPICS[0]) is False

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ building blocks

    def supplied_id(self, seed: int) -> str:
        app, ip = ID_APPS[seed % 2], ID_IPS[(seed >> 1) % len(ID_IPS)]
        hour = HOUR_NOW - (seed >> 3) % 2
        slot = (app, ip, hour)
        # Jumps of up to 3000 spread IDs over several 4096-entry index segments.
        seq = self.id_next.get(slot, seed % 5000) + 1 + seed % 3000
        self.id_next[slot] = seq
        return f"{app}-{ip:08x}-{hour}-{seq}"

    def build(self, topic: str, specs: list[dict]) -> list[MessageIn]:
        partitions = self.model.topics[topic].partitions
        now_ms = int(time.time() * 1000)
        return [
            MessageIn(
                value=value_for(s["seed"], s["size"], s["compressible"]),
                key=s["key"],
                tag=s["tag"],
                msg_id=self.supplied_id(s["seed"]) if s["supply_id"] else None,
                timestamp=now_ms - s["seed"] % 86_400_000 if s["born"] else None,
                partition=None if s["partition"] is None else s["partition"] % partitions,
            )
            for s in specs
        ]

    def key_in_use(self, topic: str, pick: float) -> str:
        """A key the topic holds (most lookups should find something), else any key."""
        keys = sorted({m.key for m in self.model.order if m.topic == topic and m.key})
        if not keys:
            return KEYS[0]
        return keys[min(len(keys) - 1, int(pick * len(keys)))]

    # ------------------------------------------------------------------ writes

    append_args = {
        "topic": st.sampled_from(TOPIC_NAMES),
        "specs": st.lists(message_specs, min_size=1, max_size=25),
        "idempotent": st.booleans(),
    }

    # Hypothesis picks rules uniformly: three entry points give appends a fair share of the
    # steps, so keys build long histories across files before they are looked up.
    @rule(**append_args)
    def append(self, topic: str, specs: list[dict], idempotent: bool) -> None:
        self.append_batch(topic, specs, idempotent)

    @rule(**append_args)
    def append_more(self, topic: str, specs: list[dict], idempotent: bool) -> None:
        self.append_batch(topic, specs, idempotent)

    @rule(**append_args)
    def append_even_more(self, topic: str, specs: list[dict], idempotent: bool) -> None:
        self.append_batch(topic, specs, idempotent)

    def append_batch(self, topic: str, specs: list[dict], idempotent: bool) -> None:
        messages = self.build(topic, specs)
        producer = sequence = None
        if idempotent:
            producer, sequence = "producer-1", self.producer_sequence
            self.producer_sequence += 1
        before_ms = int(time.time() * 1000)
        results = self.store.append(topic, messages, producer_id=producer, sequence=sequence)
        after_ms = int(time.time() * 1000)
        assert len(results) == len(messages)

        partitions = self.model.topics[topic].partitions
        next_offsets = {p: self.model.next_offset(topic, p) for p in range(partitions)}
        for message_in, result in zip(messages, results, strict=True):
            if message_in.partition is not None:
                assert result.partition == message_in.partition
            elif message_in.key is not None:
                assert result.partition == partition_for_key(message_in.key, partitions)
            assert 0 <= result.partition < partitions
            assert result.offset == next_offsets[result.partition]
            next_offsets[result.partition] += 1
            if message_in.msg_id is not None:
                assert result.msg_id == message_in.msg_id
            else:
                assert MSG_ID_RE.match(result.msg_id), result.msg_id
                assert result.msg_id.startswith(f"{topic}-{NODE_IP_HEX}-"), result.msg_id
                assert result.msg_id not in self.model.by_msg_id

        for message_in, result in zip(messages, results, strict=True):
            got = self.store.read(topic, result.partition, result.offset, max_messages=1).messages
            assert len(got) == 1
            stored = got[0]
            assert (stored.topic, stored.partition, stored.offset) == (
                topic,
                result.partition,
                result.offset,
            )
            assert (stored.value, stored.key, stored.tag, stored.msg_id) == (
                message_in.value,
                message_in.key,
                message_in.tag,
                result.msg_id,
            )
            assert before_ms - 1 <= stored.store_timestamp <= after_ms + 1
            if message_in.timestamp is not None:
                assert stored.timestamp == message_in.timestamp
            else:
                assert before_ms - 1 <= stored.timestamp <= after_ms + 1
            self.model.add(stored)
        if idempotent:
            self.last_idempotent = (topic, messages, producer, sequence, results)

    @precondition(lambda self: self.last_idempotent is not None)
    @rule()
    def retry_idempotent_batch(self) -> None:
        topic, messages, producer, sequence, results = self.last_idempotent
        again = self.store.append(topic, messages, producer_id=producer, sequence=sequence)
        assert again == results
        # The invariant below then shows that nothing was written.

    @rule(
        group=st.sampled_from(["g1", "group.two"]),
        topic=st.sampled_from(TOPIC_NAMES),
        partition=st.integers(0, 2),
        fraction=st.floats(0, 1),
    )
    def commit_offset(self, group: str, topic: str, partition: int, fraction: float) -> None:
        partition %= self.model.topics[topic].partitions
        offset = round(fraction * self.model.next_offset(topic, partition))
        self.store.commit_offset(group, topic, partition, offset)
        self.model.commit(group, topic, partition, offset)
        assert self.store.committed_offsets(group) == self.model.committed[group]
        assert self.store.committed_offsets(group, topic) == {
            topic: self.model.committed[group][topic]
        }

    # ------------------------------------------------------------------ reads

    @rule(
        topic=st.sampled_from(TOPIC_NAMES),
        partition=st.integers(0, 2),
        fraction=st.floats(0, 1),
        max_messages=st.integers(1, 40),
    )
    def read(self, topic: str, partition: int, fraction: float, max_messages: int) -> None:
        partition %= self.model.topics[topic].partitions
        end = self.model.next_offset(topic, partition)
        offset = round(fraction * end)
        result = self.store.read(topic, partition, offset, max_messages=max_messages)
        expected = self.model.read(topic, partition, offset, max_messages)
        assert result.messages == expected
        assert result.next_offset == offset + len(expected)

    @rule(
        topic=st.sampled_from(TOPIC_NAMES),
        partition=st.integers(0, 2),
        fraction=st.floats(0, 1),
        max_messages=st.integers(1, 40),
        tag=st.sampled_from(TAGS),
    )
    def read_by_tag(
        self, topic: str, partition: int, fraction: float, max_messages: int, tag: str
    ) -> None:
        partition %= self.model.topics[topic].partitions
        end = self.model.next_offset(topic, partition)
        offset = round(fraction * end)
        result = self.store.read(topic, partition, offset, max_messages=max_messages, tag=tag)
        assert offset <= result.next_offset <= end
        if offset < end:
            assert result.next_offset > offset, "a filtered read must make progress"
        scanned = self.model.read(topic, partition, offset, result.next_offset - offset)
        assert result.messages == [m for m in scanned if m.tag == tag]
        assert len(result.messages) <= max_messages

    @rule(topic=st.sampled_from(TOPIC_NAMES), partition=st.integers(0, 2), past=st.integers(1, 5))
    def read_out_of_range(self, topic: str, partition: int, past: int) -> None:
        partition %= self.model.topics[topic].partitions
        end = self.model.next_offset(topic, partition)
        with pytest.raises(OffsetOutOfRange):
            self.store.read(topic, partition, end + past)
        with pytest.raises(OffsetOutOfRange):
            self.store.read(topic, partition, -past)
        assert self.store.read(topic, partition, end).messages == []

    @rule(
        topic=st.sampled_from(TOPIC_NAMES),
        key_pick=st.floats(0, 1),
        max_count=st.integers(1, 40),
    )
    def lookup_key(self, topic: str, key_pick: float, max_count: int) -> None:
        key = self.key_in_use(topic, key_pick)
        result = self.store.lookup_key(topic, key, max_count=max_count)
        matches = self.model.with_key(topic, key)
        assert result.messages == matches[:max_count]
        if len(matches) > max_count:
            assert result.limit_reached
        if len(matches) < max_count:
            assert not result.limit_reached

    @precondition(lambda self: self.model.order)
    @rule(
        topic=st.sampled_from(TOPIC_NAMES),
        key_pick=st.floats(0, 1),
        picks=st.tuples(st.floats(0, 1), st.floats(0, 1)),
        nudge=st.sampled_from([-1, 0, 1]),
    )
    def lookup_key_in_time_range(
        self, topic: str, key_pick: float, picks: tuple[float, float], nudge: int
    ) -> None:
        key = self.key_in_use(topic, key_pick)
        stamps = sorted(m.store_timestamp for m in self.model.order)
        low, high = (stamps[round(p * (len(stamps) - 1))] for p in sorted(picks))
        begin, end = low + nudge, high - nudge
        result = self.store.lookup_key(topic, key, begin_ms=begin, end_ms=end, max_count=10_000)
        matches = self.model.with_key(topic, key)
        # The key index files hold store times; born times equal them unless the producer
        # set one, so either reading of "time range" is accepted, but nothing else.
        by_store = [m for m in matches if begin <= m.store_timestamp <= end]
        by_born = [m for m in matches if begin <= m.timestamp <= end]
        assert result.messages in (by_store, by_born)
        assert not result.limit_reached

    @precondition(lambda self: self.model.order)
    @rule(pick=st.floats(0, 1))
    def get_message(self, pick: float) -> None:
        wanted = self.model.order[round(pick * (len(self.model.order) - 1))]
        assert self.store.get_message(wanted.msg_id) == wanted

    @rule(seed=st.integers(0, 2**20))
    def get_unknown_message(self, seed: int) -> None:
        msg_id = f"{ID_APPS[seed % 2]}-{ID_IPS[seed % 4]:08x}-{HOUR_NOW}-{10**9 + seed}"
        with pytest.raises(NotFound):
            self.store.get_message(msg_id)

    @precondition(lambda self: self.model.order)
    @rule(
        topic=st.sampled_from(TOPIC_NAMES),
        partition=st.integers(0, 2),
        pick=st.floats(0, 1),
        nudge=st.sampled_from([-1, 0, 1]),
    )
    def offset_for_timestamp(self, topic: str, partition: int, pick: float, nudge: int) -> None:
        partition %= self.model.topics[topic].partitions
        stamps = [m.store_timestamp for m in self.model.order]
        ts = stamps[round(pick * (len(stamps) - 1))] + nudge
        expected = self.model.first_offset_at(topic, partition, ts)
        assert self.store.offset_for_timestamp(topic, partition, ts) == expected

    # ------------------------------------------------------------------ file states

    @rule()
    def seal(self) -> None:
        self.store.seal_active()

    @rule()
    def compact(self) -> None:
        self.store.compact_now()
        assert not self.store.sealed_files()

    @rule()
    def lifecycle(self) -> None:
        """Hours later: everything sealed gets compacted and uploaded; nothing expires yet."""
        self.store.run_lifecycle_once(now_ms=int(time.time() * 1000) + 3 * 3_600_000)

    @rule()
    def restart(self) -> None:
        self.store.close()
        self.store = Store.open(self.config)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def offsets_match(self) -> None:
        if self.store is None:
            return
        for name in TOPIC_NAMES:
            assert self.store.partition_offsets(name) == self.model.offsets(name)
        assert sorted(t.name for t in self.store.list_topics()) == sorted(TOPIC_NAMES)


StoreMachine.TestCase.settings = settings(
    # More examples for a soak run: MSGSTORE_PROPERTY_EXAMPLES=500 make test ...
    max_examples=int(os.environ.get("MSGSTORE_PROPERTY_EXAMPLES", "30")),
    stateful_step_count=int(os.environ.get("MSGSTORE_PROPERTY_STEPS", "35")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_store_matches_model = StoreMachine.TestCase
