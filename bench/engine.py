#!/usr/bin/env python3
"""Engine benchmarks: the segment store against SQLite and the raw disk, in the same run.

Every line printed is one JSON object with a ``bench`` name. Each figure is the median of
several repeats, and each engine figure has a peer measured in this same process on the same
filesystem (the append benches take peer and engine runs in turns), so ratios compare like
with like on whatever machine runs this:

* ``append_100b``      one producer, batches of 1000, ``async`` flush, vs SQLite WAL
                       ``synchronous=NORMAL`` with an index on the key, same batching;
* ``append_100b_sync`` 8 producer threads, batches of 100, ``sync`` flush (acknowledged after
                       fsync, group commit), vs SQLite WAL ``synchronous=FULL``, 8 threads;
* ``append_4k``        4 KiB messages (batches of 256, ``async`` flush, timed up to the close
                       that flushes and fsyncs) vs the same bytes written sequentially with
                       one fsync at the end;
* ``lookup_*``         per-call latency of reads by offset, by key (unsealed and compacted key
                       index) and by message ID after a clean restart, with SQLite's indexed
                       lookups of the same data as a reference;
* ``read_scan``        a consumer scanning every partition of 100-byte messages in pages of
                       10,000 with ``Store.read_columns`` (packed columns), and with
                       ``Store.read`` (Message objects), vs a sequential read of the same
                       segment files (1 MiB reads): ``ratio_vs_sequential_read``;
* ``recovery``         seconds per GiB to reopen after the writer was killed with SIGKILL;
* ``restart_clean``    seconds to reopen the same data after a clean close.

``--quick`` keeps the whole run under a minute.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

MIB = 1 << 20
GIB = 1 << 30
TOPIC = "bench"
PARTITIONS = 4


@dataclass(frozen=True)
class Sizes:
    """How much work each bench does; ``--quick`` picks the small set."""

    repeats: int
    append_msgs: int
    sync_batches_per_thread: int
    append_4k_bytes: int
    lookup_msgs: int
    lookup_ops: int
    recovery_bytes: int
    recovery_repeats: int
    scan_msgs: int


QUICK = Sizes(
    repeats=3,
    append_msgs=100_000,
    sync_batches_per_thread=25,
    append_4k_bytes=32 * MIB,
    lookup_msgs=50_000,
    lookup_ops=2_000,
    recovery_bytes=64 * MIB,
    recovery_repeats=1,
    scan_msgs=200_000,
)
FULL = Sizes(
    repeats=5,
    append_msgs=1_000_000,
    sync_batches_per_thread=125,
    append_4k_bytes=256 * MIB,
    lookup_msgs=500_000,
    lookup_ops=20_000,
    recovery_bytes=1 * GIB,
    recovery_repeats=3,
    scan_msgs=1_000_000,
)


def emit(record: dict) -> None:
    """One JSON object per line, flushed at once so partial runs still report."""
    print(json.dumps(record, sort_keys=False), flush=True)


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def ratio(engine_value: float | None, peer_value: float) -> float | None:
    if engine_value is None or peer_value <= 0:
        return None
    return round(engine_value / peer_value, 3)


def paired_runs(
    repeats: int, peer_run: Callable[[], float], engine_run: Callable[[], float]
) -> tuple[float, float | None, dict]:
    """Medians of ``repeats`` peer and engine runs taken in turns (peer, engine, peer, ...),
    so a disk or machine that speeds up or slows down during the bench weighs on both
    sides alike. A failing engine gives None and the error, and the peer still reports.
    The third value (printed with the figures) also lists every run, rounded, in order."""
    peer: list[float] = []
    engine: list[float] = []
    extra: dict = {}
    for _ in range(repeats):
        peer.append(peer_run())
        if "engine_error" not in extra:
            try:
                engine.append(engine_run())
            except Exception as exc:
                extra["engine_error"] = f"{type(exc).__name__}: {exc}"
    extra["engine_runs"] = [round(x, 1) for x in engine]
    extra["peer_runs"] = [round(x, 1) for x in peer]
    failed = "engine_error" in extra
    return median(peer), (None if failed else median(engine)), extra


def rounded(value: float | None, digits: int | None = None) -> float | None:
    return None if value is None else round(value, digits)


def percentiles_us(samples_ns: list[int]) -> tuple[float, float]:
    """p50 and p99 in microseconds (nearest-rank)."""
    ordered = sorted(samples_ns)
    if not ordered:
        return (0.0, 0.0)

    def rank(q: float) -> float:
        index = min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))
        return ordered[index] / 1000.0

    return (round(rank(0.50), 2), round(rank(0.99), 2))


class Workspace:
    """A scratch directory on the filesystem under test; every bench gets a fresh child."""

    def __init__(self, parent: str | None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="msgstore-bench-", dir=parent))
        self.counter = 0

    def fresh(self, name: str) -> Path:
        self.counter += 1
        path = self.root / f"{self.counter:03d}-{name}"
        path.mkdir(parents=True)
        return path

    def drop(self, path: Path) -> None:
        """Delete a run's files and let the filesystem finish with them (os.sync) before the
        next run is timed: freeing and discarding hundreds of MB otherwise lands inside the
        next run's fsyncs, on whichever side happens to run next."""
        shutil.rmtree(path, ignore_errors=True)
        os.sync()

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# ----------------------------------------------------------------------------- data


