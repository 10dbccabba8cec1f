"""Damaged files: corruption in the middle of a file is reported (CorruptData), never served;
a torn tail left by a crash is truncated at the last whole record and the store goes on.

"Never served" is checked message by message: every read by offset, by message ID and by key
either returns exactly the bytes that were written or raises CorruptData, and at least one
answer reports the damage. A damaged store may also refuse to open with CorruptData (that
reports it too), but it may never quietly drop acknowledged messages that follow the damage.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from storage_node.errors import CorruptData
from storage_node.formats.frame_walker import iter_frames
from storage_node.store import Message, MessageIn, Store, TopicConfig

from .support import (
    FILL_BATCH,
    child_env,
    config_to_json,
    fill_messages,
    flip_byte,
    python_child,
    segment_files,
    small_config,
)

TOPIC = "damaged"
BATCHES = 30  # 300 messages, about 190 KiB: several 64 KiB segments


def answers_for(store: Store, written: list[Message]) -> tuple[int, int]:
    """Ask for every message three ways; returns (exact answers, CorruptData reports).

    Any answer that is neither the written message nor CorruptData fails the test.
    """
    exact = reported = 0
    for message in written:
        for ask in (
            lambda m=message: store.read(TOPIC, 0, m.offset, max_messages=1).messages[0],
            lambda m=message: store.get_message(m.msg_id),
        ):
            try:
                got = ask()
            except CorruptData:
                reported += 1
                continue
            assert got == message, f"offset {message.offset} served wrong bytes"
            exact += 1
        try:
            found = store.lookup_key(TOPIC, message.key, max_count=1000).messages
        except CorruptData:
            reported += 1
            continue
        by_offset = {m.offset: m for m in written}
        for hit in found:
            assert hit == by_offset[hit.offset], f"key lookup served wrong bytes at {hit.offset}"
    # Batch reads across the damage: whatever comes back is exact.
    offset = 0
    while offset < len(written):
        try:
            result = store.read(TOPIC, 0, offset, max_messages=50)
        except CorruptData:
            reported += 1
            offset += 1
            continue
        for got in result.messages:
            assert got == written[got.offset], f"batch read served wrong bytes at {got.offset}"
        offset = max(result.next_offset, offset + 1)
    return exact, reported


def write_and_close(data_dir: Path, compact: bool) -> tuple[list[Message], list[Path]]:
    config = small_config(data_dir)
    store = Store.open(config)
    try:
        store.create_topic(TopicConfig(name=TOPIC, partitions=1, compression="lz4"))
        messages = fill_messages(BATCHES)
        for i in range(0, len(messages), 10):
            store.append(TOPIC, messages[i : i + 10])
        written = store.read(TOPIC, 0, 0, max_messages=len(messages)).messages
        assert len(written) == len(messages)
        store.seal_active()
        if compact:
            store.compact_now()
        segments = segment_files(data_dir, store)
    finally:
        store.close()
    return written, segments


@pytest.mark.parametrize("compact", [False, True], ids=["sealed", "compacted"])
@pytest.mark.parametrize("where", [0.5, 0.2, 0.8])
def test_flipped_byte_mid_segment_is_reported_never_served(
    tmp_path: Path, compact: bool, where: float
) -> None:
    data_dir = tmp_path / "data"
    written, segments = write_and_close(data_dir, compact)
    assert len(segments) >= 2, f"expected several segments, found {segments}"
    victim = segments[len(segments) // 2]
    flip_byte(victim, int(victim.stat().st_size * where))

    try:
        store = Store.open(small_config(data_dir))
    except CorruptData:
        return  # reported at open: nothing is served
    try:
        assert store.partition_offsets(TOPIC) == [(0, len(written))], "messages were dropped"
        exact, reported = answers_for(store, written)
        assert reported > 0, f"a flipped byte in {victim.name} went unnoticed"
        assert exact > 0, "undamaged segments must still be served"
    finally:
        store.close()


# ----------------------------------------------------------------------------- after a crash


def crash_after_writing(data_dir: Path, batches: int) -> dict:
    """Run fill_writer.py, let it acknowledge ``batches`` batches, then SIGKILL it."""
    config_json = config_to_json(small_config(data_dir))
    child = subprocess.Popen(
        python_child("fill_writer.py", config_json, TOPIC, str(batches)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
        text=True,
    )
    try:
        line = child.stdout.readline() if child.stdout else ""
    finally:
        child.send_signal(signal.SIGKILL)
        _out, err = child.communicate(timeout=30)
    assert line, f"writer failed: {err}"
    return json.loads(line)


def active_segment(data_dir: Path, report: dict) -> tuple[Path, int]:
    """The segment being written at the kill, and its logical size per list_files()."""
    unsealed = [
        f
        for f in report["files"]
        if f["kind"] == "segment" and f["state"] in ("unsealed", "active")
    ]
    assert unsealed, f"no unsealed segment in {report['files']}"
    info = max(unsealed, key=lambda f: int(f["name"]))
    paths = [p for p in segment_files(data_dir) if p.name == info["name"]]
    assert len(paths) == 1, f"segment {info['name']} found at {paths}"
    return paths[0], int(info["size"])


def expected_messages(report: dict) -> list[MessageIn]:
    messages = fill_messages(len(report["acked"]) // 10)
    assert len(messages) == len(report["acked"])
    return messages


def assert_served(store: Store, messages: list[MessageIn], report: dict, count: int) -> None:
    for message_in, (partition, offset, msg_id) in list(
        zip(messages, report["acked"], strict=True)
    )[:count]:
        got = store.read(TOPIC, partition, offset, max_messages=1).messages
        assert got and got[0].value == message_in.value, f"acked message at {offset} lost"
        assert store.get_message(msg_id).value == message_in.value


def test_torn_tail_garbage_is_truncated(tmp_path: Path) -> None:
    """A crash left half a record after the last whole one: recovery drops it, keeps the rest."""
    data_dir = tmp_path / "data"
    report = crash_after_writing(data_dir, BATCHES)
    path, logical = active_segment(data_dir, report)
    with open(path, "r+b") as handle:
        handle.seek(logical)
        handle.write(os.urandom(37))
    messages = expected_messages(report)

    store = Store.open(small_config(data_dir))
    try:
        assert store.partition_offsets(TOPIC) == [(0, len(messages))]
        assert_served(store, messages, report, len(messages))
        result = store.append(TOPIC, [MessageIn(value=b"after-garbage", key="after")])
        assert result[0].offset == len(messages)
    finally:
        store.close()
    store = Store.open(small_config(data_dir))
    try:
        assert store.partition_offsets(TOPIC) == [(0, len(messages) + 1)]
        assert store.read(TOPIC, 0, len(messages)).messages[0].value == b"after-garbage"
        assert store.lookup_key(TOPIC, "after").messages[0].value == b"after-garbage"
        assert_served(store, messages, report, len(messages))
    finally:
        store.close()


def test_torn_last_record_is_truncated_not_served(tmp_path: Path) -> None:
    """The last record was cut short by the crash: it is dropped, never served half."""
    data_dir = tmp_path / "data"
    report = crash_after_writing(data_dir, BATCHES)
    path, logical = active_segment(data_dir, report)
    if path.stat().st_size == logical:
        os.truncate(path, logical - 5)
    else:  # preallocated file: the torn record's last bytes never reached the disk
        with open(path, "r+b") as handle:
            handle.seek(logical - 5)
            handle.write(b"\0" * 5)
    messages = expected_messages(report)
    last = len(messages) - 1

    store = Store.open(small_config(data_dir))
    try:
        ((first, nxt),) = store.partition_offsets(TOPIC)
        # Dropping the torn record alone, or its whole batch (batches are atomic), are both
        # a truncation at the last whole record or batch.
        assert first == 0 and nxt in (len(messages) - FILL_BATCH, last, last + 1)
        assert_served(store, messages, report, min(nxt, last))
        if nxt == last + 1:  # kept in the log: then reading it must report, not serve
            with pytest.raises(CorruptData):
                store.read(TOPIC, 0, last, max_messages=1)
        else:
            result = store.append(TOPIC, [MessageIn(value=b"replacement")])
            assert result[0].offset == nxt
            assert store.read(TOPIC, 0, nxt).messages[0].value == b"replacement"
    finally:
        store.close()


def test_flipped_byte_before_crash_tail_is_not_truncated_away(tmp_path: Path) -> None:
    """Damage in the middle of the segment being written when the node crashed is not a torn
    tail: recovery must not cut off the acknowledged records that follow it. (Damage in the
    very last frame cannot be told from a torn write: that one is cut back, as a tail.)"""
    data_dir = tmp_path / "data"
    report = crash_after_writing(data_dir, BATCHES)
    path, logical = active_segment(data_dir, report)
    frames = list(iter_frames(path.read_bytes()[:logical]))
    assert len(frames) >= 2, "the active segment should hold several frames"
    victim_off, victim_size = frames[len(frames) // 2 - 1]  # followed by valid frames
    flip_byte(path, victim_off + victim_size // 2)
    messages = expected_messages(report)

    try:
        store = Store.open(small_config(data_dir))
    except CorruptData:
        return  # reported at open
    try:
        assert store.partition_offsets(TOPIC) == [(0, len(messages))], (
            "recovery treated mid-file damage as a torn tail and dropped acknowledged messages"
        )
        reported = 0
        for message_in, (_p, offset, msg_id) in zip(messages, report["acked"], strict=True):
            for ask in (
                lambda o=offset: store.read(TOPIC, 0, o, max_messages=1).messages[0],
                lambda i=msg_id: store.get_message(i),
            ):
                try:
                    assert ask().value == message_in.value, f"wrong bytes served at {offset}"
                except CorruptData:
                    reported += 1
        assert reported > 0, "the flipped byte went unnoticed"
    finally:
        store.close()
