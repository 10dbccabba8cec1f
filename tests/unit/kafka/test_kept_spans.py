"""The log bytes a connection keeps between its Fetches (kafka/fetch.py ``KeptSpans``): at
most MEMO_KEEP_BYTES per connection and MEMO_KEEP_MAX over the node, the node's count
always the sum of what is kept, nothing kept for a connection that ended (a read-ahead still
running when it closed), and a memo never handed to another store."""

from __future__ import annotations

import pytest

from storage_node.kafka import fetch
from storage_node.kafka.fetch import KeptSpans
from storage_node.store.columnar import Span, SpanMemo


def memo_of(*sizes: int) -> SpanMemo:
    memo = SpanMemo()
    lo = 0
    for size in sizes:
        memo.add(Span.of(lo, bytes(size), "test"))
        lo += size
    return memo


@pytest.fixture(autouse=True)
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch, "MEMO_KEEP_BYTES", 300)
    monkeypatch.setattr(fetch, "MEMO_KEEP_MAX", 500)
    monkeypatch.setattr(KeptSpans, "held", 0)


def test_a_memo_given_back_is_taken_again_trimmed_to_the_connection_budget() -> None:
    store = object()
    kept = KeptSpans()
    kept.give(store, memo_of(100, 100, 100, 100))
    assert KeptSpans.held == 300  # the oldest 100 dropped
    memo = kept.take(store)
    assert memo.size == 300 and KeptSpans.held == 0
    assert kept.take(store).size == 0  # taken: nothing kept meanwhile


def test_the_node_budget_is_shared_and_counted_exactly() -> None:
    a, b, store = KeptSpans(), KeptSpans(), object()
    a.give(store, memo_of(100, 100, 100))
    b.give(store, memo_of(100, 100, 100))
    assert KeptSpans.held == 500  # b got what the node had left
    assert b.take(store).size == 200
    b.give(store, memo_of(50))
    a.give(store, memo_of(100))  # replaces a's memo
    assert KeptSpans.held == 150
    a.clear()
    b.clear()
    assert KeptSpans.held == 0


def test_a_connection_that_ended_keeps_nothing() -> None:
    store = object()
    kept = KeptSpans()
    running = kept.take(store)  # a read-ahead still running...
    kept.clear()  # ...when the connection closes
    kept.give(store, memo_of(100))
    assert KeptSpans.held == 0 and kept.memos == {}
    assert running.size == 0


def test_a_memo_is_never_handed_to_another_store() -> None:
    first = object()
    kept = KeptSpans()
    kept.give(first, memo_of(100))
    other = object()
    assert kept.take(other).size == 0
    assert kept.take(first).size == 100