def values_of(count: int, size: int, seed: int) -> list[bytes]:
    """Incompressible values, generated once so neither side pays for them while timed."""
    blob = np.random.default_rng(seed).bytes(count * size)
    return [blob[i * size : (i + 1) * size] for i in range(count)]


def keys_of(count: int, prefix: str = "user") -> list[str]:
    return [f"{prefix}-{i:09d}" for i in range(count)]


# ----------------------------------------------------------------------------- SQLite peer


def sqlite_open(path: Path, synchronous: str) -> sqlite3.Connection:
    """The SQLite peer: WAL journal, the given synchronous level, an index on the key."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS messages ("
        " id INTEGER PRIMARY KEY, key TEXT, msg_id TEXT, ts INTEGER, value BLOB)"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS messages_key ON messages(key)")
    return conn


def sqlite_insert_batch(conn: sqlite3.Connection, rows: list[tuple]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO messages (key, msg_id, ts, value) VALUES (?, ?, ?, ?)", rows)
    conn.execute("COMMIT")


def sqlite_rows(keys: list[str], values: list[bytes]) -> list[tuple]:
    now_ms = int(time.time() * 1000)
    return [(k, None, now_ms, v) for k, v in zip(keys, values, strict=True)]


def sqlite_append_single(path: Path, keys: list[str], values: list[bytes], batch: int) -> float:
    """Messages per second for one producer with ``synchronous=NORMAL``."""
    rows = sqlite_rows(keys, values)
    conn = sqlite_open(path, "NORMAL")
    start = time.perf_counter()
    for i in range(0, len(rows), batch):
        sqlite_insert_batch(conn, rows[i : i + batch])
    elapsed = time.perf_counter() - start
    conn.close()
    return len(rows) / elapsed


def run_threads(work: Callable[[int], None], threads: int) -> float:
    """Run ``work(thread_index)`` on ``threads`` threads started together; wall seconds."""
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def body(index: int) -> None:
        barrier.wait()
        try:
            work(index)
        except BaseException as exc:  # reported after the join
            errors.append(exc)

    workers = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


def sqlite_append_threads(path: Path, per_thread: list[list[tuple]], batch: int) -> float:
    """Messages per second for N threads, one connection each, ``synchronous=FULL``."""
    conns = [sqlite_open(path, "FULL") for _ in per_thread]

    def work(index: int) -> None:
        rows = per_thread[index]
        for i in range(0, len(rows), batch):
            sqlite_insert_batch(conns[index], rows[i : i + batch])

    elapsed = run_threads(work, len(per_thread))
    for conn in conns:
        conn.close()
    return sum(len(rows) for rows in per_thread) / elapsed


# ----------------------------------------------------------------------------- disk peer


def disk_sequential_write(path: Path, values: list[bytes], chunk: int = MIB) -> float:
    """MB/s writing the same bytes sequentially in 1 MiB writes, one fsync at the end."""
    total = sum(len(v) for v in values)
    per_chunk = max(1, chunk // max(1, len(values[0])))
    chunks = [b"".join(values[i : i + per_chunk]) for i in range(0, len(values), per_chunk)]
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for data in chunks:
            os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    return total / elapsed / 1e6


# ----------------------------------------------------------------------------- engine side


def engine_config(data_dir: Path, **overrides: object) -> object:
    from storage_node.store import StoreConfig

    settings: dict[str, object] = {"data_dir": str(data_dir), "lifecycle_interval_s": 0}
    settings.update(overrides)
    return StoreConfig(**settings)


def engine_open(data_dir: Path, **overrides: object) -> object:
    from storage_node.store import Store, TopicConfig

    store = Store.open(engine_config(data_dir, **overrides))
    store.create_topic(TopicConfig(name=TOPIC, partitions=PARTITIONS))
    return store


def engine_append_single(data_dir: Path, keys: list[str], values: list[bytes], batch: int) -> float:
    """Messages per second for one producer with ``async`` flush (columns API, as SQLite
    gets its rows as prepared tuples)."""
    store = engine_open(data_dir, flush_mode="async")
    try:
        start = time.perf_counter()
        for i in range(0, len(values), batch):
            store.append_columns(TOPIC, values[i : i + batch], keys[i : i + batch])
        elapsed = time.perf_counter() - start
    finally:
        store.close()
    return len(values) / elapsed


def engine_append_threads(
    data_dir: Path, per_thread: list[tuple[list[str], list[bytes]]], batch: int
) -> float:
    """Messages per second for N threads with ``sync`` flush (each batch acknowledged after fsync)."""
    store = engine_open(data_dir, flush_mode="sync")

    def work(index: int) -> None:
        keys, values = per_thread[index]
        for i in range(0, len(values), batch):
            store.append_columns(TOPIC, values[i : i + batch], keys[i : i + batch])

    try:
        elapsed = run_threads(work, len(per_thread))
    finally:
        store.close()
    return sum(len(v) for _k, v in per_thread) / elapsed


def engine_append_bytes(data_dir: Path, values: list[bytes], batch: int) -> float:
    """MB/s of message bodies appended with ``async`` flush, timed up to the fsyncing close."""
    total = sum(len(v) for v in values)
    store = engine_open(data_dir, flush_mode="async")
    start = time.perf_counter()
    try:
        for i in range(0, len(values), batch):
            store.append_columns(TOPIC, values[i : i + batch])
    finally:
        store.close()
    elapsed = time.perf_counter() - start
    return total / elapsed / 1e6


# ----------------------------------------------------------------------------- benches


def bench_append_100b(ws: Workspace, sizes: Sizes, quick: bool) -> None:
    batch = 1000
    keys = keys_of(sizes.append_msgs)
    values = values_of(sizes.append_msgs, 100, seed=1)

    def sqlite_run() -> float:
        path = ws.fresh("sqlite")
        try:
            return sqlite_append_single(path / "peer.db", keys, values, batch)
        finally:
            ws.drop(path)

    def engine_run() -> float:
        path = ws.fresh("engine")
        try:
            return engine_append_single(path, keys, values, batch)
        finally:
            ws.drop(path)

    sqlite_rate, engine_rate, error = paired_runs(sizes.repeats, sqlite_run, engine_run)
    emit(
        {
            "bench": "append_100b",
            "msgs_per_s": rounded(engine_rate),
            "sqlite_msgs_per_s": round(sqlite_rate),
            "ratio_vs_sqlite": ratio(engine_rate, sqlite_rate),
            "messages": sizes.append_msgs,
            "batch": batch,
            "producers": 1,
            "flush": "async",
            "sqlite": "WAL synchronous=NORMAL, index on key",
            "repeats": sizes.repeats,
            "quick": quick,
            **error,
        }
    )


def bench_append_100b_sync(ws: Workspace, sizes: Sizes, quick: bool) -> None:
    threads, batch = 8, 100
    per_thread_count = sizes.sync_batches_per_thread * batch
    keys = [keys_of(per_thread_count, prefix=f"t{t}") for t in range(threads)]
    values = [values_of(per_thread_count, 100, seed=10 + t) for t in range(threads)]
    sqlite_per_thread = [sqlite_rows(k, v) for k, v in zip(keys, values, strict=True)]

    def sqlite_run() -> float:
        path = ws.fresh("sqlite-sync")
        try:
            return sqlite_append_threads(path / "peer.db", sqlite_per_thread, batch)
        finally:
            ws.drop(path)

    def engine_run() -> float:
        path = ws.fresh("engine-sync")
        try:
            return engine_append_threads(path, list(zip(keys, values, strict=True)), batch)
        finally:
            ws.drop(path)

    sqlite_rate, engine_rate, error = paired_runs(sizes.repeats, sqlite_run, engine_run)
    emit(
        {
            "bench": "append_100b_sync",
            "msgs_per_s": rounded(engine_rate),
            "sqlite_msgs_per_s": round(sqlite_rate),
            "ratio_vs_sqlite": ratio(engine_rate, sqlite_rate),
            "messages": per_thread_count * threads,
            "batch": batch,
            "producers": threads,
            "flush": "sync",
            "sqlite": "WAL synchronous=FULL, index on key, one connection per thread",
            "repeats": sizes.repeats,
            "quick": quick,
            **error,
        }
    )


def bench_append_4k(ws: Workspace, sizes: Sizes, quick: bool) -> None:
    size, batch = 4096, 256
    count = sizes.append_4k_bytes // size
    values = values_of(count, size, seed=3)

    def disk_run() -> float:
        path = ws.fresh("disk")
        try:
            return disk_sequential_write(path / "sequential.bin", values)
        finally:
            ws.drop(path)

    def engine_run() -> float:
        path = ws.fresh("engine-4k")
        try:
            return engine_append_bytes(path, values, batch)
        finally:
            ws.drop(path)

    disk_rate, engine_rate, error = paired_runs(sizes.repeats, disk_run, engine_run)
    emit(
        {
            "bench": "append_4k",
            "mb_per_s": rounded(engine_rate, 1),
            "disk_mb_per_s": round(disk_rate, 1),
            "ratio_vs_disk": ratio(engine_rate, disk_rate),
            "messages": count,
            "bytes": count * size,
            "batch": batch,
            "flush": "async, timed through the fsyncing close",
            "disk": "1 MiB sequential writes, one fsync at the end",
            "unit": "MB = 1e6 bytes of message bodies",
            "repeats": sizes.repeats,
            "quick": quick,
            **error,
        }
    )


def timed_calls(items: list, call: Callable[[object], object]) -> list[int]:
    samples: list[int] = []
    clock = time.perf_counter_ns
    for item in items:
        start = clock()
        call(item)
        samples.append(clock() - start)
    return samples


def bench_lookups(ws: Workspace, sizes: Sizes, quick: bool) -> None:
    """Latency of point reads on data that went through a clean restart (not the write cache)."""
    from storage_node.store import Store

    count, ops = sizes.lookup_msgs, sizes.lookup_ops
    keys = keys_of(count, prefix="lookup")
    values = values_of(count, 100, seed=4)
    data_dir = ws.fresh("engine-lookup")
    store = engine_open(data_dir, flush_mode="async")
    partitions = np.zeros(count, dtype=np.int32)
    offsets = np.zeros(count, dtype=np.int64)
    msg_ids: list[str] = []
    for i in range(0, count, 1000):
        done = store.append_columns(TOPIC, values[i : i + 1000], keys[i : i + 1000])
        partitions[i : i + len(done)] = done.partition_array
        offsets[i : i + len(done)] = done.offset_array
        msg_ids.extend(done.msg_ids)
    store.close()

    peer_dir = ws.fresh("sqlite-lookup")
    conn = sqlite_open(peer_dir / "peer.db", "NORMAL")
    conn.execute("CREATE INDEX IF NOT EXISTS messages_msg_id ON messages(msg_id)")
    now_ms = int(time.time() * 1000)
    for i in range(0, count, 1000):
        rows = [(keys[j], msg_ids[j], now_ms, values[j]) for j in range(i, min(count, i + 1000))]
        sqlite_insert_batch(conn, rows)
    # Only untracked objects (str, bytes, arrays) stay alive from here on, so the garbage
    # collector's passes measure the store's own heap, not this script's bookkeeping.
    del rows
    gc.collect()

    rng = random.Random(5)
    picks = [rng.randrange(count) for _ in range(ops)]
    store = Store.open(engine_config(data_dir, flush_mode="async"))

    def check(index: int, found: object) -> None:
        if not found:
            raise RuntimeError(f"lookup found nothing for message {index}")

    def by_offset(i: object) -> None:
        offset = int(offsets[i])
        got = store.read(TOPIC, int(partitions[i]), offset, max_messages=1).messages
        check(i, got and got[0].offset == offset)

    def by_key(i: object) -> None:
        check(i, store.lookup_key(TOPIC, keys[i]).messages)

    def by_msgid(i: object) -> None:
        check(i, store.get_message(msg_ids[i]).value == values[i])

    def sql_by_rowid(i: object) -> None:
        check(i, conn.execute("SELECT value FROM messages WHERE id=?", (i + 1,)).fetchone())

    def sql_by_key(i: object) -> None:
        check(i, conn.execute("SELECT value FROM messages WHERE key=?", (keys[i],)).fetchall())

    def sql_by_msgid(i: object) -> None:
        found = conn.execute("SELECT value FROM messages WHERE msg_id=?", (msg_ids[i],))
        check(i, found.fetchone())

    def report(name: str, engine_ns: list[int], peer_ns: list[int], **extra: object) -> None:
        p50, p99 = percentiles_us(engine_ns)
        s50, s99 = percentiles_us(peer_ns)
        emit(
            {
                "bench": name,
                "p50_us": p50,
                "p99_us": p99,
                "sqlite_p50_us": s50,
                "sqlite_p99_us": s99,
                "messages": count,
                "lookups": ops,
                **extra,
                "quick": quick,
            }
        )

    try:
        report("lookup_offset", timed_calls(picks, by_offset), timed_calls(picks, sql_by_rowid))
        key_peer = timed_calls(picks, sql_by_key)
        report("lookup_key_unsealed", timed_calls(picks, by_key), key_peer)
        report("lookup_msgid", timed_calls(picks, by_msgid), timed_calls(picks, sql_by_msgid))
        store.compact_now()
        report("lookup_key_compacted", timed_calls(picks, by_key), key_peer)
    finally:
        store.close()
        conn.close()
        ws.drop(data_dir)
        ws.drop(peer_dir)


RECOVERY_BATCH = 256


def recovery_child(data_dir: str, total_bytes: int) -> None:
    """Writer for the recovery bench: fill the store, say so, then wait to be killed."""
    from storage_node.store import MessageIn

    store = engine_open(Path(data_dir), flush_mode="sync")
    size = 4096
    count = total_bytes // size
    body = random.Random(6).randbytes(size * RECOVERY_BATCH)
    written = 0
    while written < count:
        n = min(RECOVERY_BATCH, count - written)
        batch = [
            MessageIn(value=body[i * size : (i + 1) * size], key=f"r-{written + i}")
            for i in range(n)
        ]
        store.append(TOPIC, batch)
        written += n
    print(json.dumps({"written": written}), flush=True)
    time.sleep(3600)


def bench_recovery(ws: Workspace, sizes: Sizes, quick: bool) -> None:
    from storage_node.store import Store

    recover_runs: list[float] = []
    clean_runs: list[float] = []
    stored = 0
    for _ in range(sizes.recovery_repeats):
        data_dir = ws.fresh("engine-recovery")
        child = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--recovery-child",
                str(data_dir),
                str(sizes.recovery_bytes),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            line = child.stdout.readline() if child.stdout else ""
            if not line:
                raise RuntimeError("recovery writer exited before it finished writing")
            written = int(json.loads(line)["written"])
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        stored = sum(p.stat().st_blocks * 512 for p in data_dir.rglob("*") if p.is_file())

        start = time.perf_counter()
        store = Store.open(engine_config(data_dir))
        recover_runs.append(time.perf_counter() - start)
        recovered = sum(nxt - first for first, nxt in store.partition_offsets(TOPIC))
        store.close()
        if recovered != written:
            raise RuntimeError(f"recovery found {recovered} of {written} acknowledged messages")

        start = time.perf_counter()
        store = Store.open(engine_config(data_dir))
        clean_runs.append(time.perf_counter() - start)
        store.close()
        ws.drop(data_dir)
    data_gib = sizes.recovery_bytes / GIB
    seconds = median(recover_runs)
    emit(
        {
            "bench": "recovery",
            "s_per_gib": round(seconds / data_gib, 3),
            "seconds": round(seconds, 3),
            "data_gib": round(data_gib, 4),
            "stored_gib": round(stored / GIB, 4),
            "repeats": sizes.recovery_repeats,
            "quick": quick,
        }
    )
    emit(
        {
            "bench": "restart_clean",
            "seconds": round(median(clean_runs), 4),
            "data_gib": round(data_gib, 4),
            "repeats": sizes.recovery_repeats,
            "quick": quick,
        }
    )


def scan_store(store: object, columns: bool, page: int = 10_000) -> int:
    """Read every partition from its first offset to its end; the messages read."""
    count = 0
    for p, (first, end) in enumerate(store.partition_offsets(TOPIC)):  # type: ignore[attr-defined]
        offset = first
        while offset < end:
            if columns:
                got = store.read_columns(TOPIC, p, offset, page, 64 * MIB)  # type: ignore[attr-defined]
                count, offset = count + len(got), got.next_offset
            else:
                res = store.read(TOPIC, p, offset, page, 64 * MIB)  # type: ignore[attr-defined]
                count, offset = count + len(res.messages), res.next_offset
    return count


def bench_read_scan(ws: Workspace, sizes: Sizes, quick: bool) -> None:
    """Scan throughput of the columnar read against reading the segment files' bytes."""
    n = sizes.scan_msgs
    data_dir = ws.fresh("read_scan")
    values, keys = values_of(n, 100, 11), keys_of(n)
    store = engine_open(data_dir, flush_mode="async")
    try:
        for i in range(0, n, 5000):
            store.append_columns(TOPIC, values[i : i + 5000], keys[i : i + 5000])  # type: ignore[attr-defined]
        store.seal_active()  # type: ignore[attr-defined]
    finally:
        store.close()  # type: ignore[attr-defined]
    del values, keys
    from storage_node.store import Store

    store = Store.open(engine_config(data_dir))
    segdir = data_dir / "commitlog" / "unsealed"
    files = sorted(segdir.iterdir())
    log_bytes = sum(f.stat().st_size for f in files)

    def sequential() -> float:
        started = time.perf_counter()
        for f in files:
            fd = os.open(f, os.O_RDONLY)
            try:
                while os.read(fd, MIB):
                    pass
            finally:
                os.close(fd)
        return n / (time.perf_counter() - started)

    def timed_scan(columns: bool) -> float:
        started = time.perf_counter()
        got = scan_store(store, columns)
        elapsed = time.perf_counter() - started
        if got != n:
            raise RuntimeError(f"scan read {got} messages, expected {n}")
        return n / elapsed

    has_columns = hasattr(store, "read_columns")  # (absent before the columnar read)
    try:
        peer, engine, extra = paired_runs(
            sizes.repeats, sequential, lambda: timed_scan(has_columns)
        )
        objects = median([timed_scan(False) for _ in range(max(1, sizes.repeats // 2))])
    finally:
        store.close()
    emit(
        {
            "bench": "read_scan",
            "msgs_per_s": rounded(engine),
            "sequential_read_msgs_per_s": round(peer),
            "ratio_vs_sequential_read": ratio(engine, peer),
            "read_messages_msgs_per_s": round(objects),
            "columnar": has_columns,
            "messages": n,
            "value_bytes": 100,
            "log_mib": round(log_bytes / MIB, 1),
            "page": 10_000,
            **extra,
        }
    )


BENCHES: dict[str, Callable[[Workspace, Sizes, bool], None]] = {
    "append_100b": bench_append_100b,
    "append_100b_sync": bench_append_100b_sync,
    "append_4k": bench_append_4k,
    "lookups": bench_lookups,
    "recovery": bench_recovery,
    "read_scan": bench_read_scan,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: under a minute")
    parser.add_argument(
        "--dir", default=None, help="parent of the scratch directory (the filesystem measured)"
    )
    parser.add_argument(
        "--only", action="append", choices=sorted(BENCHES), help="run only these (repeatable)"
    )
    parser.add_argument(
        "--recovery-child", nargs=2, metavar=("DIR", "BYTES"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.recovery_child:
        recovery_child(args.recovery_child[0], int(args.recovery_child[1]))
        return 0

    sizes = QUICK if args.quick else FULL
    ws = Workspace(args.dir)
    emit(
        {
            "bench": "env",
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "quick": args.quick,
        }
    )
    failures = 0
    try:
        for name in args.only or list(BENCHES):
            try:
                BENCHES[name](ws, sizes, args.quick)
            except Exception as exc:  # keep measuring the others; the line says what broke
                failures += 1
                emit({"bench": name, "error": f"{type(exc).__name__}: {exc}"})
    finally:
        ws.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
