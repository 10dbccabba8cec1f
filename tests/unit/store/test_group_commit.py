"""Group commit: batches that wait for the append lock are written together, and each still
gets exactly its own results, errors, frames and idempotency entry.

The test holds the append lock while producer threads queue their batches, so the grouping
is certain rather than left to thread timing.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from storage_node.errors import InvalidBatch
from storage_node.store import AppendColumns, Store, TopicConfig

from .conftest import small_config


def grouped(
    store: Store, calls: list, in_order: bool = False
) -> list[AppendColumns | BaseException]:
    """Run ``calls`` (append_columns argument dicts) on threads queued behind the lock
    (``in_order``: each queued before the next starts, so the group keeps their order)."""
    out: list[AppendColumns | BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = store.append_columns(**calls[i])
        except BaseException as exc:  # the test inspects it
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    with store._lock:
        for i, t in enumerate(threads):
            t.start()
            deadline = time.monotonic() + 10
            want = i + 1 if in_order else 0
            while store.group_commit.queued() < want and time.monotonic() < deadline:
                time.sleep(0.001)
        deadline = time.monotonic() + 10
        while store.group_commit.queued() < len(calls) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert store.group_commit.queued() == len(calls), "the producers did not queue up"
    for t in threads:
        t.join()
    return out  # type: ignore[return-value]


def test_grouped_batches_get_their_own_results(store: Store) -> None:
    store.create_topic(TopicConfig("audit", 2))
    calls = [
        {"topic": "orders", "values": [b"a%d" % i for i in range(5)], "keys": ["k"] * 5},
        {"topic": "audit", "values": [b"x", b"y"]},
        {"topic": "orders", "values": [b"b%d" % i for i in range(3)], "producer_id": "p",
         "sequence": 1},
        {"topic": "orders", "values": [b"c"], "tags": ["t"]},
    ]  # fmt: skip
    before = store.counters["append_batches"]
    results = grouped(store, calls)
    assert store.counters["append_batches"] == before + 4
    for call, done in zip(calls, results, strict=True):
        assert isinstance(done, AppendColumns) and len(done) == len(call["values"])
        for i, msg_id in enumerate(done.msg_ids):
            got = store.get_message(msg_id)
            assert (got.topic, got.value) == (call["topic"], call["values"][i])
            assert (got.partition, got.offset) == (done.partitions[i], done.offsets[i])
    assert len({m for d in results for m in d.msg_ids}) == 11  # type: ignore[union-attr]


def test_a_bad_batch_fails_alone(store: Store) -> None:
    calls = [
        {"topic": "orders", "values": [b"good-1"]},
        {"topic": "orders", "values": [b"bad"], "partitions": [7]},
        {"topic": "orders", "values": [b"good-2"], "keys": ["k"]},
    ]
    results = grouped(store, calls)
    assert isinstance(results[1], InvalidBatch)
    assert all(isinstance(results[i], AppendColumns) for i in (0, 2))
    assert sum(n for _f, n in store.partition_offsets("orders")) == 2
    assert store.get_message(results[2].msg_ids[0]).value == b"good-2"  # type: ignore[union-attr]


def test_list_batches_packed_together_keep_their_own_columns(store: Store) -> None:
    """Lists of a group are packed in one go by the writer: a column one producer gave and
    another did not stays absent for the other's messages (not empty, not shifted)."""
    calls = [
        {"topic": "orders", "values": [b"a0", b"a1"], "keys": ["ka0", None]},
        {"topic": "orders", "values": [b"b0"], "tags": ["tb0"], "timestamps": [1234]},
        {"topic": "orders", "values": [b"c0", b"c1", b"c2"], "partitions": [2, None, 0],
         "msg_ids": [None, "shop.app-0a000001-400000-7", None]},
        {"topic": "orders", "values": [b"d0"], "keys": ["k"], "tags": [""]},
    ]  # fmt: skip
    results = grouped(store, calls)
    got = {}
    for done in results:
        assert isinstance(done, AppendColumns)
        for msg_id in done.msg_ids:
            m = store.get_message(msg_id)
            got[m.value] = (m.key, m.tag, m.timestamp == 1234, m.partition, m.msg_id)
    assert got[b"a0"][:3] == ("ka0", None, False) and got[b"a1"][:2] == (None, None)
    assert got[b"b0"][:3] == (None, "tb0", True)
    assert got[b"c0"][3] == 2 and got[b"c2"][3] == 0
    assert got[b"c1"][4] == "shop.app-0a000001-400000-7"
    assert got[b"c0"][:2] == (None, None)
    assert got[b"d0"][:2] == ("k", "")  # an empty tag: empty, and present
    assert store.lookup_key("orders", "ka0").messages[0].value == b"a0"


