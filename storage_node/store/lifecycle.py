"""File lifecycle: seal → compact → upload → expire, plus remote (Spark) compaction.

The heavy work (reading, compressing, uploading) runs outside the append lock; the result
is written with an atomic move into the next folder, swapped in for readers, and only then
is the earlier copy deleted. Recovery keeps the furthest copy if a crash lands in between,
so every acknowledged message stays readable in whatever state its files are.

``Lifecycle`` is handed the parts it moves files of (commit log, key-index set, queues,
message-ID indexes) and what it needs of the store as callables (take a checkpoint, the
last one saved, the newest store time); it never sees the store itself. What files there
are, in which state and of what age, is its ``FileCatalog``'s (file_catalog.py).
"""

from __future__ import annotations

import json
import os
import threading
import time
import zlib
from collections.abc import Callable

from storage_node.backend.files import atomic_write, fsync_dir, remove_file
from storage_node.backend.objectstore import ObjectStore
from storage_node.errors import (
    CorruptData,
    InvalidArgument,
    InvalidName,
    NotFound,
    Unavailable,
)
from storage_node.formats.checkpoint import Checkpoint
from storage_node.formats.compressed import compact_segment_bytes, verify_compacted_segment
from storage_node.formats.filenames import (
    FOLDERS,
    State,
    is_index_name,
    object_key,
    parse_segment_name,
    segment_name,
)
from storage_node.formats.key_index_compacted import (
    compact_key_index_bytes,
    verify_compacted_key_index,
)
from storage_node.formats.key_index_file import KeyIndexFile
from storage_node.formats.message_id import MS_PER_HOUR
from storage_node.store.commitlog import CommitLog
from storage_node.store.config import StoreConfig
from storage_node.store.file_catalog import FileCatalog
from storage_node.store.key_index_set import KeyIndexSet
from storage_node.store.msg_id_index import MsgIdIndexes
from storage_node.store.pinned import pinned_ranges
from storage_node.store.queues import PartitionQueues
from storage_node.store.segment_readers import BlockSegment
from storage_node.store.stats import count, counted
from storage_node.store.topics import TopicRegistry
from storage_node.store.types import FileInfo

KINDS = ("segment", "key_index")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _mtime_ms(path: str) -> int:
    try:
        return int(os.stat(path).st_mtime * 1000)
    except FileNotFoundError:
        return 0


def check_kind_name(kind: str, name: str) -> None:
    if kind not in KINDS:
        raise InvalidArgument(f"kind must be one of {KINDS}, not {kind!r}")
    ok = isinstance(name, str) and (
        parse_segment_name(name) is not None if kind == "segment" else is_index_name(name)
    )
    if not ok:
        raise InvalidName(f"invalid {kind} file name {name!r}", name=str(name))


