"""Crash tests: a writer in a child process is killed with SIGKILL at random moments, again and
again on the same data directory; afterwards every acknowledged message must be readable by
offset, by key and by message ID, exactly once, and nothing that was never sent may appear.

The child (crash_writer.py) runs two producer threads with ``sync`` flush and a maintenance
thread that seals, compacts and runs the lifecycle, so kills land during appends, group
commits, recovery itself, and file moves between lifecycle folders.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from storage_node.store import MessageIn, Store, StoreConfig

from .support import (
    CRASH_TOPIC,
    batch_messages,
    child_env,
    config_to_json,
    ident_of,
    python_child,
    read_all,
    small_config,
)

KILLS = 24
THREADS = 2


def run_and_kill(config_json: str, log_dir: Path, rng: random.Random) -> str:
    """Start the writer, SIGKILL it at a random moment; returns when (roughly) it was killed."""
    child = subprocess.Popen(
        python_child("crash_writer.py", config_json, str(log_dir), str(THREADS)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
        text=True,
    )
    try:
        if rng.random() < 0.2:
            # Anywhere from interpreter start-up through recovery into the first writes.
            time.sleep(rng.uniform(0.0, 1.0))
            moment = "early"
        else:
            line = child.stdout.readline() if child.stdout else ""
            if line.strip() != "open":
                child.wait(timeout=30)
                err = child.stderr.read() if child.stderr else ""
                raise AssertionError(f"writer could not open the store: {line!r} {err}")
            time.sleep(rng.uniform(0.01, 0.6))
            moment = "writing"
        if child.poll() is not None:
            err = child.stderr.read() if child.stderr else ""
            raise AssertionError(f"writer stopped before the kill (rc={child.returncode}): {err}")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        if child.stdout:
            child.stdout.close()
        if child.stderr:
            child.stderr.close()
    return moment


def load_log(path: Path) -> list[dict]:
    records = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def batch_of(ident: str) -> tuple[int, int]:
    thread, seq, _index = (int(part[1:]) for part in ident.split("-"))
    return thread, seq


def partial_batches(store: Store) -> dict[tuple[int, int], tuple[int, int]]:
    """Batches of which some but not all messages are stored: (stored, sent) per batch."""
    stored: Counter[tuple[int, int]] = Counter(
        batch_of(ident_of(m.value)) for ms in read_all(store, CRASH_TOPIC).values() for m in ms
    )
    partial = {}
    for (thread, seq), count in stored.items():
        sent = len(batch_messages(thread, seq))
        if thread < THREADS and count != sent:
            partial[(thread, seq)] = (count, sent)
    return partial


def verify_store(store: Store, log_dir: Path, extra: frozenset[str] = frozenset()) -> int:
    """Check every promise against the writers' logs; returns how many messages were acked."""
    attempts = {(r["t"], r["seq"]) for r in load_log(log_dir / "attempts.log")}
    acks = load_log(log_dir / "acks.log")

    stored = read_all(store, CRASH_TOPIC)
    by_ident = {}
    for partition, messages in stored.items():
        first, _nxt = store.partition_offsets(CRASH_TOPIC)[partition]
        offsets = [m.offset for m in messages]
        assert offsets == list(range(first, first + len(messages))), "offsets not contiguous"
        for m in messages:
            assert m.partition == partition and m.topic == CRASH_TOPIC
    idents = Counter(ident_of(m.value) for ms in stored.values() for m in ms)
    duplicated = {i: n for i, n in idents.items() if n > 1}
    assert not duplicated, f"messages stored more than once: {sorted(duplicated)[:10]}"
    for ms in stored.values():
        for m in ms:
            by_ident[ident_of(m.value)] = m

    # Nothing appears that was never sent.
    for ident in idents:
        if ident in extra:
            continue
        assert batch_of(ident) in attempts, f"{ident} was stored but never sent"

    acked = 0
    by_key: dict[str, Counter[bytes]] = {}
    for record in acks:
        sent = batch_messages(record["t"], record["seq"])
        assert len(record["results"]) == len(sent)
        for message_in, (partition, offset, msg_id) in zip(sent, record["results"], strict=True):
            acked += 1
            ident = ident_of(message_in.value)
            assert ident in by_ident, f"acknowledged message {ident} is lost"
            if message_in.msg_id is not None:
                assert msg_id == message_in.msg_id
            read = store.read(CRASH_TOPIC, partition, offset, max_messages=1).messages
            assert read and read[0].value == message_in.value, f"{ident} not at its offset"
            assert read[0].key == message_in.key and read[0].tag == message_in.tag
            assert read[0].msg_id == msg_id
            by_id = store.get_message(msg_id)
            assert (by_id.partition, by_id.offset, by_id.value) == (
                partition,
                offset,
                message_in.value,
            ), f"{ident} not found by message ID {msg_id}"
            if message_in.key is not None:
                if message_in.key not in by_key:
                    found = store.lookup_key(CRASH_TOPIC, message_in.key, max_count=10_000)
                    assert not found.limit_reached
                    by_key[message_in.key] = Counter(m.value for m in found.messages)
                hits = by_key[message_in.key][message_in.value]
                assert hits == 1, f"{ident} found {hits} times by key {message_in.key}"
    return acked


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[StoreConfig, Path, str]:
    """One data folder after KILLS random SIGKILLs of the writer (shared by the tests below)."""
    root = tmp_path_factory.mktemp("crash")
    data_dir, log_dir = root / "data", root / "logs"
    data_dir.mkdir()
    log_dir.mkdir()
    config = small_config(data_dir, segment_bytes=256 * 1024)
    config_json = config_to_json(config)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    moments = Counter(run_and_kill(config_json, log_dir, rng) for _ in range(KILLS))
    return config, log_dir, f"seed {seed}, kills {dict(moments)}"


def test_sigkill_at_random_moments_loses_nothing_acknowledged(crashed) -> None:
    config, log_dir, about = crashed
    store = Store.open(config)
    try:
        acked = verify_store(store, log_dir)
        assert acked > 0, f"no batch was acknowledged in {KILLS} runs ({about})"
        # The recovered store keeps working: a new batch lands after everything else.
        before = store.partition_offsets(CRASH_TOPIC)
        result = store.append(CRASH_TOPIC, [MessageIn(value=b"t9-s0-i0|after", key="after")])
        assert result[0].offset == before[result[0].partition][1]
        assert store.get_message(result[0].msg_id).value == b"t9-s0-i0|after"
    finally:
        store.close()

    # And a clean restart afterwards serves the same answers.
    store = Store.open(config)
    try:
        assert store.lookup_key(CRASH_TOPIC, "after").messages[0].value == b"t9-s0-i0|after"
        verify_store(store, log_dir, extra=frozenset({"t9-s0-i0"}))
    finally:
        store.close()


def test_sigkill_leaves_no_half_batch(crashed) -> None:
    config, _log_dir, about = crashed
    store = Store.open(config)
    try:
        partial = partial_batches(store)
    finally:
        store.close()
    assert not partial, f"batches stored in part (stored, sent): {partial} ({about})"
