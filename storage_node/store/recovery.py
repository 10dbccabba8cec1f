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

Like Kafka's LogLoader, ``LogLoader`` is handed what it fills in (the commit log, the
indexes, the idempotency table, the topics) and returns what it found (``Loaded``: the
report, the last store time); it knows nothing of the store that owns those parts.

Over 400 lines on purpose: the four recovery steps above run in order over the same
folders and must be read together to see that a crash at any point recovers exactly.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from storage_node.backend.files import fsync_dir, remove_file, remove_temporaries
from storage_node.backend.objectstore import ObjectStore
from storage_node.errors import CorruptData, InvalidArgument
from storage_node.formats.checkpoint import Checkpoint
from storage_node.formats.filenames import (
    FOLDERS,
    KEY_INDEX_DIR,
    State,
    is_index_name,
    name_begin_pos,
    parse_segment_name,
    segment_name,
)
from storage_node.formats.key_index_file import KeyIndexFile
from storage_node.formats.keyhash import key_hashes
from storage_node.formats.message_id import numbered_ids, parse_msg_id
from storage_node.formats.queue_index import ENTRY_DTYPE, QueueIndex, tag_hash
from storage_node.formats.record import (
    FLAG_PRODUCER,
    FRAME_SIZE,
    ROW,
    ROW_DTYPE,
    ROW_KEY,
    ROW_TAG,
    FrameHeader,
    last_batch_end,
    scan_frames,
    walk_frames,
)
from storage_node.store.commitlog import CommitLog
from storage_node.store.dedup import DedupTable
from storage_node.store.key_index_set import KeyIndexSet
from storage_node.store.msg_id_index import MsgIdIndexes
from storage_node.store.offsets import OFFSETS_TOPIC, OffsetStore, commits_in
from storage_node.store.queues import PartitionQueues
from storage_node.store.segment_readers import (
    BlockSegment,
    CorruptSegment,
    RawSegment,
    SegmentHandle,
)
from storage_node.store.topics import TopicRegistry
from storage_node.store.types import AppendColumns

MAX_GROUP_FRAMES = 256


@dataclass
class RecoveryReport:
    """What recovery found and did (``Store.recovery_report`` and stats hold it as a dict)."""

    clean: bool = False
    temporaries_removed: list[str] = field(default_factory=list)
    duplicates_removed: list[str] = field(default_factory=list)
    truncated_bytes: int = 0
    corrupt_records: list[int] = field(default_factory=list)
    corrupt_files: list[str] = field(default_factory=list)
    replayed_records: int = 0
    replayed_from: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Loaded:
    """What a load returns: its report and the newest store time of the log."""

    report: RecoveryReport
    last_store_ms: int
    checkpoint: Checkpoint | None


def resolve_states(
    dirs: dict[str, str], valid_name: Callable[[str], bool], report: RecoveryReport
) -> dict[str, State]:
    """Map each file name to its furthest state, deleting copies left in earlier folders."""
    found: dict[str, list[State]] = {}
    for state in FOLDERS:
        for name in os.listdir(dirs[state]):
            if valid_name(name):
                found.setdefault(name, []).append(state)
    out: dict[str, State] = {}
    for name, states in found.items():
        keep = states[-1]
        for old in states[:-1]:
            remove_file(os.path.join(dirs[old], name))
            fsync_dir(dirs[old])
            report.duplicates_removed.append(f"{old}/{name}")
        out[name] = keep
    return out


