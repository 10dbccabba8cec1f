"""Shared by the reliability tests: small store configs, directory snapshots,
locating commit-log segment files, and deterministic message contents for child writers.

Everything here uses only the public store API (docs/ENGINE_API.md) plus the documented
on-disk naming of commit-log segments (20-digit start position) to find files to damage.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from dataclasses import asdict
from pathlib import Path

from storage_node.store import Message, MessageIn, Store, StoreConfig, TopicConfig

REPO_ROOT = Path(__file__).resolve().parents[3]
KIB = 1024


def small_config(data_dir: Path | str, **overrides: object) -> StoreConfig:
    """A store configuration small enough that every rollover path runs in a test.

    Segments of 64 KiB, key-index files of 64 slots and 256 items, queue files of 64 entries,
    and no background worker (tests drive seal, compaction and lifecycle explicitly).
    """
    settings: dict[str, object] = {
        "data_dir": str(data_dir),
        "segment_bytes": 64 * KIB,
        "index_slots": 64,
        "index_items": 256,
        "queue_file_entries": 64,
        "max_message_bytes": 32 * KIB,
        "flush_mode": "sync",
        "lifecycle_interval_s": 0,
        "compact_after_s": 60,
        "upload_after_s": 120,
    }
    settings.update(overrides)
    return StoreConfig(**settings)


def config_from_json(text: str) -> StoreConfig:
    return StoreConfig(**json.loads(text))


def config_to_json(config: StoreConfig) -> str:
    return json.dumps(asdict(config))


def tree_snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root`` with its size and content hash: "changes nothing" made exact."""
    snapshot: dict[str, tuple[int, str]] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for chunk in iter(lambda h=handle: h.read(1 << 20), b""):
                    digest.update(chunk)
            snapshot[str(path.relative_to(root))] = (path.stat().st_size, digest.hexdigest())
    return snapshot


def dir_listing(root: Path) -> set[str]:
    """Every path (files and folders) under ``root``: catches a file escaping its folder."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def segment_files(data_dir: Path, store: Store | None = None) -> list[Path]:
    """Commit-log segment files on disk, oldest first.

    Segments are named by their 20-digit start position; queue-index files share that naming,
    so a file counts as a segment only when ``list_files()`` reports a segment of that name
    (when a store is given) and it does not live under a queue folder.
    """
    names: set[str] | None = None
    if store is not None:
        names = {f.name for f in store.list_files() if f.kind == "segment"}
    found: list[Path] = []
    for path in data_dir.rglob("*"):
        if not path.is_file() or len(path.name) != 20 or not path.name.isdigit():
            continue
        parts = {part.lower() for part in path.relative_to(data_dir).parts[:-1]}
        if any("queue" in part for part in parts):
            continue
        if names is not None and path.name not in names:
            continue
        if any("commit" in part or "log" in part or "segment" in part for part in parts):
            found.append(path)
    return sorted(found, key=lambda p: int(p.name))


def flip_byte(path: Path, position: int) -> None:
    """Invert every bit of one byte in place (the file keeps its size)."""
    with open(path, "r+b") as handle:
        handle.seek(position)
        old = handle.read(1)
        handle.seek(position)
        handle.write(bytes([old[0] ^ 0xFF]))
        handle.flush()
        os.fsync(handle.fileno())


# ----------------------------------------------------------------------------- child writers

CRASH_TOPIC = "crash.events"
CRASH_PARTITIONS = 3
SUPPLIED_ID_APP = "crash.app"


def batch_messages(thread: int, sequence: int) -> list[MessageIn]:
    """The batch a child writer sends as (thread, sequence): a pure function, so a writer
    restarted after SIGKILL can resend exactly the batch it may not have had acknowledged."""
    rng = random.Random(thread * 1_000_003 + sequence)
    count = rng.randint(1, 40)
    messages = []
    for index in range(count):
        ident = f"t{thread}-s{sequence}-i{index}"
        size = rng.choice((16, 100, 700, 3000))
        value = ident.encode() + b"|" + rng.randbytes(size)
        key = f"key-{rng.randrange(400)}" if rng.random() < 0.9 else None
        tag = rng.choice(("red", "green", None))
        msg_id = None
        if rng.random() < 0.5:
            ip = 0x0A000000 + thread + 1
            msg_id = f"{SUPPLIED_ID_APP}-{ip:08x}-480000-{sequence * 64 + index}"
        messages.append(MessageIn(value=value, key=key, tag=tag, msg_id=msg_id))
    return messages


def ident_of(value: bytes) -> str:
    """The unique identity a child writer embeds at the front of every value."""
    return value.split(b"|", 1)[0].decode()


def python_child(script: str, *args: str) -> list[str]:
    """argv running one of this folder's child scripts with the current interpreter."""
    return [sys.executable, str(Path(__file__).with_name(script)), *args]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), str(Path(__file__).parent), env.get("PYTHONPATH")])
    )
    return env


def read_all(store: Store, topic: str) -> dict[int, list[Message]]:
    """Every message of every partition, read by offset from first to next offset."""
    out: dict[int, list[Message]] = {}
    for partition, (first, nxt) in enumerate(store.partition_offsets(topic)):
        messages: list[Message] = []
        offset = first
        while offset < nxt:
            result = store.read(topic, partition, offset, max_messages=500)
            assert result.messages, f"read at {topic}/{partition}@{offset} made no progress"
            messages.extend(result.messages)
            offset = result.next_offset
        out[partition] = messages
    return out


def ensure_topic(store: Store) -> None:
    store.create_topic(TopicConfig(name=CRASH_TOPIC, partitions=CRASH_PARTITIONS))


FILL_BATCH = 10


def fill_batch(batch: int) -> list[MessageIn]:
    """Batch ``batch`` of the corruption tests' writer: message n has value ``m{n}|...``."""
    rng = random.Random(batch)
    messages = []
    for index in range(FILL_BATCH):
        number = batch * FILL_BATCH + index
        body = rng.randbytes(rng.choice((50, 400, 1500)))
        messages.append(MessageIn(value=b"m%d|" % number + body, key=f"fill-{number % 37}"))
    return messages


def fill_messages(batches: int) -> list[MessageIn]:
    return [m for batch in range(batches) for m in fill_batch(batch)]
