"""Group commit: producers queue their batches; one of them, the leader, writes them together.

A producer that finds nobody leading becomes the leader: it takes every queued batch (its
own among them), has them written in one pass under the append lock (``write``), and, in
``sync`` mode, waits for the one fsync that covers the group (``wait_durable``) before
answering each producer. Then it hands the lead to the first producer still waiting, whose
batch was queued meanwhile. Each producer sleeps once: until it is answered or handed the
lead. Batches never wait for a timer: a group is whatever queued while the last one was
being written (plus, in sync mode, a moment for the producers just answered: ``_gather``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from storage_node.errors import Unavailable
from storage_node.store.batches import Ticket
from storage_node.store.types import AppendColumns

LEAD_ROUNDS = 8  # passes one producer leads (async mode) before it hands the lead on
GATHER_WAIT_S = 0.0003  # how long a sync leader waits for the last group's producers to queue


class GroupCommit:
    def __init__(
        self,
        append_lock: threading.RLock,
        write: Callable[[list[Ticket]], None],
        wait_durable: Callable[[int], None],
        sync: bool,
        lead_rounds: int = LEAD_ROUNDS,
        gather_wait_s: float = GATHER_WAIT_S,
    ) -> None:
        """``write(group)`` runs with ``append_lock`` held and leaves each ticket's result or
        error and its ``target`` (the log end that makes it durable); ``wait_durable(end)``
        blocks until that end is fsynced (sync mode)."""
        self._append_lock = append_lock
        self._write = write
        self._wait_durable = wait_durable
        self.sync = sync
        self.lead_rounds = lead_rounds
        self.gather_wait_s = gather_wait_s
        self._lock = threading.Lock()
        self._pending: list[Ticket] = []  # batches waiting for the next pass
        self._leading = False  # a producer is writing a pass (others queue behind it)
        self._gathered = threading.Condition(self._lock)  # enough producers queued
        self._want = 0  # producers a waiting leader wants queued (0: nobody waits)
        self._last_group = 1

    def queued(self) -> int:
        """Batches waiting for a pass."""
        with self._lock:
            return len(self._pending)

    @property
    def leading(self) -> bool:
        """A producer holds the lead."""
        return self._leading

    def submit(self, ticket: Ticket) -> AppendColumns:
        """Queue ``ticket`` and sleep until it is answered (or lead); its result or error."""
        with self._lock:
            self._pending.append(ticket)
            lead = not self._leading
            self._leading = True
            if self._want and len(self._pending) >= self._want:
                self._gathered.notify()
        try:
            if not lead:
                ticket.wake.acquire()  # the one sleep of a producer: until answered, or to lead
            if lead or ticket.leader:
                ticket.leader = False  # leading now: an interruption from here on is _lead's
                self._lead()
                ticket.wake.acquire()  # until answered (its batch was in the first pass)
        except BaseException:  # interrupted (KeyboardInterrupt): nobody may wait for us
            self._withdraw(ticket)
            raise
        if ticket.error is not None:
            raise ticket.error
        assert ticket.result is not None  # answered: a result or an error
        return ticket.result

    def _lead(self) -> None:
        """Write the waiting batches, the leader's own among them, and hand the lead on.

        Async mode: pass after pass, up to ``lead_rounds``, each group answered once
        written. Sync mode: one pass, one write and one fsync for the whole group, then the
        group is answered and the lead goes to a waiting producer. A producer that kept
        leading could not produce, so its next batch would miss the next group and travel
        alone (measured: two passes and two fsyncs per round of eight producers instead of
        one). The next leader gives the producers just answered a moment to queue
        (``_gather``), so a group holds one batch of every producer.
        """
        sync = self.sync
        group: list[Ticket] | None = []
        try:
            for _ in range(1 if sync else self.lead_rounds):
                if sync:
                    self._gather()
                group = self._write_group()
                if group is None:
                    return  # the lead was given up with the queue found empty
                if sync:
                    self._answer_durable(group)
                else:
                    for t in group:
                        t.answer()
        finally:  # also when interrupted (KeyboardInterrupt): the others must not wait forever
            if group is not None:
                self._hand_on()

    def _withdraw(self, ticket: Ticket) -> None:
        """(A producer interrupted while it waited or led.) Its batch leaves the queue if no
        pass took it yet, and a lead just handed to it goes on to the next producer."""
        with self._lock:
            self._pending = [t for t in self._pending if t is not ticket]
            handed = ticket.leader
            ticket.leader = False
        if handed:
            self._hand_on()

    def _hand_on(self) -> None:
        """Give the lead to the first waiting producer, or give it up."""
        with self._lock:
            if self._pending:
                successor = self._pending[0]
                successor.leader = True
                successor.wake.release()
            else:
                self._leading = False

    def _gather(self) -> None:
        """(Sync leader.) Wait, ``gather_wait_s`` at most, until as many batches queue as the
        last group held: its producers were just answered and come straight back (the one
        that completes the count wakes us). A lone producer never waits."""
        with self._lock:
            if len(self._pending) < self._last_group:
                self._want = self._last_group
                try:
                    self._gathered.wait(self.gather_wait_s)
                finally:
                    self._want = 0

    def _write_group(self) -> list[Ticket] | None:
        """One pass for every waiting batch; None (and the lead given up) when none waits.
        An error is each producer's answer, never the leader's to raise."""
        group: list[Ticket] = []
        try:
            with self._append_lock:  # whatever queued while we waited for it joins the pass
                with self._lock:
                    group, self._pending = self._pending, []
                    if not group:
                        self._leading = False
                        return None
                self._write(group)
        except BaseException as exc:  # not written: every producer hears of it
            for t in group:
                t.error = t.error or exc
            if not isinstance(exc, Exception):
                for t in group:
                    t.answer()
                raise
        return group

    def _answer_durable(self, group: list[Ticket]) -> None:
        """(Sync mode.) Wait for the fsync that covers the group's bytes (one for all of
        them), then answer its producers; a batch that failed needs no fsync."""
        self._last_group = len(group)
        waiting = [t for t in group if t.error is None]
        try:
            if waiting:
                self._wait_durable(max(t.target for t in waiting))
        except BaseException as exc:  # not known durable: nobody is answered with a result
            error = exc
            if not isinstance(exc, Exception):  # the leader was interrupted: the others hear
                error = Unavailable("interrupted before the batch's fsync; it may be lost")
            for t in waiting:
                t.error = t.error or error
            if error is not exc:
                raise
        finally:
            for t in group:
                t.answer()
