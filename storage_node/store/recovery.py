"""Recovery at open: folder states, torn tails, index replay past the checkpoint.

After a clean shutdown (the checkpoint's ``clean`` flag) nothing is rescanned. Otherwise:

1. delete temporaries (``*.tmp``: half-written files of an interrupted atomic write);
2. a file present in two lifecycle folders keeps its furthest state (uploaded > compacted >
   unsealed); the other copies are deleted;
3. the last segment is scanned from the checkpoint position: a torn tail (a frame that is
   short or fails its CRC at the end) is truncated, back to the end of the last whole batch
   (batches never straddle segments unless bigger than one); a bad frame followed by valid
   ones is mid-file corruption, which is kept, skipped by the indexes and reported on read;
4. derived indexes are cut back to the checkpoint (queue next offsets, key-index item
   count, key-index files begun after it) and rebuilt from the records past it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from storage_node.backend.files import fsync_dir, remove_file, remove_temporaries
from storage_node.errors import CorruptData, InvalidArgument
from storage_node.formats.checkpoint import Checkpoint
from storage_node.formats.compressed import decompress_all
from storage_node.formats.keyhash import key_hashes
from storage_node.formats.msgid import numbered_ids, parse_msg_id
from storage_node.formats.queue_index import ENTRY_DTYPE, tag_hash
from storage_node.formats.record import (
    FLAG_PRODUCER,
    FRAME,
    FRAME_SIZE,
    ROW,
    ROW_DTYPE,
    ROW_KEY,
    ROW_TAG,
)
from storage_node.formats.segment import (
    frame_step,
    last_batch_end,
    parse_segment_name,
    scan_segment,
)
from storage_node.store.keyindex import is_index_name, name_begin_pos
from storage_node.store.segments import BlockSegment, CorruptSegment, RawSegment
from storage_node.store.types import AppendColumns

if TYPE_CHECKING:
    from storage_node.store.store import Store

STATES = ("unsealed", "compacted", "uploaded")


def resolve_states(dirs: dict[str, str], valid_name: object, report: dict) -> dict[str, str]:
    """Map each file name to its furthest state, deleting copies left in earlier folders."""
    found: dict[str, list[str]] = {}
    for state in STATES:
        for name in os.listdir(dirs[state]):
            if valid_name(name):  # type: ignore[operator]
                found.setdefault(name, []).append(state)
    out = {}
    for name, states in found.items():
        keep = states[-1]
        for state in states[:-1]:
            remove_file(os.path.join(dirs[state], name))
            fsync_dir(dirs[state])
            report["duplicates_removed"].append(f"{state}/{name}")
        out[name] = keep
    return out


def recover(store: Store) -> dict:
    report: dict = {
        "clean": False,
        "temporaries_removed": [],
        "duplicates_removed": [],
        "truncated_bytes": 0,
        "corrupt_records": [],
        "corrupt_files": [],
        "replayed_records": 0,
        "replayed_from": 0,
    }
    report["temporaries_removed"] = remove_temporaries(store.root)
    ck = Checkpoint.load(store.checkpoint_path)
    clean = ck is not None and ck.clean
    report["clean"] = clean
    _recover_segments(store, ck, clean, report)
    _recover_key_indexes(store, ck, clean, report)
    _recover_queues(store, ck, clean)
    if ck is not None:
        store.last_store_ms = ck.last_store_ms
    if not clean:
        start = ck.log_end if ck is not None else 0
        start = max(start, store.log.start_pos)
        report["replayed_from"] = start
        report["replayed_records"] = replay(store, start, report)
        store.dedup.end_replay()
    for q in store.queues.values():
        adjust_first_offset(store, q)
    return report


def _recover_segments(store: Store, ck: Checkpoint | None, clean: bool, report: dict) -> None:
    log = store.log
    states = resolve_states(log.dirs, lambda n: parse_segment_name(n) is not None, report)
    for name, state in sorted(states.items()):
        start = int(name)
        path = os.path.join(log.dirs[state], name)
        try:
            if state == "unsealed":
                handle = RawSegment(start, path)
            elif state == "compacted":
                handle = BlockSegment.local(start, path)
            else:
                handle = BlockSegment.remote(start, path, store.objects)
        except (CorruptData, OSError, ValueError, KeyError) as exc:
            report["corrupt_files"].append(f"{state}/{name}: {exc}")
            handle = CorruptSegment(start, state, 0, str(exc))
        log.install(start, handle)
    end = ck.log_end if ck is not None else 0
    if log.starts:
        last = log.starts[-1]
        handle = log.segments[last]
        if isinstance(handle, RawSegment):
            size = handle.raw_size
            if clean:
                end = last + size
            else:
                with open(handle.path, "rb") as fh:
                    data = fh.read()
                scan_from = max(0, min(size, (ck.log_end if ck else 0) - last))
                valid_end, corrupt = scan_segment(data, scan_from)
                valid_end = last_batch_end(data, scan_from, valid_end)  # no half batches
                if valid_end < size:
                    os.truncate(handle.path, valid_end)
                    fd = os.open(handle.path, os.O_RDONLY)
                    os.fsync(fd)
                    os.close(fd)
                    report["truncated_bytes"] += size - valid_end
                report["corrupt_records"].extend(last + c for c in corrupt)
                end = last + valid_end
        else:
            end = max(end, last + handle.raw_size)
    log.set_end(end)


def _recover_key_indexes(store: Store, ck: Checkpoint | None, clean: bool, report: dict) -> None:
    kx = store.keyidx
    states = resolve_states(kx.dirs, is_index_name, report)
    log_end = ck.log_end if ck is not None else 0
    ck_name = ck.key_index_name if ck is not None else None
    for name, state in sorted(states.items()):
        path = os.path.join(kx.dirs[state], name)
        if (
            not clean
            and state == "unsealed"
            and name != ck_name
            and name_begin_pos(name) >= log_end
        ):
            remove_file(path)  # begun after the checkpoint: replay rebuilds it
            continue
        try:
            if state == "uploaded":
                handle = kx.open_remote(path, store.objects)
            else:
                handle = kx.open_local(path, state)
        except (CorruptData, OSError, ValueError, KeyError) as exc:
            report["corrupt_files"].append(f"index/{state}/{name}: {exc}")
            continue
        kx.install(name, state, handle)
        if name == ck_name and state == "unsealed":
            if not clean:
                handle.truncate_to(ck.key_index_count)  # type: ignore[union-attr]
            if not handle.full:  # type: ignore[union-attr]
                kx.active = handle  # type: ignore[assignment]


def _recover_queues(store: Store, ck: Checkpoint | None, clean: bool) -> None:
    saved = ck.queues if ck is not None else {}
    for cfg in store.topics.all():
        for p in range(cfg.partitions):
            nxt = saved.get(cfg.name, {}).get(str(p))
            if nxt is None and not clean:
                nxt = 0  # topic created after the checkpoint: every record of it is replayed
            store.queue(cfg.name, p, nxt)


def adjust_first_offset(store: Store, q: object) -> None:
    """Raise a queue's first offset past entries whose records expired with their segment."""
    start = store.log.start_pos
    lo, hi = q.first_offset, q.next_offset  # type: ignore[attr-defined]
    while lo < hi:
        mid = (lo + hi) // 2
        if q.entries(mid, 1)[0][0] >= start:  # type: ignore[attr-defined]
            hi = mid
        else:
            lo = mid + 1
    q.drop_before(lo)  # type: ignore[attr-defined]


