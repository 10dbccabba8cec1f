"""Child process for the crash tests: writes until it is killed with SIGKILL.

Usage: crash_writer.py CONFIG_JSON LOG_DIR THREADS

Each writer thread sends batches ``batch_messages(thread, sequence)`` with
``producer_id=f"writer-{thread}"`` and consecutive sequences. Before a batch it appends
``{"attempt": ...}`` to ``attempts.log``; after the store acknowledges it appends the results
to ``acks.log``. Both are single ``write`` calls on O_APPEND files, which survive SIGKILL of
this process (the page cache outlives it). On start, a thread whose last attempted batch has
no acknowledgement resends exactly that batch under the same sequence, as a producer retrying
after a crash does: the store must answer it without writing it twice.

A maintenance thread seals, compacts and runs the lifecycle at random moments so that kills
also land in the middle of file moves.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from pathlib import Path

from support import batch_messages, config_from_json, ensure_topic

from storage_node.store import Store


def append_line(path: Path, record: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def read_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # a line torn by the kill: never acknowledged
            continue
    return records


def resume_point(log_dir: Path, thread: int) -> int:
    """The sequence this thread sends first: its unacknowledged last attempt, or the next."""
    attempted = [r["seq"] for r in read_lines(log_dir / "attempts.log") if r["t"] == thread]
    acked = {r["seq"] for r in read_lines(log_dir / "acks.log") if r["t"] == thread}
    if not attempted:
        return 0
    last = max(attempted)
    return last if last not in acked else last + 1


def writer(store: Store, log_dir: Path, thread: int, topic: str) -> None:
    sequence = resume_point(log_dir, thread)
    while True:
        append_line(log_dir / "attempts.log", {"t": thread, "seq": sequence})
        results = store.append(
            topic,
            batch_messages(thread, sequence),
            producer_id=f"writer-{thread}",
            sequence=sequence,
        )
        append_line(
            log_dir / "acks.log",
            {
                "t": thread,
                "seq": sequence,
                "pid": os.getpid(),
                "results": [[r.partition, r.offset, r.msg_id] for r in results],
            },
        )
        sequence += 1


def maintenance(store: Store, seed: int) -> None:
    rng = random.Random(seed)
    while True:
        time.sleep(rng.uniform(0.02, 0.15))
        action = rng.random()
        if action < 0.4:
            store.seal_active()
        elif action < 0.8:
            store.compact_now()
        else:
            store.run_lifecycle_once(now_ms=int(time.time() * 1000) + 3_600_000)


def main() -> None:
    config = config_from_json(sys.argv[1])
    log_dir = Path(sys.argv[2])
    threads = int(sys.argv[3])
    from support import CRASH_TOPIC

    store = Store.open(config)
    ensure_topic(store)
    print("open", flush=True)
    errors: list[BaseException] = []

    def guarded(target, *args) -> None:
        try:
            target(*args)
        except BaseException as exc:
            errors.append(exc)

    workers = [
        threading.Thread(target=guarded, args=(writer, store, log_dir, t, CRASH_TOPIC), daemon=True)
        for t in range(threads)
    ]
    workers.append(
        threading.Thread(target=guarded, args=(maintenance, store, os.getpid()), daemon=True)
    )
    for worker in workers:
        worker.start()
    while not errors:
        time.sleep(0.01)
    # Only reached when the store failed: say how, and leave a non-zero exit status.
    sys.stderr.write(f"writer failed: {type(errors[0]).__name__}: {errors[0]}\n")
    os._exit(3)


if __name__ == "__main__":
    main()
