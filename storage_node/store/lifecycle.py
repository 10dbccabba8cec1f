"""File lifecycle: seal → compact → upload → expire, plus remote (Spark) compaction.

The heavy work (reading, compressing, uploading) runs outside the append lock; the result
is written with an atomic move into the next folder, swapped in for readers, and only then
is the earlier copy deleted. Recovery keeps the furthest copy if a crash lands in between,
so every acknowledged message stays readable in whatever state its files are.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from typing import TYPE_CHECKING

from storage_node.backend.files import atomic_write, fsync_dir, remove_file
from storage_node.errors import CorruptData, InvalidArgument, InvalidName, NotFound, Unavailable
from storage_node.formats.compressed import compact_segment_bytes, verify_compacted_segment
from storage_node.formats.key_index import KeyIndexFile
from storage_node.formats.key_index_compacted import (
    compact_key_index_bytes,
    verify_compacted_key_index,
)
from storage_node.formats.msgid import MS_PER_HOUR
from storage_node.formats.segment import parse_segment_name, segment_name
from storage_node.store.keyindex import is_index_name
from storage_node.store.pinned import pinned_ranges
from storage_node.store.recovery import adjust_first_offset
from storage_node.store.segments import BlockSegment, RawSegment
from storage_node.store.types import FileInfo

if TYPE_CHECKING:
    from storage_node.store.store import Store

KINDS = ("segment", "key_index")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _mtime_ms(path: str) -> int:
    try:
        return int(os.stat(path).st_mtime * 1000)
    except FileNotFoundError:
        return 0


# ---- describing files ------------------------------------------------------------------
def _segment_begin_ms(store: Store, start: int) -> int | None:
    cache = store.__dict__.setdefault("_seg_begin_ms", {})
    if start in cache:
        return cache[start]
    if store.log.segment_end(start) <= start:
        return None
    try:
        value = store.log.read(start).store_ms
    except Exception:
        return None
    cache[start] = value
    return value


def _segment_state(store: Store, start: int) -> str:
    handle = store.log.segments[start]
    if isinstance(handle, RawSegment):
        return "sealed" if store.log.is_sealed(start) else "unsealed"
    return handle.state


def segment_info(store: Store, start: int) -> FileInfo:
    handle = store.log.segments[start]
    starts = store.log.starts
    i = starts.index(start)
    end_ms = _segment_begin_ms(store, starts[i + 1]) if i + 1 < len(starts) else None
    if end_ms is None and store.log.segment_end(start) > start:
        end_ms = store.last_store_ms
    raw = store.log.segment_end(start) - start
    stored = handle.stored_size if not isinstance(handle, RawSegment) else raw
    return FileInfo(
        "segment",
        _segment_state(store, start),
        segment_name(start),
        raw,
        stored,
        _segment_begin_ms(store, start),
        end_ms,
    )


def key_index_info(store: Store, name: str) -> FileInfo:
    kx = store.keyidx
    h = kx.files[name]
    state = kx.states[name]
    if isinstance(h, KeyIndexFile):
        if h is not kx.active:
            state = "sealed"
        size = h.items_base + h.count * 20
        try:
            stored = os.stat(h.path).st_blocks * 512
        except FileNotFoundError:
            stored = 0
        return FileInfo("key_index", state, name, size, stored, h.begin_ms, h.end_ms)
    return FileInfo("key_index", state, name, h.stored_size, h.stored_size, h.begin_ms, h.end_ms)


def list_files(store: Store) -> list[FileInfo]:
    out = [segment_info(store, s) for s in list(store.log.starts) if s in store.log.segments]
    out.extend(
        key_index_info(store, n) for n in list(store.keyidx.names) if n in store.keyidx.files
    )
    return out


def sealed_files(store: Store) -> list[FileInfo]:
    """Sealed files not yet compacted: the work list of a remote compaction job."""
    return [f for f in list_files(store) if f.state == "sealed"]


# ---- compaction ------------------------------------------------------------------------
def _compress_segments(store: Store) -> bool:
    topics = store.topics.all()
    return not topics or any(t.compression == "lz4" for t in topics)


def _check_kind_name(kind: str, name: str) -> None:
    if kind not in KINDS:
        raise InvalidArgument(f"kind must be one of {KINDS}, not {kind!r}")
    ok = parse_segment_name(name) is not None if kind == "segment" else is_index_name(name)
    if not isinstance(name, str) or not ok:
        raise InvalidName(f"invalid {kind} file name {name!r}", name=str(name))


def open_sealed(store: Store, kind: str, name: str) -> bytes:
    """The bytes a remote compactor rewrites: a raw segment or a trimmed IndexFile image."""
    _check_kind_name(kind, name)
    info = {(f.kind, f.name): f for f in sealed_files(store)}.get((kind, name))
    if info is None:
        raise NotFound(f"no sealed {kind} named {name!r}", name=name)
    return _sealed_bytes(store, kind, name)


def _sealed_bytes(store: Store, kind: str, name: str) -> bytes:
    """A sealed file's bytes: a raw segment, or a trimmed IndexFile image (NotFound once
    it has been compacted)."""
    if kind == "segment":
        segment = store.log.segments[int(name)]
        if isinstance(segment, RawSegment):
            return segment.read_all()
    else:
        index = store.keyidx.files[name]
        if isinstance(index, KeyIndexFile):
            return index.trimmed_bytes()
    raise NotFound(f"no sealed {kind} named {name!r}", name=name)


def _install_segment(store: Store, start: int, data: bytes) -> FileInfo:
    name = segment_name(start)
    dirs = store.log.dirs
    path = os.path.join(dirs["compacted"], name)
    atomic_write(path, data)
    store.log.install(start, BlockSegment.local(start, path))
    remove_file(os.path.join(dirs["unsealed"], name))
    fsync_dir(dirs["unsealed"])
    store.counters["compacted_segments"] += 1
    return segment_info(store, start)


def _install_key_index(store: Store, name: str, data: bytes) -> FileInfo:
    kx = store.keyidx
    path = os.path.join(kx.dirs["compacted"], name)
    atomic_write(path, data)
    kx.install(name, "compacted", kx.open_local(path, "compacted"))
    remove_file(os.path.join(kx.dirs["unsealed"], name))
    fsync_dir(kx.dirs["unsealed"])
    store.counters["compacted_key_indexes"] += 1
    return key_index_info(store, name)


def compact_file(store: Store, info: FileInfo) -> FileInfo:
    if info.kind == "segment":
        start = int(info.name)
        raw = _sealed_bytes(store, info.kind, info.name)
        return _install_segment(store, start, compact_segment_bytes(raw, _compress_segments(store)))
    raw = _sealed_bytes(store, info.kind, info.name)
    return _install_key_index(store, info.name, compact_key_index_bytes(raw))


def commit_compacted(store: Store, kind: str, name: str, data: bytes, crc32: int) -> FileInfo:
    """Verify a rewrite made elsewhere, then move it into compacted/ atomically."""
    _check_kind_name(kind, name)
    if not isinstance(data, bytes | bytearray) or zlib.crc32(data) != crc32:
        raise InvalidArgument("compacted data does not match its crc32", name=name)
    with store._maint_lock:
        current = {(f.kind, f.name): f for f in list_files(store)}.get((kind, name))
        if current is None:
            raise NotFound(f"no {kind} named {name!r}", name=name)
        if current.state in ("compacted", "uploaded"):
            return current  # another compactor won: same content, nothing to do
        if current.state != "sealed":
            raise InvalidArgument(f"{kind} {name} is not sealed yet", name=name)
        if not covered_by_checkpoint(store, current):
            store.checkpoint(clean=False)
        raw = open_sealed(store, kind, name)
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
            return _install_segment(store, int(name), bytes(data))
        return _install_key_index(store, name, bytes(data))


def compact_now(store: Store) -> dict:
    """Seal the active files and compact everything sealed, whatever its age."""
    store.seal_active()
    with store._maint_lock:
        return _compact(store, None)


def covered_by_checkpoint(store: Store, info: FileInfo) -> bool:
    """True when the checkpoint on disk already counts every item of a sealed key index.

    Recovery cuts the checkpoint's active file back and replays the log past the
    checkpoint; a key-index file that was sealed after the checkpoint was taken must not
    be compacted before the next one, or replay would index its last items twice.
    """
    if info.kind != "key_index":
        return True
    ck = store.saved_checkpoint
    handle = store.keyidx.files.get(info.name)
    if ck is None or handle is None or info.name == ck.key_index_name:
        return False
    return handle.end_pos < ck.log_end


def _compact(store: Store, older_than_ms: int | None) -> dict:
    report = {"segments": 0, "key_indexes": 0, "bytes_before": 0, "bytes_after": 0}
    for info in sealed_files(store):
        if not covered_by_checkpoint(store, info):
            continue  # next round, after the next checkpoint
        if older_than_ms is not None:
            path = _local_path(store, info)
            if _mtime_ms(path) > older_than_ms:
                continue
        after = compact_file(store, info)
        report["segments" if info.kind == "segment" else "key_indexes"] += 1
        report["bytes_before"] += info.size
        report["bytes_after"] += after.stored_size
    return report


def _local_path(store: Store, info: FileInfo) -> str:
    state = "unsealed" if info.state in ("unsealed", "sealed") else info.state
    dirs = store.log.dirs if info.kind == "segment" else store.keyidx.dirs
    return os.path.join(dirs[state], info.name)


# ---- upload and expiry -------------------------------------------------------------------
def upload_file(store: Store, info: FileInfo) -> None:
    kind_dir = "commitlog" if info.kind == "segment" else "index"
    dirs = store.log.dirs if info.kind == "segment" else store.keyidx.dirs
    src = os.path.join(dirs["compacted"], info.name)
    key = f"{kind_dir}/{info.name}"
    store.objects.put(key, src)
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
    mpath = os.path.join(dirs["uploaded"], info.name)
    atomic_write(mpath, json.dumps(manifest, sort_keys=True).encode())
    if info.kind == "segment":
        store.log.install(int(info.name), BlockSegment.remote(int(info.name), mpath, store.objects))
    else:
        store.keyidx.install(info.name, "uploaded", store.keyidx.open_remote(mpath, store.objects))
    remove_file(src)
    fsync_dir(dirs["compacted"])
    store.counters["uploaded_files"] += 1


def _delete_everywhere(store: Store, info: FileInfo) -> None:
    dirs = store.log.dirs if info.kind == "segment" else store.keyidx.dirs
    if info.kind == "segment":
        store.log.remove(int(info.name))
    else:
        store.keyidx.remove(info.name)
    if info.state == "uploaded":
        store.objects.delete(f"{'commitlog' if info.kind == 'segment' else 'index'}/{info.name}")
    for state in ("unsealed", "compacted", "uploaded"):
        if remove_file(os.path.join(dirs[state], info.name)):
            fsync_dir(dirs[state])
    store.counters["expired_files"] += 1


def expire(store: Store, now_ms: int) -> int:
    topics = store.topics.all()
    hours = max((t.retention_hours for t in topics), default=store.config.default_retention_hours)
    cutoff = now_ms - int(hours * 3_600_000)
    removed = 0
    for info in list_files(store):  # segments oldest first: expiry keeps the log contiguous
        if info.kind != "segment":
            continue
        if info.state in ("unsealed",) or info.end_ms is None or info.end_ms >= cutoff:
            break
        _delete_everywhere(store, info)
        removed += 1
    for info in list_files(store):
        if (
            info.kind == "key_index"
            and info.state != "unsealed"
            and info.end_ms is not None
            and info.end_ms < cutoff
        ):
            _delete_everywhere(store, info)
            removed += 1
    if removed:
        for q in list(store.queues.values()):
            adjust_first_offset(store, q)
    store.msgids.expire_before(cutoff // MS_PER_HOUR)
    return removed


def run_lifecycle_once(store: Store, now_ms: int | None = None) -> dict:
    """One pass of the background worker: compact, upload and expire by age."""
    now = _now_ms() if now_ms is None else int(now_ms)
    cfg = store.config
    store.checkpoint(clean=False)
    with store._maint_lock:
        report = _compact(store, now - int(cfg.compact_after_s * 1000))
        uploaded = 0
        for info in list_files(store):
            if info.state == "compacted" and _mtime_ms(_local_path(store, info)) <= now - int(
                cfg.upload_after_s * 1000
            ):
                try:
                    upload_file(store, info)
                except Unavailable as exc:
                    # The object store is unreachable: the file stays compacted and local and
                    # is tried again next pass; expiry below still runs.
                    report["upload_error"] = exc.message
                    store.counters["upload_failures"] = store.counters.get("upload_failures", 0) + 1
                    break
                uploaded += 1
        report["uploaded"] = uploaded
        report["expired"] = expire(store, now)
    store.log.reap_retired()
    store.keyidx.reap_retired()
    return report