def test_a_bad_list_batch_in_a_group_gets_its_own_index(store: Store) -> None:
    """Contents of lists are checked when the group is packed; a bad one fails alone, its
    error naming the message's index in its own batch, not in the group."""
    calls = [
        {"topic": "orders", "values": [b"g0", b"g1", b"g2"]},
        {"topic": "orders", "values": [b"x0", b"x1", "not bytes"]},
        {"topic": "orders", "values": [b"h0"], "keys": [7]},
        {"topic": "orders", "values": [b"i0", b"i1"], "keys": ["k0", "k1"]},
    ]
    before = sum(n for _f, n in store.partition_offsets("orders"))
    results = grouped(store, calls)
    assert isinstance(results[1], InvalidBatch) and results[1].details["index"] == 2
    assert isinstance(results[2], InvalidBatch) and results[2].details["index"] == 0
    assert "key" in str(results[2])
    assert isinstance(results[0], AppendColumns) and isinstance(results[3], AppendColumns)
    assert sum(n for _f, n in store.partition_offsets("orders")) == before + 5
    assert store.lookup_key("orders", "k1").messages[0].value == b"i1"


def test_the_same_batch_twice_in_one_group_is_written_once(config, store: Store) -> None:
    call = {"topic": "orders", "values": [b"once", b"twice?"], "producer_id": "dup",
            "sequence": 4}  # fmt: skip
    first, second = grouped(store, [call, dict(call)])
    assert first == second
    assert sum(n for _f, n in store.partition_offsets("orders")) == 2
    store.close()
    with Store.open(config) as reopened:  # the idempotency entry survives a restart
        again = reopened.append_columns(**call)
        assert again == first
        assert sum(n for _f, n in reopened.partition_offsets("orders")) == 2


@pytest.mark.parametrize("flush_mode", ["sync", "async"])
def test_a_crash_keeps_whole_batches_of_a_group(tmp_path, flush_mode: str) -> None:
    """Each batch of a group ends its own frames: recovery replays every one of them, with
    its producer's idempotency entry."""
    config = small_config(tmp_path / "d", flush_mode=flush_mode)
    store = Store.open(config)
    store.create_topic(TopicConfig("orders", 3))
    calls = [
        {"topic": "orders", "values": [b"v%d-%d" % (p, i) for i in range(40)],
         "producer_id": f"p{p}", "sequence": 0}
        for p in range(4)
    ]  # fmt: skip
    results = grouped(store, calls)
    store.close()
    # as after a crash: no clean flag, no checkpoint position, no saved idempotency table,
    # so the next open rebuilds everything from the frames in the log
    path = tmp_path / "d" / "checkpoint"
    ck = json.loads(path.read_text())
    ck.update(clean=False, log_end=0, queues={}, key_index_name=None, key_index_count=1)
    path.write_text(json.dumps(ck))
    (tmp_path / "d" / "producers.json").unlink()
    with Store.open(config) as reopened:
        assert reopened.recovery_report["replayed_records"] == 160
        for call, done in zip(calls, results, strict=True):
            assert reopened.append_columns(**call) == done  # answered from the replayed table
            assert [reopened.get_message(m).value for m in done.msg_ids] == call["values"]  # type: ignore[union-attr]


