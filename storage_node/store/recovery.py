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
   count, key-index files begun after it) and rebuilt from the records past it by the
   indexer every append goes through (``indexer.py``).

Like Kafka's LogLoader, ``LogLoader`` is handed what it fills in (the commit log, the
indexes, the idempotency table, the topics) and returns what it found (``Loaded``: the
report, the last store time); it knows nothing of the store that owns those parts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from storage_node.backend.files import fsync_dir, remove_file, remove_temporaries
from storage_node.backend.objectstore import ObjectStore
from storage_node.errors import CorruptData
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
from storage_node.formats.frame_walker import last_batch_end, scan_frames
from storage_node.formats.key_index_file import KeyIndexFile
from storage_node.store.commitlog import CommitLog
from storage_node.store.dedup import DedupTable
from storage_node.store.indexer import Indexer
from storage_node.store.key_index_set import KeyIndexSet
from storage_node.store.msg_id_index import MsgIdIndexes
from storage_node.store.offsets import OffsetStore
from storage_node.store.queues import PartitionQueues
from storage_node.store.segment_readers import (
    BlockSegment,
    CorruptSegment,
    RawSegment,
    SegmentHandle,
)
from storage_node.store.topics import TopicRegistry


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
    unparsed_msg_ids: int = 0  # replayed records whose message ID no longer parses

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
        self.indexer = Indexer(queues, keyidx, msgids, dedup, topics, offsets)
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
        """Re-index every record from log position ``start`` to the end (``Indexer``);
        returns how many. Damaged frames are reported and skipped."""
        log, kx, report = self.log, self.keyidx, self.report
        # items already held by compacted/uploaded key-index files are not added again
        covered = max(
            (kx.files[n].end_pos for n in kx.names if kx.states[n] != State.UNSEALED),
            default=-1,
        )

        def damaged(pos: int) -> None:
            if pos not in report.corrupt_records:
                report.corrupt_records.append(pos)

        count = 0
        indexer = self.indexer
        for seg_start in list(log.starts):
            if log.segment_end(seg_start) <= start:
                continue
            try:
                data = log.read_segment(seg_start)
            except CorruptData as exc:
                report.corrupt_files.append(f"segment {segment_name(seg_start)}: {exc}")
                continue
            count += indexer.index_log(data, seg_start, max(0, start - seg_start), covered, damaged)
        self.last_store_ms = max(self.last_store_ms, indexer.last_store_ms)
        report.unparsed_msg_ids = indexer.unparsed_msg_ids
        return count