class Lifecycle:
    """Describes, compacts, uploads and expires the files of one store."""

    def __init__(
        self,
        config: StoreConfig,
        log: CommitLog,
        keyidx: KeyIndexSet,
        msgids: MsgIdIndexes,
        queues: PartitionQueues,
        topics: TopicRegistry,
        objects: ObjectStore,
        counters: dict,
        lock: threading.Lock,
        checkpoint: Callable[[], Checkpoint],
        saved_checkpoint: Callable[[], Checkpoint | None],
        last_store_ms: Callable[[], int],
    ) -> None:
        self.config = config
        self.log = log
        self.keyidx = keyidx
        self.msgids = msgids
        self.queues = queues
        self.topics = topics
        self.objects = objects
        self.counters = counters
        self.lock = lock  # one compaction/upload/expiry at a time
        self.checkpoint = checkpoint
        self.saved_checkpoint = saved_checkpoint
        self.catalog = FileCatalog(log, keyidx, counters, last_store_ms)
        self.segment_info = self.catalog.segment_info
        self.key_index_info = self.catalog.key_index_info
        self.list_files = self.catalog.list_files
        self.sealed_files = self.catalog.sealed_files

    # ---- compaction --------------------------------------------------------------------
    def _compress_segments(self) -> bool:
        topics = self.topics.all()
        return not topics or any(t.compression == "lz4" for t in topics)

    def open_sealed(self, kind: str, name: str) -> bytes:
        """The bytes a remote compactor rewrites: a raw segment or a trimmed IndexFile image."""
        check_kind_name(kind, name)
        info = {(f.kind, f.name): f for f in self.sealed_files()}.get((kind, name))
        if info is None:
            raise NotFound(f"no sealed {kind} named {name!r}", name=name)
        if kind == "segment":
            return self.log.read_segment(int(name))
        return self._sealed_key_index(name)

    def _sealed_key_index(self, name: str) -> bytes:
        """A sealed IndexFile's trimmed image (NotFound once it has been compacted)."""
        index = self.keyidx.files[name]
        if not isinstance(index, KeyIndexFile):
            raise NotFound(f"no sealed key_index named {name!r}", name=name)
        return index.trimmed_bytes()

    def _install_segment(self, start: int, data: bytes) -> FileInfo:
        name = segment_name(start)
        dirs = self.log.dirs
        path = os.path.join(dirs[State.COMPACTED], name)
        atomic_write(path, data)
        self.log.install(start, BlockSegment.local(start, path))
        remove_file(os.path.join(dirs[State.UNSEALED], name))
        fsync_dir(dirs[State.UNSEALED])
        self.counters["compacted_segments"] += 1
        return self.segment_info(start)

    def _install_key_index(self, name: str, data: bytes) -> FileInfo:
        kx = self.keyidx
        path = os.path.join(kx.dirs[State.COMPACTED], name)
        atomic_write(path, data)
        kx.install(name, State.COMPACTED, kx.open_local(path, State.COMPACTED))
        remove_file(os.path.join(kx.dirs[State.UNSEALED], name))
        fsync_dir(kx.dirs[State.UNSEALED])
        self.counters["compacted_key_indexes"] += 1
        return self.key_index_info(name)

    def compact_file(self, info: FileInfo) -> FileInfo:
        if info.kind == "segment":
            start = int(info.name)
            raw = self.log.read_segment(start)
            return self._install_segment(
                start, compact_segment_bytes(raw, self._compress_segments())
            )
        raw = self._sealed_key_index(info.name)
        return self._install_key_index(info.name, compact_key_index_bytes(raw))

    def commit_compacted(self, kind: str, name: str, data: bytes, crc32: int) -> FileInfo:
        """Verify a rewrite made elsewhere, then move it into compacted/ atomically."""
        check_kind_name(kind, name)
        if not isinstance(data, bytes | bytearray) or zlib.crc32(data) != crc32:
            raise InvalidArgument("compacted data does not match its crc32", name=name)
        with self.lock:
            current = {(f.kind, f.name): f for f in self.list_files()}.get((kind, name))
            if current is None:
                raise NotFound(f"no {kind} named {name!r}", name=name)
            if current.state in (State.COMPACTED, State.UPLOADED):
                return current  # another compactor won: same content, nothing to do
            if current.state != State.SEALED:
                raise InvalidArgument(f"{kind} {name} is not sealed yet", name=name)
            if not self.covered_by_checkpoint(current):
                self.checkpoint()
            raw = self.open_sealed(kind, name)
            try:
                if kind == "segment":
                    verify_compacted_segment(raw, bytes(data))
                else:
                    verify_compacted_key_index(raw, bytes(data))
            except CorruptData as exc:
                raise InvalidArgument(
                    f"rejected compacted {kind} {name}: {exc.message}", name=name
                ) from exc
            if kind == "segment":
                return self._install_segment(int(name), bytes(data))
            return self._install_key_index(name, bytes(data))

    def compact_sealed(self) -> dict:
        """Compact everything sealed, whatever its age (the caller sealed the active files)."""
        with self.lock:
            return self._compact(None)

    def covered_by_checkpoint(self, info: FileInfo) -> bool:
        """True when the checkpoint on disk already counts every item of a sealed key index.

        Recovery cuts the checkpoint's active file back and replays the log past the
        checkpoint; a key-index file that was sealed after the checkpoint was taken must not
        be compacted before the next one, or replay would index its last items twice.
        """
        if info.kind != "key_index":
            return True
        ck = self.saved_checkpoint()
        handle = self.keyidx.files.get(info.name)
        if ck is None or handle is None or info.name == ck.key_index_name:
            return False
        return handle.end_pos < ck.log_end

    def _compact(self, older_than_ms: int | None) -> dict:
        report = {"segments": 0, "key_indexes": 0, "bytes_before": 0, "bytes_after": 0}
        for info in self.sealed_files():
            if not self.covered_by_checkpoint(info):
                continue  # next round, after the next checkpoint
            if older_than_ms is not None:
                path = self._local_path(info)
                if _mtime_ms(path) > older_than_ms:
                    continue
            after = self.compact_file(info)
            report["segments" if info.kind == "segment" else "key_indexes"] += 1
            report["bytes_before"] += info.size
            report["bytes_after"] += after.stored_size
        return report

    def _dirs(self, kind: str) -> dict[str, str]:
        return self.log.dirs if kind == "segment" else self.keyidx.dirs

    def _local_path(self, info: FileInfo) -> str:
        state = State.UNSEALED if info.state == State.SEALED else info.state
        return os.path.join(self._dirs(info.kind)[state], info.name)

    # ---- upload and expiry -----------------------------------------------------------------
    def upload_file(self, info: FileInfo) -> None:
        dirs = self._dirs(info.kind)
        src = os.path.join(dirs[State.COMPACTED], info.name)
        key = object_key(info.kind, info.name)
        self.objects.put(key, src)
        manifest = {
            "object_key": key,
            "stored_size": os.path.getsize(src),
            "raw_size": info.size,
            "kind": info.kind,
            "name": info.name,
            "begin_ms": info.begin_ms,
            "end_ms": info.end_ms,
            # what opening the file reads, so a restart needs no object-store access
            "pinned": pinned_ranges(info.kind, src),
        }
        mpath = os.path.join(dirs[State.UPLOADED], info.name)
        atomic_write(mpath, json.dumps(manifest, sort_keys=True).encode())
        if info.kind == "segment":
            start = int(info.name)
            self.log.install(start, BlockSegment.remote(start, mpath, self.objects))
        else:
            kx = self.keyidx
            kx.install(info.name, State.UPLOADED, kx.open_remote(mpath, self.objects))
        remove_file(src)
        fsync_dir(dirs[State.COMPACTED])
        self.counters["uploaded_files"] += 1

    def _delete_everywhere(self, info: FileInfo) -> None:
        dirs = self._dirs(info.kind)
        if info.kind == "segment":
            self.log.remove(int(info.name))
        else:
            self.keyidx.remove(info.name)
        if info.state == State.UPLOADED:
            self.objects.delete(object_key(info.kind, info.name))
        for state in FOLDERS:
            if remove_file(os.path.join(dirs[state], info.name)):
                fsync_dir(dirs[state])
        self.counters["expired_files"] += 1

    def expire(self, now_ms: int) -> int:
        topics = self.topics.all()
        hours = max(
            (t.retention_hours for t in topics), default=self.config.default_retention_hours
        )
        cutoff = now_ms - int(hours * 3_600_000)
        removed = 0
        for info in self.list_files():  # segments oldest first: the log stays contiguous
            if info.kind != "segment":
                continue
            if info.state == State.UNSEALED or info.end_ms is None or info.end_ms >= cutoff:
                break
            self._delete_everywhere(info)
            removed += 1
        for info in self.list_files():
            if (
                info.kind == "key_index"
                and info.state != State.UNSEALED
                and info.end_ms is not None
                and info.end_ms < cutoff
            ):
                self._delete_everywhere(info)
                removed += 1
        if removed:
            self.queues.drop_expired(self.log.start_pos)
        self.msgids.expire_before(cutoff // MS_PER_HOUR)
        return removed

    def run_once(self, now_ms: int | None = None) -> dict:
        """One pass of the background worker: compact, upload and expire by age."""
        now = _now_ms() if now_ms is None else int(now_ms)
        cfg = self.config
        self.checkpoint()
        with self.lock:
            report = counted(
                self.counters, "compaction", self._compact, now - int(cfg.compact_after_s * 1000)
            )
            count(self.counters, "upload_runs")
            uploaded = 0
            for info in self.list_files():
                if info.state == State.COMPACTED and _mtime_ms(self._local_path(info)) <= now - int(
                    cfg.upload_after_s * 1000
                ):
                    try:
                        self.upload_file(info)
                    except Unavailable as exc:
                        # The object store is unreachable: the file stays compacted and local
                        # and is tried again next pass; expiry below still runs.
                        report["upload_error"] = exc.message
                        c = self.counters
                        c["upload_failures"] = c.get("upload_failures", 0) + 1
                        break
                    uploaded += 1
            report["uploaded"] = uploaded
            report["expired"] = counted(self.counters, "retention", self.expire, now)
        self.log.reap_retired()
        self.keyidx.reap_retired()
        return report