def _segment_bytes(handle: object) -> bytes:
    if isinstance(handle, RawSegment):
        return handle.read_all()
    if isinstance(handle, BlockSegment):
        size = handle.stored_size
        return decompress_all(handle.reader._read(0, size))
    raise CorruptData(getattr(handle, "reason", "unreadable segment"))


def replay(store: Store, start: int, report: dict) -> int:
    """Re-index every record from log position ``start`` to the end; returns how many.

    Frames are indexed with array operations, consecutive frames of one appended batch
    (same topic, producer and store time) together: the rows give queue entries and
    positions, the keys are hashed together, node-assigned IDs are one run.
    """
    log = store.log
    kx = store.keyidx
    # items already held by compacted/uploaded key-index files are not added again
    covered = max((kx.files[n].end_pos for n in kx.names if kx.states[n] != "unsealed"), default=-1)
    count = 0
    for seg_start in list(log.starts):
        if log.segment_end(seg_start) <= start:
            continue
        try:
            data = _segment_bytes(log.segments[seg_start])
        except CorruptData as exc:
            report["corrupt_files"].append(f"segment {seg_start:020d}: {exc}")
            continue
        view = memoryview(data)
        off = max(0, start - seg_start)
        n = len(data)
        group: list[tuple[memoryview, int]] = []
        group_key: tuple = ()
        while off < n:
            size, damaged = frame_step(data, off)
            if damaged and seg_start + off not in report["corrupt_records"]:
                report["corrupt_records"].append(seg_start + off)
            if not size:
                break
            if damaged:
                off += size  # mid-file damage: skip the frame, index what follows
                continue
            frame = view[off : off + size]
            key = _batch_key(frame)
            if group and (key != group_key or len(group) >= MAX_GROUP_FRAMES):
                count += _index_frames(store, group, covered)
                group = []
            group_key = key
            group.append((frame, seg_start + off))
            off += size
        if group:
            count += _index_frames(store, group, covered)
    return count


