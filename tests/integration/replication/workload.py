"""Concurrent idempotent producers and the model every fault test checks against.

Each producer sends JSON batches with its own producer id and a sequence per batch, to the
leader of the batch's log as the routing file names it; on any failure (unreachable,
503, 409 fenced, 421) it reads the routing file again and retries the same batch (same id,
sequence and messages) until it is acknowledged. Acknowledged messages go to the model.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

from storage_node.server.routing_state import read_routing_file
from tests.waiting import wait_until

TOPIC = "events"
PARTITIONS = 6


def partition_of(key: str) -> int:
    return zlib.crc32(key.encode()) % PARTITIONS


@dataclass
class Model:
    acked: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # value -> p, off, id
    lock: threading.Lock = field(default_factory=threading.Lock)
    retries: int = 0
    failures: list[str] = field(default_factory=list)


class Producers:
    def __init__(self, routing_file: str, model: Model, count: int = 4, batch: int = 5) -> None:
        self.routing_file = routing_file
        self.model = model
        self.count = count
        self.batch = batch
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.acked_at: list[float] = []  # monotonic times of acknowledgements
        self.acked_parts: list[int] = []  # the partition of each, in the same order

    def start(self) -> None:
        for i in range(self.count):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self.threads.append(t)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)
            assert not t.is_alive(), "a producer could not get its last batch acknowledged"

    def _leader(self, partition: int) -> str:
        table = read_routing_file(self.routing_file)
        owner = table.topics[TOPIC].owners[partition]
        address = table.node_address(owner)
        assert address is not None
        return address

    def _run(self, index: int) -> None:
        session = requests.Session()
        producer = f"p{index}-{time.monotonic_ns()}"
        seq = 0
        while not self.stop.is_set():
            # one batch goes to one partition (one log), as a client's sub-batch does
            part = (index + seq) % PARTITIONS
            values = []
            i = 0
            while len(values) < self.batch:
                key = f"{producer}-{seq}-{i}"
                i += 1
                if partition_of(key) == part:
                    values.append(key)
            body = {
                "producer_id": producer,
                "sequence": seq,
                "messages": [{"key": v, "value": v, "partition": part} for v in values],
            }
            answer = self._send(session, part, body)
            with self.model.lock:
                for v, r in zip(values, answer["results"], strict=True):
                    self.model.acked[v] = (r["partition"], r["offset"], r["msg_id"])
            self.acked_parts.append(part)
            self.acked_at.append(time.monotonic())
            seq += 1

    def wait_for_acks(self, what: str, since: float | None = None, batches: int = 2) -> None:
        """Until every partition has had `batches` batches acknowledged after `since` (now by
        default): traffic has reached every log, whatever a fault did to it."""
        start = time.monotonic() if since is None else since

        def every_partition_written() -> bool:
            times = list(self.acked_at)
            parts = self.acked_parts[: len(times)]
            counts = [0] * PARTITIONS
            for at, part in zip(times, parts, strict=True):
                if at > start:
                    counts[part] += 1
            return min(counts) >= batches

        wait_until(every_partition_written, 90, f"{batches} batches per partition {what}")

    def _send(self, session: requests.Session, part: int, body: dict[str, Any]) -> Any:
        deadline = time.monotonic() + 90
        while True:
            try:
                resp = session.post(
                    f"{self._leader(part)}/v1/topics/{TOPIC}/messages", json=body, timeout=10
                )
                if resp.status_code == 200:
                    return resp.json()
                why = f"HTTP {resp.status_code} {resp.text[:120]}"
            except (requests.RequestException, ValueError, OSError) as exc:
                why = repr(exc)[:160]
            with self.model.lock:
                self.model.retries += 1
            if time.monotonic() > deadline:
                self.model.failures.append(why)
                raise AssertionError(f"batch not acknowledged in 90 s: {why}")
            time.sleep(0.1)


def get_json(url: str | Callable[[], str], params: dict[str, Any] | None = None) -> Any:
    """GET, waiting (30 s at most) while a node has not yet loaded a new routing table
    (421), waits for its leader to be named (503) or was just replaced as its log's leader
    (409 ``fenced``: a failover is under way), as a client would; a callable ``url`` is
    asked again before each try (the leader may have moved)."""
    deadline = time.monotonic() + 30
    while True:
        resp = requests.get(url() if callable(url) else url, params=params, timeout=30)
        fenced = resp.status_code == 409 and '"fenced"' in resp.text
        if resp.status_code == 200 or (resp.status_code not in (421, 503) and not fenced):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert resp.status_code == 200, resp.text
    return resp.json()


def check_model(routing_file: str, model: Model, samples: int = 150) -> dict[str, int]:
    """Read everything back from the leaders: every acknowledged message exactly once at its
    offset, and by key and message ID (a sample); no message stored twice."""

    def leader(p: int) -> str:
        table = read_routing_file(routing_file)
        return str(table.node_address(table.topics[TOPIC].owners[p]))

    seen: dict[str, list[tuple[int, int]]] = {}
    for p in range(PARTITIONS):
        offset = 0
        while True:
            doc = get_json(
                lambda p=p: f"{leader(p)}/v1/topics/{TOPIC}/partitions/{p}/messages",
                {"offset": offset, "max_messages": 10000},
            )
            for m in doc["messages"]:
                seen.setdefault(m["value"], []).append((p, m["offset"]))
            if not doc["messages"]:
                break
            offset = doc["next_offset"]
    dup = {v: at for v, at in seen.items() if len(at) > 1}
    assert not dup, f"{len(dup)} messages stored twice, e.g. {list(dup.items())[:3]}"
    lost = [v for v in model.acked if v not in seen]
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
    wrong = [v for v, (p, o, _m) in model.acked.items() if seen[v] != [(p, o)]]
    assert not wrong, f"{len(wrong)} at another offset than acknowledged, e.g. {wrong[:3]}"
    step = max(1, len(model.acked) // samples)
    for v in sorted(model.acked)[::step]:
        p, o, mid = model.acked[v]
        by_key = get_json(lambda p=p, v=v: f"{leader(p)}/v1/topics/{TOPIC}/keys/{quote(v)}")
        got = [(m["partition"], m["offset"], m["msg_id"]) for m in by_key["messages"]]
        assert got == [(p, o, mid)], (v, got, by_key.get("unreachable_nodes"))
        by_id = get_json(lambda p=p, mid=mid: f"{leader(p)}/v1/messages/{quote(mid)}")
        assert (by_id["value"], by_id["partition"], by_id["offset"]) == (v, p, o), by_id
    return {"acknowledged": len(model.acked), "stored": len(seen), "retries": model.retries}