class LogLoader:
    """Brings the parts of a store in ``root`` back in line with its log (see above)."""

    def __init__(
        self,
        root: str,
        checkpoint_path: str,
        log: CommitLog,
        keyidx: KeyIndexSet,
        msgids: MsgIdIndexes,
        queues: PartitionQueues,
        dedup: DedupTable,
        topics: TopicRegistry,
        objects: ObjectStore,
        offsets: OffsetStore | None = None,
    ) -> None:
        """``offsets`` takes the offset commits found in the log (replicated logs)."""
        self.root = root
        self.checkpoint_path = checkpoint_path
        self.log = log
        self.keyidx = keyidx
        self.msgids = msgids
        self.queues = queues
        self.dedup = dedup
        self.topics = topics
        self.objects = objects
        self.offsets = offsets
        self.report = RecoveryReport()
        self.last_store_ms = 0

    def load(self) -> Loaded:
        report = self.report
        report.temporaries_removed = remove_temporaries(self.root)
        ck = Checkpoint.load(self.checkpoint_path)
        clean = ck is not None and ck.clean
        report.clean = clean
        self._recover_segments(ck, clean)
        self._recover_key_indexes(ck, clean)
        self._recover_queues(ck, clean)
        if ck is not None:
            self.last_store_ms = ck.last_store_ms
        if not clean:
            start = ck.log_end if ck is not None else 0
            start = max(start, self.log.start_pos)
            report.replayed_from = start
            report.replayed_records = self.replay(start)
            self.dedup.end_replay()
        self.queues.drop_expired(self.log.start_pos)
        return Loaded(report, self.last_store_ms, ck)

    def _recover_segments(self, ck: Checkpoint | None, clean: bool) -> None:
        log, report = self.log, self.report
        states = resolve_states(log.dirs, lambda n: parse_segment_name(n) is not None, report)
        for name, state in sorted(states.items()):
            start = int(name)
            path = os.path.join(log.dirs[state], name)
            handle: SegmentHandle
            try:
                if state == State.UNSEALED:
                    handle = RawSegment(start, path)
                elif state == State.COMPACTED:
                    handle = BlockSegment.local(start, path)
                else:
                    handle = BlockSegment.remote(start, path, self.objects)
            except (CorruptData, OSError, ValueError, KeyError) as exc:
                report.corrupt_files.append(f"{state}/{name}: {exc}")
                handle = CorruptSegment(start, state, 0, str(exc))
            log.install(start, handle)
        end = ck.log_end if ck is not None else 0
        if not log.starts:
            log.set_end(end)
            return
        last = log.starts[-1]
        handle = log.segments[last]
        if not isinstance(handle, RawSegment):
            log.set_end(max(end, last + handle.raw_size))
            return
        size = handle.raw_size
        log.set_end(last + size)
        if clean:
            return
        data = handle.read_all()
        scan_from = max(0, min(size, (ck.log_end if ck else 0) - last))
        valid_end, corrupt = scan_frames(data, scan_from)
        valid_end = last_batch_end(data, scan_from, valid_end)  # no half batches
        report.truncated_bytes += log.truncate_to(last + valid_end)
        report.corrupt_records.extend(last + c for c in corrupt)

    def _recover_key_indexes(self, ck: Checkpoint | None, clean: bool) -> None:
        kx, report = self.keyidx, self.report
        states = resolve_states(kx.dirs, is_index_name, report)
        log_end = ck.log_end if ck is not None else 0
        ck_name = ck.key_index_name if ck is not None else None
        for name, state in sorted(states.items()):
            path = os.path.join(kx.dirs[state], name)
            if (
                not clean
                and state == State.UNSEALED
                and name != ck_name
                and name_begin_pos(name) >= log_end
            ):
                remove_file(path)  # begun after the checkpoint: replay rebuilds it
                continue
            try:
                if state == State.UPLOADED:
                    handle = kx.open_remote(path, self.objects)
                else:
                    handle = kx.open_local(path, state)
            except (CorruptData, OSError, ValueError, KeyError) as exc:
                report.corrupt_files.append(f"{KEY_INDEX_DIR}/{state}/{name}: {exc}")
                continue
            kx.install(name, state, handle)
            # the checkpoint's unsealed file (open_local opens every unsealed one as a
            # KeyIndexFile)
            if ck is not None and name == ck_name and isinstance(handle, KeyIndexFile):
                if not clean:
                    handle.truncate_to(ck.key_index_count)
                if not handle.full:
                    kx.active = handle

    def _recover_queues(self, ck: Checkpoint | None, clean: bool) -> None:
        saved = ck.queues if ck is not None else {}
        for cfg in self.topics.all():
            mine = saved.get(cfg.name, {})
            if ck is not None and ck.log_end < self.topics.floor(cfg.name):
                mine = {}  # saved before the topic was deleted: the old incarnation's offsets
            for p in range(cfg.partitions):
                nxt = mine.get(str(p))
                if nxt is None and not clean:
                    nxt = 0  # topic created after the checkpoint: every record is replayed
                self.queues.get(cfg.name, p, nxt)

    def replay(self, start: int) -> int:
        """Re-index every record from log position ``start`` to the end; returns how many.

        Frames are indexed with array operations, consecutive frames of one appended batch
        (same topic, producer and store time) together: the rows give queue entries and
        positions, the keys are hashed together, node-assigned IDs are one run.
        """
        log, kx, report = self.log, self.keyidx, self.report
        # items already held by compacted/uploaded key-index files are not added again
        covered = max(
            (kx.files[n].end_pos for n in kx.names if kx.states[n] != State.UNSEALED), default=-1
        )
        count = 0
        for seg_start in list(log.starts):
            if log.segment_end(seg_start) <= start:
                continue
            try:
                data = log.read_segment(seg_start)
            except CorruptData as exc:
                report.corrupt_files.append(f"segment {segment_name(seg_start)}: {exc}")
                continue
            view = memoryview(data)
            group: list[tuple[memoryview, int, FrameHeader]] = []
            group_key: tuple = ()
            for off, size, damaged in walk_frames(data, max(0, start - seg_start)):
                if damaged and seg_start + off not in report.corrupt_records:
                    report.corrupt_records.append(seg_start + off)
                if damaged:
                    continue  # mid-file damage: skip the frame, index what follows
                frame = view[off : off + size]
                header = FrameHeader.of(frame)
                key = header.batch_key()
                if group and (key != group_key or len(group) >= MAX_GROUP_FRAMES):
                    count += self._index_frames(group, covered)
                    group = []
                group_key = key
                group.append((frame, seg_start + off, header))
            if group:
                count += self._index_frames(group, covered)
        return count

    def index_copied(self, data: bytes, pos: int) -> int:
        """(A follower, append lock held.) Index whole, checked frames copied from a leader's
        log at position ``pos`` exactly as replay does, so a follower promoted to leader
        serves offsets, keys, message IDs and idempotent batches at once."""
        view = memoryview(data)
        count = 0
        group: list[tuple[memoryview, int, FrameHeader]] = []
        group_key: tuple = ()
        for off, size, damaged in walk_frames(data, 0):
            if damaged or not size:
                raise CorruptData(f"a copied frame at log position {pos + off} is damaged")
            frame = view[off : off + size]
            header = FrameHeader.of(frame)
            key = header.batch_key()
            if group and (key != group_key or len(group) >= MAX_GROUP_FRAMES):
                count += self._index_frames(group, -1)
                group = []
            group_key = key
            group.append((frame, pos + off, header))
        if group:
            count += self._index_frames(group, -1)
        self.dedup.end_replay()  # copies end at whole batches: the next one starts afresh
        return count

    def _apply_commits(self, frames: list[tuple[memoryview, int, FrameHeader]]) -> int:
        """Offset commits written into the log: applied again in log order (the newest
        wins), those of topics no longer held skipped."""
        for frame, _pos, _header in frames:
            for group, topic, partition, offset in commits_in(frame):
                if self.offsets is not None and topic in self.topics.topics:
                    self.offsets.commit(group, topic, partition, offset)
        return sum(h.count for _f, _p, h in frames)

    def _index_frames(self, frames: list[tuple[memoryview, int, FrameHeader]], covered: int) -> int:
        """Index verified frames of one batch (log positions given) as its append did."""
        first = frames[0][2]
        topic = first.topic.decode()
        if topic == OFFSETS_TOPIC:
            return self._apply_commits(frames)
        floor = self.topics.floor(topic)
        if frames[0][1] < floor:  # records of a deleted incarnation are never indexed again
            live = [f for f in frames if f[1] >= floor]
            skipped = sum(h.count for _frame, pos, h in frames if pos < floor)
            return skipped + (self._index_frames(live, covered) if live else 0)
        self.last_store_ms = max(self.last_store_ms, first.store_ms)
        # the frames' rows as one array, and every per-frame quantity from it at once
        counts = [h.count for _frame, _pos, h in frames]
        total = sum(counts)
        if topic not in self.topics.topics:
            return total
        parts_rows = [h.rows(frame) for frame, _pos, h in frames]
        if len(parts_rows) == 1:
            rows = parts_rows[0]
        else:  # joined as bytes: concatenating structured arrays promotes fields per array
            rows = np.frombuffer(b"".join([r.data for r in parts_rows]), dtype=ROW_DTYPE)
        heads = np.zeros(len(frames), dtype=np.int64)  # each frame's first row
        np.cumsum(counts[:-1], out=heads[1:])
        where = np.fromiter((pos for _frame, pos, _h in frames), np.int64, len(frames))
        positions = np.repeat(where + FRAME_SIZE, counts) + ROW * rows["index"].astype(np.int64)
        klen = rows["klen"].astype(np.int64)
        idlen = rows["idlen"].astype(np.int64)
        spans = zip(
            rows["koff"][heads].tolist(),
            np.add.reduceat(klen, heads).tolist(),
            rows["ioff"][heads].tolist(),
            np.add.reduceat(idlen, heads).tolist(),
            strict=True,
        )
        key_parts, id_parts = [], []
        for (frame, _pos, _h), (kstart, ksum, istart, isum) in zip(frames, spans, strict=True):
            key_parts.append(frame[kstart : kstart + ksum])
            id_parts.append(frame[istart : istart + isum])
        parts = rows["partition"].astype(np.int64)
        qoffs = rows["qoff"].astype(np.int64)
        entries = np.zeros(total, dtype=ENTRY_DTYPE)
        entries["pos"] = positions
        entries["size"] = ROW + klen + rows["taglen"] + idlen + rows["vlen"]
        tagged = np.flatnonzero(rows["flags"] & ROW_TAG)
        if len(tagged):  # tags are hashed one by one (few batches carry them)
            in_frame = np.searchsorted(heads, tagged, side="right") - 1
            for i, fi in zip(tagged.tolist(), in_frame.tolist(), strict=True):
                toff, taglen = int(rows["toff"][i]), int(rows["taglen"][i])
                entries["tag"][i] = tag_hash(bytes(frames[fi][0][toff : toff + taglen]))
        for p in np.unique(parts).tolist():
            mine = np.flatnonzero(parts == p)
            _replay_queue(self.queues.get(topic, p), qoffs[mine], entries[mine])
        has_key = (rows["flags"] & ROW_KEY).astype(bool)
        keyed = has_key & (positions > covered)
        if keyed.any():
            hashes = key_hashes(b"".join(key_parts), np.where(has_key, klen, -1))
            self.keyidx.add(hashes[keyed], positions[keyed].astype(np.uint64), first.store_ms)
        ids = b"".join(id_parts)
        if first.flags & FLAG_PRODUCER:
            producer = first.producer.decode()
            texts = AppendColumns(parts, qoffs, ids, idlen).msg_ids
            for p, o, m in zip(parts.tolist(), qoffs.tolist(), texts, strict=True):
                self.dedup.extend(producer, first.sequence, p, o, m)
        self._replay_ids(ids, idlen, positions)
        return total

    def _replay_ids(self, ids: bytes, lens: np.ndarray, positions: np.ndarray) -> None:
        """Index a frame's message IDs: one run when they are consecutive node-assigned
        numbers (the usual frame), else one by one."""
        first_len = int(lens[0])
        try:
            first = parse_msg_id(ids[:first_len].decode())
        except (InvalidArgument, UnicodeDecodeError):
            first = None
        if first is not None:
            prefix = ids[: first_len - len(str(first.seq))]
            run = numbered_ids(prefix, first.seq, len(lens))
            if run.blob == ids:
                self.msgids.put_run(first.app, first.hour, first.ip, first.seq, positions)
                return
        texts = AppendColumns(positions, positions, ids, lens).msg_ids
        for text, p in zip(texts, positions.tolist(), strict=True):
            try:
                self.msgids.put(parse_msg_id(text), p)
            except InvalidArgument:
                continue  # an ID that no longer parses is simply not indexed


def _replay_queue(q: QueueIndex, qoffs: np.ndarray, entries: np.ndarray) -> None:
    """Append the entries a partition does not hold yet; offsets lost to mid-file
    corruption before them become empty entries (reads report them)."""
    nxt = q.next_offset
    keep = qoffs >= nxt
    qoffs, entries = qoffs[keep], entries[keep]
    if not len(qoffs):
        return
    if int(qoffs[0]) == nxt and int(qoffs[-1]) == nxt + len(qoffs) - 1:
        q.append(entries)
        return
    filled = np.zeros(int(qoffs.max()) - nxt + 1, dtype=ENTRY_DTYPE)
    filled[qoffs - nxt] = entries
    q.append(filled)