MAX_GROUP_FRAMES = 256


def _batch_key(frame: memoryview) -> tuple:
    """What the frames of one appended batch share: producer flag, store time, sequence,
    topic and producer id."""
    _size, _crc, _m, flags, count, tlen, plen, _r, store_ms, sequence = FRAME.unpack_from(frame)
    lead = FRAME_SIZE + ROW * count
    return (flags & FLAG_PRODUCER, store_ms, sequence, bytes(frame[lead : lead + tlen + plen]))


def _index_frames(store: Store, frames: list[tuple[memoryview, int]], covered: int) -> int:
    """Index verified frames of one batch (log positions given) as its append did."""
    first = frames[0][0]
    _size, _crc, _m, flags, count0, tlen, plen, _r, store_ms, sequence = FRAME.unpack_from(first)
    lead = FRAME_SIZE + ROW * count0
    topic = bytes(first[lead : lead + tlen]).decode()
    store.last_store_ms = max(store.last_store_ms, store_ms)
    rows_parts, pos_parts, key_parts, id_parts = [], [], [], []
    tags: list[tuple[int, int]] = []  # (record number, tag hash)
    total = 0
    for frame, pos in frames:
        count = FRAME.unpack_from(frame)[4]
        rows = np.frombuffer(frame, dtype=ROW_DTYPE, count=count, offset=FRAME_SIZE)
        rows_parts.append(rows)
        pos_parts.append(pos + FRAME_SIZE + ROW * np.arange(count, dtype=np.int64))
        kstart, istart = int(rows["koff"][0]), int(rows["ioff"][0])
        key_parts.append(frame[kstart : kstart + int(rows["klen"].sum())])
        id_parts.append(frame[istart : istart + int(rows["idlen"].sum())])
        for i in np.flatnonzero(rows["flags"] & ROW_TAG).tolist():
            toff, taglen = int(rows["toff"][i]), int(rows["taglen"][i])
            tags.append((total + i, tag_hash(bytes(frame[toff : toff + taglen]))))
        total += count
    if topic not in store.topics.topics:
        return total
    rows = rows_parts[0] if len(rows_parts) == 1 else np.concatenate(rows_parts)
    positions = pos_parts[0] if len(pos_parts) == 1 else np.concatenate(pos_parts)
    parts = rows["partition"].astype(np.int64)
    qoffs = rows["qoff"].astype(np.int64)
    klen = rows["klen"].astype(np.int64)
    idlen = rows["idlen"].astype(np.int64)
    entries = np.zeros(total, dtype=ENTRY_DTYPE)
    entries["pos"] = positions
    entries["size"] = ROW + klen + rows["taglen"] + idlen + rows["vlen"]
    for i, th in tags:
        entries["tag"][i] = th
    for p in np.unique(parts).tolist():
        mine = np.flatnonzero(parts == p)
        _replay_queue(store.queue(topic, p), qoffs[mine], entries[mine])
    has_key = (rows["flags"] & ROW_KEY).astype(bool)
    keyed = has_key & (positions > covered)
    if keyed.any():
        hashes = key_hashes(b"".join(key_parts), np.where(has_key, klen, -1))
        store.keyidx.add(hashes[keyed], positions[keyed].astype(np.uint64), store_ms)
    ids = b"".join(id_parts)
    if flags & FLAG_PRODUCER:
        producer = bytes(first[lead + tlen : lead + tlen + plen]).decode()
        texts = AppendColumns(parts, qoffs, ids, idlen).msg_ids
        for p, o, m in zip(parts.tolist(), qoffs.tolist(), texts, strict=True):
            store.dedup.extend(producer, sequence, p, o, m)
    _replay_ids(store, ids, idlen, positions)
    return total


