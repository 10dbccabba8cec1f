"""GroupCommit on its own: queue order, leadership hand-off, the durable answer and errors.

The writer here is a plain function that records each pass (the real one is the append
pass); Events hold the first pass open so the queueing behind it is certain, not timing.
"""

from __future__ import annotations

import threading
import time

import pytest

from storage_node.errors import Unavailable
from storage_node.formats.packed import ListBatch
from storage_node.store.batches import Ticket
from storage_node.store.group_commit import GroupCommit
from storage_node.store.types import AppendColumns, TopicConfig

CFG = TopicConfig("orders", 1)


def _ticket(name: str) -> Ticket:
    return Ticket(CFG, ListBatch([name.encode()], (None,) * 5), None, None, None)


class Recorder:
    """A writer that logs each pass (ticket names, writing thread) and answers each ticket
    with a result and a durable target; the first pass waits for ``release``."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.passes: list[tuple[list[bytes], str]] = []
        self.durable: list[int] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_on = fail_on
        self.end = 0

    def write(self, group: list[Ticket]) -> None:
        names = [bytes(t.batch.values[0]) for t in group]  # type: ignore[union-attr]
        self.passes.append((names, threading.current_thread().name))
        if len(self.passes) == 1:
            self.entered.set()
            assert self.release.wait(10)
        if self.fail_on is not None and self.fail_on.encode() in names:
            raise Unavailable("the disk went away")
        for t in group:
            self.end += 10
            t.result = AppendColumns([0], [self.end], [names[group.index(t)].decode()])
            t.target = self.end

    def wait_durable(self, end: int) -> None:
        self.durable.append(end)


def _producers(gc: GroupCommit, names: list[str], out: dict) -> list[threading.Thread]:
    def run(name: str) -> None:
        try:
            out[name] = gc.submit(_ticket(name))
        except BaseException as exc:  # the test inspects it
            out[name] = exc

    return [threading.Thread(target=run, args=(n,), name=n) for n in names]


def _wait_queued(gc: GroupCommit, n: int) -> None:
    deadline = time.monotonic() + 10
    while gc.queued() < n and time.monotonic() < deadline:
        time.sleep(0.001)
    assert gc.queued() == n, "the producers did not queue up"


@pytest.mark.parametrize("sync", [True, False])
def test_batches_queued_behind_a_pass_are_written_together_in_order(sync: bool) -> None:
    rec = Recorder()
    gc = GroupCommit(threading.RLock(), rec.write, rec.wait_durable, sync, gather_wait_s=0)
    out: dict = {}
    first = _producers(gc, ["a"], out)[0]
    first.start()
    assert rec.entered.wait(10)
    assert gc.leading
    rest = _producers(gc, ["b", "c", "d"], out)
    for t in rest:
        t.start()
        _wait_queued(gc, rest.index(t) + 1)  # one at a time: the queue order is known
    rec.release.set()
    for t in [first, *rest]:
        t.join(10)
        assert not t.is_alive()
    assert [names for names, _thread in rec.passes] == [[b"a"], [b"b", b"c", b"d"]]
    # the first producer led the first pass; in sync mode it then hands the lead to the
    # first waiting producer, in async mode it keeps leading (up to lead_rounds passes)
    assert rec.passes[0][1] == "a"
    assert rec.passes[1][1] == ("b" if sync else "a")
    assert rec.durable == ([10, 40] if sync else [])  # one fsync wait per group, its end
    assert not gc.leading and gc.queued() == 0
    # each producer gets its own result (the writer answered each ticket by name)
    assert {name: done.msg_ids for name, done in out.items()} == {
        "a": ["a"],
        "b": ["b"],
        "c": ["c"],
        "d": ["d"],
    }


def test_a_failed_pass_answers_each_of_its_producers_with_the_error() -> None:
    rec = Recorder(fail_on="b")
    gc = GroupCommit(threading.RLock(), rec.write, rec.wait_durable, True, gather_wait_s=0)
    out: dict = {}
    first = _producers(gc, ["a"], out)[0]
    first.start()
    assert rec.entered.wait(10)
    rest = _producers(gc, ["b", "c"], out)
    for t in rest:
        t.start()
    _wait_queued(gc, 2)
    rec.release.set()
    for t in [first, *rest]:
        t.join(10)
    assert not isinstance(out["a"], BaseException)
    assert isinstance(out["b"], Unavailable) and out["c"] is out["b"]
    assert rec.durable == [10]  # the failed group needs no fsync
    assert not gc.leading
    # the next producer leads at once and is written alone
    done: dict = {}
    t = _producers(gc, ["e"], done)[0]
    t.start()
    t.join(10)
    assert not isinstance(done["e"], BaseException)
    assert rec.passes[-1][0] == [b"e"]


def test_a_failed_fsync_is_each_waiting_producers_answer() -> None:
    def write(group: list[Ticket]) -> None:
        for t in group:
            t.target = 1

    def wait_durable(end: int) -> None:
        raise Unavailable("fsync failed")

    gc = GroupCommit(threading.RLock(), write, wait_durable, True, gather_wait_s=0)
    with pytest.raises(Unavailable, match="fsync failed"):
        gc.submit(_ticket("a"))
    assert not gc.leading and gc.queued() == 0


def test_a_pass_waits_for_the_append_lock() -> None:
    """Whoever holds the append lock (a checkpoint, a test) holds every pass back; what
    queues meanwhile is one group."""
    lock = threading.RLock()
    rec = Recorder()
    rec.release.set()
    gc = GroupCommit(lock, rec.write, rec.wait_durable, True, gather_wait_s=0)
    out: dict = {}
    threads = _producers(gc, ["a", "b", "c"], out)
    with lock:
        for t in threads:
            t.start()
        _wait_queued(gc, 3)
        assert rec.passes == []
    for t in threads:
        t.join(10)
    assert sorted(sum((names for names, _ in rec.passes), [])) == [b"a", b"b", b"c"]
    assert len(rec.passes) == 1
