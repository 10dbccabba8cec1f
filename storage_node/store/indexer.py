"""The indexer: what a batch written to the commit log adds to the derived indexes.

Every record of the log is indexed by one path, whichever way it arrived: appended here
(``AppendPass`` knows the columns it just numbered), copied from a leader's log (a
follower) or replayed from the log at open (recovery). The last two decode frames first
(``index_frames``); all three end in ``Indexer.write``: queue entries per partition,
key-index items, message-ID addresses. Copies and replays also rebuild the idempotency
table from the producer fields of the frames and re-apply offset commits written as
records, as the append and the commit did the first time.

Writing a queue's entries skips those it holds already and fills offsets lost to mid-file
corruption with empty entries (reads report them), so a replay over records indexed before
a crash changes nothing, and an append (offsets taken from the queues) is a plain append.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from storage_node.errors import CorruptData, InvalidArgument
from storage_node.formats.frame_walker import FrameHeader, walk_frames
from storage_node.formats.keyhash import key_hashes
from storage_node.formats.message_id import MessageId, numbered_ids, parse_msg_id
from storage_node.formats.queue_index import ENTRY_DTYPE, QueueIndex, tag_hash
from storage_node.formats.record import (
    FLAG_PRODUCER,
    FRAME_SIZE,
    ROW,
    ROW_DTYPE,
    ROW_HEADERS,
    ROW_KEY,
    ROW_TAG,
)
from storage_node.store.dedup import DedupTable
from storage_node.store.key_index_set import KeyIndexSet
from storage_node.store.msg_id_index import MsgIdIndexes
from storage_node.store.offsets import DELETED, OFFSETS_TOPIC, OffsetStore, commits_in
from storage_node.store.queues import PartitionQueues
from storage_node.store.topics import TopicRegistry
from storage_node.store.types import AppendColumns

log = logging.getLogger(__name__)
MAX_GROUP_FRAMES = 256  # frames of one appended batch indexed together
Frame = tuple[memoryview, int, FrameHeader]  # a verified frame, its log position, its header
# (partition, first, end): a partition's rows in the partition-sorted order
Runs = list[tuple[int, int, int]]


def partition_runs(parts: np.ndarray) -> tuple[np.ndarray | None, Runs]:
    """Group a batch's rows by partition, keeping their order within each: the stable sort
    order (None when the batch has one partition) and each partition's run in it."""
    n = len(parts)
    first = int(parts[0])
    if n == 1 or bool((parts == first).all()):
        return None, [(first, 0, n)]
    order = np.argsort(parts.astype(np.uint16), kind="stable")  # radix sort: small ints
    ordered = parts[order]
    cuts = (np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist()
    return order, [(int(ordered[a]), a, b) for a, b in zip([0, *cuts], [*cuts, n], strict=True)]


@dataclass
class BatchIndex:
    """What one batch adds to the indexes, as whole arrays (one row per record)."""

    topic: str
    store_ms: int
    qoffs: np.ndarray  # queue offsets (int64)
    entries: np.ndarray  # queue entries (ENTRY_DTYPE: position, size, tag hash)
    order: np.ndarray | None  # from partition_runs
    runs: Runs
    hashes: np.ndarray | None = None  # key hashes of the keyed records, and their positions
    key_positions: np.ndarray | None = None
    # message IDs: runs of node-numbered ones (app, hour, ip, first seq, positions), then
    # others one by one
    id_runs: list[tuple[str, int, int, int, np.ndarray]] = field(default_factory=list)
    ids: list[tuple[MessageId, int]] = field(default_factory=list)


class Indexer:
    """Indexes batches into a store's queues, key index, message-ID index and idempotency
    table (see above)."""

    def __init__(
        self,
        queues: PartitionQueues,
        keyidx: KeyIndexSet,
        msgids: MsgIdIndexes,
        dedup: DedupTable,
        topics: TopicRegistry | None,
        offsets: OffsetStore | None = None,
    ) -> None:
        """``offsets`` takes the offset commits found in copied or replayed frames."""
        self.queues = queues
        self.keyidx = keyidx
        self.msgids = msgids
        self.dedup = dedup
        self.topics = topics
        self.offsets = offsets
        self.last_store_ms = 0  # the newest store time of the frames indexed
        self.unparsed_msg_ids = 0  # IDs in frames that no longer parse (not indexed)

    # ---- one batch as arrays ----------------------------------------------------------------
    def write(self, b: BatchIndex) -> None:
        """Add a batch's rows to the indexes (append lock held)."""
        qoffs, entries = b.qoffs, b.entries
        if b.order is not None:
            qoffs, entries = qoffs[b.order], entries[b.order]
        for p, a, e in b.runs:
            _add_to_queue(self.queues.get(b.topic, p), qoffs[a:e], entries[a:e])
        if b.hashes is not None and b.key_positions is not None and len(b.hashes):
            self.keyidx.add(b.hashes, b.key_positions, b.store_ms)
        for app, hour, ip, seq, positions in b.id_runs:
            self.msgids.put_run(app, hour, ip, seq, positions)
        for mid, pos in b.ids:
            self.msgids.put(mid, pos)

    # ---- frames from the log ----------------------------------------------------------------
    def index_log(
        self, data: bytes, base: int, start: int, covered: int, damaged: Callable[[int], None]
    ) -> int:
        """Index the frames of ``data`` (log bytes from position ``base``) from offset
        ``start`` on, consecutive frames of one appended batch together; a damaged frame is
        handed to ``damaged`` (its position) and skipped. Returns the records seen."""
        view = memoryview(data)
        count = 0
        group: list[Frame] = []
        group_key: tuple = ()
        for off, size, bad in walk_frames(data, start):
            if bad:  # (a torn tail too: the walk ends after it)
                damaged(base + off)
                continue  # mid-file damage: skip the frame, index what follows
            frame = view[off : off + size]
            header = FrameHeader.of(frame)
            key = header.batch_key()
            if group and (key != group_key or len(group) >= MAX_GROUP_FRAMES):
                count += self.index_frames(group, covered)
                group = []
            group_key = key
            group.append((frame, base + off, header))
        if group:
            count += self.index_frames(group, covered)
        return count

    def index_copied(self, data: bytes, pos: int) -> int:
        """(A follower, append lock held.) Index whole, checked frames copied from a leader's
        log at position ``pos`` exactly as replay does, so a follower promoted to leader
        serves offsets, keys, message IDs and idempotent batches at once."""

        def refuse(at: int) -> None:
            raise CorruptData(f"a copied frame at log position {at} is damaged")

        count = self.index_log(data, pos, 0, -1, refuse)
        self.dedup.end_replay()  # copies end at whole batches: the next one starts afresh
        return count

    def index_frames(self, frames: list[Frame], covered: int) -> int:
        """Index verified frames of one batch as its append did; key-index items at or
        below ``covered`` are held by sealed files already. Returns the records seen."""
        first = frames[0][2]
        topic = first.topic.decode()
        if topic == OFFSETS_TOPIC:
            return self._apply_commits(frames)
        topics = self.topics
        floor = topics.floor(topic) if topics is not None else 0
        if frames[0][1] < floor:  # records of a deleted incarnation are never indexed again
            live = [f for f in frames if f[1] >= floor]
            skipped = sum(h.count for _frame, pos, h in frames if pos < floor)
            return skipped + (self.index_frames(live, covered) if live else 0)
        self.last_store_ms = max(self.last_store_ms, first.store_ms)
        # the frames' rows as one array, and every per-frame quantity from it at once
        counts = [h.count for _frame, _pos, h in frames]
        total = sum(counts)
        if topics is not None and topic not in topics.topics:
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
        if (rows["flags"] & ROW_HEADERS).any():  # headers follow their values
            entries["size"] += np.where(rows["flags"] & ROW_HEADERS, rows["hlen"], 0)
        tagged = np.flatnonzero(rows["flags"] & ROW_TAG)
        if len(tagged):  # tags are hashed one by one (few batches carry them)
            in_frame = np.searchsorted(heads, tagged, side="right") - 1
            for i, fi in zip(tagged.tolist(), in_frame.tolist(), strict=True):
                toff, taglen = int(rows["toff"][i]), int(rows["taglen"][i])
                entries["tag"][i] = tag_hash(bytes(frames[fi][0][toff : toff + taglen]))
        order, runs = partition_runs(parts)
        batch = BatchIndex(topic, first.store_ms, qoffs, entries, order, runs)
        has_key = (rows["flags"] & ROW_KEY).astype(bool)
        keyed = has_key & (positions > covered)
        if keyed.any():
            hashes = key_hashes(b"".join(key_parts), np.where(has_key, klen, -1))
            batch.hashes = hashes[keyed]
            batch.key_positions = positions[keyed].astype(np.uint64)
        ids = b"".join(id_parts)
        if first.flags & FLAG_PRODUCER:
            producer = first.producer.decode()
            texts = AppendColumns(parts, qoffs, ids, idlen).msg_ids
            for p, o, m in zip(parts.tolist(), qoffs.tolist(), texts, strict=True):
                self.dedup.extend(producer, first.sequence, p, o, m)
        self._read_ids(batch, ids, idlen, positions)
        self.write(batch)
        return total

    def _apply_commits(self, frames: list[Frame]) -> int:
        """Offset commits written into the log: applied again in log order (the newest
        wins), those of topics no longer held skipped."""
        for frame, _pos, _header in frames:
            for group, topic, partition, offset in commits_in(frame):
                held = self.topics is None or topic is None or topic in self.topics.topics
                if self.offsets is None or not held:
                    continue
                if offset == DELETED:
                    self.offsets.delete(group, topic, partition)
                elif topic is not None and partition is not None:
                    self.offsets.commit(group, topic, partition, offset)
        return sum(h.count for _f, _p, h in frames)

    def _read_ids(
        self, batch: BatchIndex, ids: bytes, lens: np.ndarray, positions: np.ndarray
    ) -> None:
        """A frame group's message IDs: one run when they are consecutive node-assigned
        numbers (the usual batch), else one by one; an ID that no longer parses is counted
        and not indexed."""
        first_len = int(lens[0])
        try:
            first = parse_msg_id(ids[:first_len].decode())
        except (InvalidArgument, UnicodeDecodeError):
            first = None
        if first is not None:
            prefix = ids[: first_len - len(str(first.seq))]
            run = numbered_ids(prefix, first.seq, len(lens))
            if run.blob == ids:
                batch.id_runs.append((first.app, first.hour, first.ip, first.seq, positions))
                return
        texts = AppendColumns(positions, positions, ids, lens).msg_ids
        unparsed = 0
        for text, p in zip(texts, positions.tolist(), strict=True):
            try:
                batch.ids.append((parse_msg_id(text), p))
            except InvalidArgument:
                unparsed += 1
        if unparsed:
            self.unparsed_msg_ids += unparsed
            log.warning(
                "%d message IDs of topic %s from log position %d do not parse: not indexed",
                unparsed,
                batch.topic,
                int(positions[0]),
            )


def _add_to_queue(q: QueueIndex, qoffs: np.ndarray, entries: np.ndarray) -> None:
    """Append the entries a partition does not hold yet; offsets lost to mid-file
    corruption before them become empty entries (reads report them)."""
    nxt = q.next_offset
    keep = qoffs >= nxt
    if not keep.all():  # (an append, or a replay past the queue's end, keeps them all)
        qoffs, entries = qoffs[keep], entries[keep]
    if not len(qoffs):
        return
    if int(qoffs[0]) == nxt and int(qoffs[-1]) == nxt + len(qoffs) - 1:
        q.append(entries)
        return
    filled = np.zeros(int(qoffs.max()) - nxt + 1, dtype=ENTRY_DTYPE)
    filled[qoffs - nxt] = entries
    q.append(filled)
