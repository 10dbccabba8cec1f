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
from storage_node.errors import CorruptData
from storage_node.formats.checkpoint import Checkpoint
from storage_node.formats.compressed import decompress_all
from storage_node.formats.keyhash import key_hash
from storage_node.formats.msgid import parse_msg_id
from storage_node.formats.queue_index import ENTRY_DTYPE, tag_hash
from storage_node.formats.record import FRAME_SIZE, check_frame, decode_frame
from storage_node.formats.segment import last_batch_end, parse_segment_name, scan_segment
from storage_node.store.keyindex import is_index_name, name_begin_pos
from storage_node.store.segments import BlockSegment, CorruptSegment, RawSegment

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
        store.__dict__.pop("_replay_key_covered", None)
        report["replayed_records"] = replay(store, start, report)
        store.__dict__.pop("_replay_key_covered", None)
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
    """Re-index every record from log position ``start`` to the end; returns how many."""
    log = store.log
    count = 0
    batch: list = []
    for seg_start in list(log.starts):
        seg_end = log.segment_end(seg_start)
        if seg_end <= start:
            continue
        handle = log.segments[seg_start]
        try:
            data = _segment_bytes(handle)
        except CorruptData as exc:
            report["corrupt_files"].append(f"segment {seg_start:020d}: {exc}")
            continue
        off = max(0, start - seg_start)
        n = len(data)
        while off < n:
            try:  # one CRC check per frame; the values themselves are not needed to index
                records = decode_frame(data, off, with_value=False)
                size = int.from_bytes(data[off : off + 4], "little")
            except CorruptData:
                claimed = int.from_bytes(data[off : off + 4], "little") if n - off >= 4 else 0
                if (
                    claimed >= FRAME_SIZE
                    and off + claimed < n
                    and check_frame(data, off + claimed, n - off - claimed) > 0
                ):
                    if seg_start + off not in report["corrupt_records"]:
                        report["corrupt_records"].append(seg_start + off)
                    off += claimed
                    continue
                report["corrupt_records"].append(seg_start + off)
                break
            for row, rec in records:
                batch.append((seg_start + off + row, rec))
            off += size
            count += len(records)
            if len(batch) >= 10_000:
                _apply(store, batch)
                batch = []
    if batch:
        _apply(store, batch)
    return count


def _apply(store: Store, batch: list) -> None:
    """Index replayed records (in log order) exactly as the append path would have."""
    queued: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    keys: list[tuple[int, int, int]] = []
    ids: dict[tuple[int, str, int], list[tuple[int, int]]] = {}
    prefixes: dict[str, list[tuple[int, int]]] = {}
    covered = store.__dict__.get("_replay_key_covered")
    if covered is None:  # items already held by compacted/uploaded files are not re-added
        kx = store.keyidx
        covered = max(
            (kx.files[n].end_pos for n in kx.names if kx.states[n] != "unsealed"), default=-1
        )
        store.__dict__["_replay_key_covered"] = covered
    for pos, rec in batch:
        if rec.topic not in store.topics.topics:
            continue
        queued.setdefault((rec.topic, rec.partition), []).append(
            (
                rec.queue_offset,
                pos,
                rec.size,
                tag_hash(rec.tag.encode()) if rec.tag is not None else 0,
            )
        )
        if rec.key is not None and pos > covered:
            keys.append((key_hash(rec.key), pos, rec.store_ms))
        if rec.producer_id is not None:
            store.dedup.extend(
                rec.producer_id, rec.sequence, rec.partition, rec.queue_offset, rec.msg_id
            )
        store.last_store_ms = max(store.last_store_ms, rec.store_ms)
        head, _, seq = rec.msg_id.rpartition("-")
        group = prefixes.get(head)
        if group is None:  # one full parse per app-ip-hour prefix, not per record
            try:
                mid = parse_msg_id(rec.msg_id)
            except Exception:  # an ID that no longer parses is simply not indexed
                continue
            group = prefixes[head] = ids.setdefault((mid.hour, mid.app, mid.ip), [])
        if seq.isdigit() and len(seq) <= 15:
            group.append((int(seq), pos))
    for (topic, part), rows in queued.items():
        q = store.queue(topic, part)
        entries = []
        for qoff, pos, size, th in rows:
            if qoff < q.next_offset + len(entries):
                continue
            while q.next_offset + len(entries) < qoff:  # lost to mid-file corruption
                entries.append((0, 0, 0))
            entries.append((pos, size, th))
        if entries:
            q.append(np.array(entries, dtype=ENTRY_DTYPE))
    for (hour, app, ip), rows in ids.items():  # runs of consecutive numbers: one write each
        seqs = np.array([r[0] for r in rows], dtype=np.int64)
        positions = np.array([r[1] for r in rows], dtype=np.uint64)
        cuts = np.flatnonzero(np.diff(seqs) != 1) + 1
        for a, b in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(seqs)].tolist(), strict=True):
            store.msgids.put_run(app, hour, ip, int(seqs[a]), positions[a:b])
    i = 0
    while i < len(keys):
        j = i
        while j < len(keys) and keys[j][2] == keys[i][2]:
            j += 1
        run = keys[i:j]
        store.keyidx.add(
            np.array([k[0] for k in run], dtype=np.uint32),
            np.array([k[1] for k in run], dtype=np.uint64),
            run[0][2],
        )
        i = j