@pytest.mark.parametrize("flush_mode", ["sync", "async"])
def test_producers_racing_a_close_all_get_an_answer(tmp_path, flush_mode: str) -> None:
    """Eight producers append in a loop while the store closes under them: every one of them
    gets its answer (a result or Unavailable) and returns, whoever was leading a pass; every
    acknowledged batch is there after the reopen, nothing else is."""
    from storage_node.errors import Unavailable

    config = small_config(tmp_path / "d", flush_mode=flush_mode, segment_bytes=1 << 20)
    store = Store.open(config)
    store.create_topic(TopicConfig("orders", 2))
    acked: list[list[str]] = [[] for _ in range(8)]
    refused = [0] * 8
    started = threading.Barrier(9)

    def produce(p: int) -> None:
        started.wait()
        for b in range(10_000):
            try:
                done = store.append_columns(
                    "orders", [b"p%d-b%d-%d" % (p, b, i) for i in range(20)]
                )
            except Unavailable:
                refused[p] += 1
                return
            acked[p].extend(done.msg_ids)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(8)]
    for t in threads:
        t.start()
    started.wait()
    while sum(len(a) for a in acked) < 2_000:
        time.sleep(0.001)
    store.close()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive(), "a producer never got its answer"
    assert refused == [1] * 8
    with Store.open(config) as reopened:
        total = sum(n for _f, n in reopened.partition_offsets("orders"))
        assert total == sum(len(a) for a in acked)
        for p in range(8):
            for msg_id in acked[p][:: max(1, len(acked[p]) // 20)]:
                assert reopened.get_message(msg_id).value.startswith(b"p%d-" % p)


def test_a_saved_answer_is_not_doubled_by_replay(tmp_path) -> None:
    """The idempotency table may be saved with a batch the checkpoint does not cover yet (a
    crash between the two saves): replaying the log from that checkpoint rebuilds the
    batch's answer from its records, it does not add them to the saved one."""
    config = small_config(tmp_path / "d", flush_mode="sync")
    store = Store.open(config)
    store.create_topic(TopicConfig("orders", 2))
    store.append_columns("orders", [b"a%d" % i for i in range(5)], producer_id="p", sequence=1)
    store.checkpoint()
    before_b = json.loads((tmp_path / "d" / "checkpoint").read_text())
    second = store.append_columns(
        "orders", [b"b%d" % i for i in range(7)], producer_id="p", sequence=2
    )
    store.close()  # saves the table with both batches, and a checkpoint past both
    path = tmp_path / "d" / "checkpoint"
    ck = json.loads(path.read_text())
    ck.update(clean=False, log_end=before_b["log_end"], queues=before_b["queues"])
    path.write_text(json.dumps(ck))  # as if the crash came between the two saves
    with Store.open(config) as reopened:
        assert reopened.recovery_report["replayed_records"] == 7
        again = reopened.append_columns(
            "orders", [b"b%d" % i for i in range(7)], producer_id="p", sequence=2
        )
        assert again == second and len(again) == 7
        assert sum(n for _f, n in reopened.partition_offsets("orders")) == 12


def test_sync_answers_only_after_the_fsync_that_covers_the_batch(tmp_path) -> None:
    """Eight producers in sync mode: when an append returns, the log is durable past every
    record of its batch (answers never run ahead of the disk)."""
    store = Store.open(small_config(tmp_path / "d", flush_mode="sync", segment_bytes=1 << 20))
    store.create_topic(TopicConfig("orders", 3))
    failures: list[str] = []

    def produce(p: int) -> None:
        for b in range(60):
            done = store.append_columns(
                "orders",
                [b"p%d-b%d-%d" % (p, b, i) for i in range(30)],
                [f"k{i}" for i in range(30)],
            )
            durable = store.log.durable_end  # only ever grows: read right after the answer
            ends = [
                pos + size
                for part, offset in zip(done.partitions, done.offsets, strict=True)
                for pos, size, _tag in store.queue("orders", int(part)).entries(int(offset), 1)
            ]
            if max(ends) > durable:
                failures.append(f"producer {p} batch {b}: answered at {durable}, ends {max(ends)}")

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    assert failures == []


def test_an_interrupted_leader_passes_the_lead_on(tmp_path) -> None:
    """The leader is interrupted (KeyboardInterrupt) before its group's fsync: the other
    producers of the group hear Unavailable (never a result the disk does not hold yet),
    and the lead goes on, so later appends do not wait forever."""
    from storage_node.errors import Unavailable

    store = Store.open(small_config(tmp_path / "d", flush_mode="sync"))
    store.create_topic(TopicConfig("orders", 2))
    real_wait = store.log.wait_durable
    seen = {"calls": 0}

    def interrupted_once(target: int) -> None:
        seen["calls"] += 1
        if seen["calls"] == 1:
            raise KeyboardInterrupt
        real_wait(target)

    store.log.wait_durable = interrupted_once  # type: ignore[method-assign]
    calls = [{"topic": "orders", "values": [b"g%d" % i]} for i in range(3)]
    results = grouped(store, calls)
    assert sum(isinstance(r, KeyboardInterrupt) for r in results) == 1
    assert sum(isinstance(r, Unavailable) for r in results) == 2

    done: list[AppendColumns] = []

    def produce(p: int) -> None:
        for b in range(5):
            done.append(store.append_columns("orders", [b"after-%d-%d" % (p, b)]))

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
        assert not t.is_alive(), "an append waited forever for a lead nobody held"
    assert len(done) == 20
    store.close()


def test_a_producer_interrupted_in_the_queue_leaves_it(tmp_path) -> None:
    """A producer interrupted by a real SIGINT while its batch waits in the queue: its batch
    is not written, the batch ahead of it is, and the store goes on."""
    import os
    import signal

    store = Store.open(small_config(tmp_path / "d", flush_mode="sync"))
    store.create_topic(TopicConfig("orders", 1))
    locked, release = threading.Event(), threading.Event()

    def hold_the_append_lock() -> None:
        with store._lock:
            locked.set()
            release.wait(20)

    first: list[AppendColumns] = []
    holder = threading.Thread(target=hold_the_append_lock)
    holder.start()
    locked.wait(10)
    leader = threading.Thread(target=lambda: first.append(store.append_columns("orders", [b"a"])))
    leader.start()

    def interrupt_when_queued() -> None:
        deadline = time.monotonic() + 10
        while store.group_commit.queued() < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)  # the producer is asleep in its wait by now
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Thread(target=interrupt_when_queued)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            store.append_columns("orders", [b"interrupted"])
        assert store.group_commit.queued() == 1  # only the leader's own batch waits
    finally:
        timer.join()
        release.set()
        holder.join()
        leader.join(timeout=20)
    assert len(first) == 1
    store.append_columns("orders", [b"b"])
    assert [m.value for m in store.read("orders", 0, 0, 10).messages] == [b"a", b"b"]
    store.close()


def test_an_interrupt_during_the_leaders_own_fsync(tmp_path, monkeypatch) -> None:
    """A real SIGINT lands while the sync leader runs the group's fsync itself: the batch is
    cut from the log like a failed write, the log is not left 'flushing' for ever, and the
    next append recovers in place and goes on."""
    import os
    import signal

    import storage_node.store.log_flusher as log_flusher

    config = small_config(tmp_path / "d", flush_mode="sync")
    store = Store.open(config)
    store.create_topic(TopicConfig("orders", 1))
    store.append_columns("orders", [b"before"])
    armed = {"on": True}

    class InterruptedFsync:
        """The commit log's ``os``, whose next fsync on the main thread is interrupted."""

        def __getattr__(self, name: str) -> object:
            return getattr(os, name)

        def fsync(self, fd: int) -> None:
            os.fsync(fd)
            if armed["on"] and threading.current_thread() is threading.main_thread():
                armed["on"] = False
                os.kill(os.getpid(), signal.SIGINT)  # raised at the next bytecode

    monkeypatch.setattr(log_flusher, "os", InterruptedFsync())
    with pytest.raises(KeyboardInterrupt):
        store.append_columns("orders", [b"interrupted"])
    assert not store.log.in_flush and not store.group_commit.leading

    after: list[AppendColumns] = []
    producer = threading.Thread(
        target=lambda: after.append(store.append_columns("orders", [b"after"]))
    )
    producer.start()
    producer.join(timeout=20)
    assert not producer.is_alive(), "the append after the interrupt never returned"
    assert store.counters["resumed_after_write_error"] == 1
    store.close()
    with Store.open(config) as reopened:
        values = [m.value for m in reopened.read("orders", 0, 0, 10).messages]
        assert values == [b"before", b"after"]


def test_odd_input_of_one_producer_fails_alone(store: Store) -> None:
    """Input that fails in packing with an untyped error (a timestamp that is an array) is
    its producer's error only: the rest of the group is written."""
    import numpy as np

    calls = [
        {"topic": "orders", "values": [b"good-0"]},
        {"topic": "orders", "values": [b"odd"], "timestamps": [np.array([1, 2])]},
        {"topic": "orders", "values": [b"good-2"], "keys": ["k"]},
    ]
    before = sum(n for _f, n in store.partition_offsets("orders"))
    results = grouped(store, calls)
    assert isinstance(results[1], Exception) and not isinstance(results[1], AppendColumns)
    assert isinstance(results[0], AppendColumns) and isinstance(results[2], AppendColumns)
    assert sum(n for _f, n in store.partition_offsets("orders")) == before + 2


def test_a_closed_store_says_so_before_judging_the_lists(store: Store) -> None:
    from storage_node.errors import Unavailable

    store.close()
    with pytest.raises(Unavailable):
        store.append_columns("orders", [b"a", b"b"], keys=["only one"])


def test_a_taken_message_id_last_in_a_group_leaves_the_others_batch_alone(
    store: Store,
) -> None:
    """The last batch of a group repeats a stored message ID: it alone is refused (409),
    and the good batch before it is written with its own values, not the refused ones."""
    from storage_node.errors import DuplicateMessageId

    taken = "shop-0a010101-431699-7"
    store.append_columns("orders", [b"first"], msg_ids=[taken])
    calls = [
        {"topic": "orders", "values": [b"good"]},
        {"topic": "orders", "values": [b"refused"], "msg_ids": [taken]},
    ]
    good, refused = grouped(store, calls, in_order=True)  # the refused batch comes last
    assert isinstance(refused, DuplicateMessageId)
    assert isinstance(good, AppendColumns) and len(good) == 1
    assert store.get_message(good.msg_ids[0]).value == b"good"
    assert store.get_message(taken).value == b"first"
    assert sum(n for _f, n in store.partition_offsets("orders")) == 2