def _replay_queue(q: object, qoffs: np.ndarray, entries: np.ndarray) -> None:
    """Append the entries a partition does not hold yet; offsets lost to mid-file
    corruption before them become empty entries (reads report them)."""
    nxt = q.next_offset  # type: ignore[attr-defined]
    keep = qoffs >= nxt
    qoffs, entries = qoffs[keep], entries[keep]
    if not len(qoffs):
        return
    if int(qoffs[0]) == nxt and int(qoffs[-1]) == nxt + len(qoffs) - 1:
        q.append(entries)  # type: ignore[attr-defined]
        return
    filled = np.zeros(int(qoffs.max()) - nxt + 1, dtype=ENTRY_DTYPE)
    filled[qoffs - nxt] = entries
    q.append(filled)  # type: ignore[attr-defined]


def _replay_ids(store: Store, ids: bytes, lens: np.ndarray, positions: np.ndarray) -> None:
    """Index a frame's message IDs: one run when they are consecutive node-assigned numbers
    (the usual frame), else one by one."""
    first_len = int(lens[0])
    try:
        first = parse_msg_id(ids[:first_len].decode())
    except (InvalidArgument, UnicodeDecodeError):
        first = None
    if first is not None:
        prefix = ids[: first_len - len(str(first.seq))]
        run = numbered_ids(prefix, first.seq, len(lens))
        if run.blob == ids:
            store.msgids.put_run(first.app, first.hour, first.ip, first.seq, positions)
            return
    texts = AppendColumns(positions, positions, ids, lens).msg_ids
    for text, p in zip(texts, positions.tolist(), strict=True):
        try:
            store.msgids.put(parse_msg_id(text), p)
        except InvalidArgument:
            continue  # an ID that no longer parses is simply not indexed


def index_copied(store: Store, data: bytes, pos: int) -> int:
    """(A follower, append lock held.) Index whole, checked frames copied from a leader's
    log at position ``pos`` exactly as replay does, so a follower promoted to leader serves
    offsets, keys, message IDs and idempotent batches at once. Returns the records."""
    covered = -1
    view = memoryview(data)
    off = 0
    count = 0
    group: list[tuple[memoryview, int]] = []
    group_key: tuple = ()
    while off < len(data):
        size = int.from_bytes(data[off : off + 4], "little")
        frame = view[off : off + size]
        key = _batch_key(frame)
        if group and (key != group_key or len(group) >= MAX_GROUP_FRAMES):
            count += _index_frames(store, group, covered)
            group = []
        group_key = key
        group.append((frame, pos + off))
        off += size
    if group:
        count += _index_frames(store, group, covered)
    store.dedup.end_replay()  # copies end at whole batches: the next one starts afresh
    return count
