"""Batches on their way into the log: checked, merged with concurrent ones, split back.

``prepare`` checks a packed batch with array operations and does the work that needs no
lock (key hashes, key partitions). Batches of producers that wait for the append lock
together are checked as one merged batch and their results split back
(``split_results``); a ``Ticket`` carries one producer's batch through that.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from storage_node.errors import InvalidArgument, InvalidBatch, MessageTooLarge, NotOwner
from storage_node.formats.headers import check_headers_column
from storage_node.formats.limits import EMPTY_KEY_RULE
from storage_node.formats.message_id import MessageId, parse_canonical_msg_id
from storage_node.formats.packed import ListBatch, PackedBatch, PackedColumn, filled
from storage_node.formats.record import MAX_KEY_BYTES, MAX_MSG_ID_BYTES, MAX_TAG_BYTES
from storage_node.store.types import AppendColumns, TopicConfig

MAX_BATCH = 100_000


@dataclass
class Prepared:
    """A validated batch: what the append lock still has to do is number and write it."""

    batch: PackedBatch
    n: int
    total: int  # value bytes
    parts: np.ndarray  # -1 = not chosen yet
    hashes: np.ndarray | None  # key hash per message (0 where no key)
    keyed: np.ndarray | None  # which messages have a key
    born: np.ndarray | None  # -1 = store time
    given_ids: list[tuple[int, MessageId]]
    allowed: set[int] | None


def held_lock() -> threading.Lock:
    """A lock already taken: a sleeping producer wakes when somebody else releases it."""
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass
class Ticket:
    """One producer's prepared batch waiting to be written, and what became of it."""

    cfg: TopicConfig
    batch: PackedBatch | ListBatch  # lists are packed by the writer, with the group's others
    allowed: Sequence[int] | None
    producer_id: str | None
    sequence: int | None
    result: AppendColumns | None = None
    error: BaseException | None = None
    target: int = 0
    # released when the batch is answered, and before that to make its producer the next
    # leader (each release is matched by one acquire of the producer)
    wake: threading.Lock = field(default_factory=held_lock, repr=False, compare=False)
    leader: bool = False

    def answer(self) -> None:
        """The batch is done (durable in sync mode) or failed (``error``): wake its producer."""
        self.wake.release()


def check_batch_size(n: int) -> None:
    """What every producer batch must hold: one message at least, MAX_BATCH at most."""
    if n == 0:
        raise InvalidBatch("a batch needs at least one message")
    if n > MAX_BATCH:
        raise InvalidBatch(f"a batch holds at most {MAX_BATCH} messages")


def split_results(
    parts: np.ndarray, offsets: np.ndarray, ids: PackedColumn, counts: list[int]
) -> list[AppendColumns]:
    """Each batch's share of a group's results."""
    if len(counts) == 1:
        return [AppendColumns(parts, offsets, ids.blob, ids.lens)]
    out = []
    ends = np.cumsum(ids.lens).tolist()
    a = 0
    for count in counts:
        b = a + count
        lo = ends[a - 1] if a else 0
        hi = ends[b - 1] if b else 0
        out.append(AppendColumns(parts[a:b], offsets[a:b], ids.blob[lo:hi], ids.lens[a:b]))
        a = b
    return out


def check_text(column: PackedColumn, n: int, what: str, most: int) -> None:
    """Lengths, blob size and UTF-8 of a packed text column, checked as arrays (a column
    known to be absent, or without absent entries, skips the calls it does not need)."""
    lens = column.lens
    if len(lens) != n:
        raise InvalidBatch(f"{what}s must have one entry per message ({n})")
    shortest, longest = column.length_range()
    if longest < 0:
        return
    if shortest < -1:
        raise InvalidBatch(f"{what} lengths must be >= 0 (or -1 for absent)")
    if longest > most:
        i = int(np.flatnonzero(lens > most)[0])
        raise InvalidBatch(f"message {i}: {what} longer than {most} bytes", index=i)
    sizes = lens if shortest >= 0 else np.maximum(lens, 0)
    total = int(np.add.reduce(sizes))
    if len(column.blob) != total:
        raise InvalidBatch(f"{what} bytes ({len(column.blob)}) do not add up to {total}")
    blob = bytes(column.blob) if not isinstance(column.blob, bytes) else column.blob
    if blob.isascii():
        return
    try:
        blob.decode()
    except UnicodeDecodeError:
        raise InvalidBatch(f"a {what} in the batch is not valid UTF-8") from None
    starts = (np.cumsum(sizes) - sizes)[sizes > 0]
    raw = np.frombuffer(blob, dtype=np.uint8)
    split = np.flatnonzero((raw[starts] & 0xC0) == 0x80)
    if len(split):
        i = int(np.flatnonzero(sizes > 0)[split[0]])
        raise InvalidBatch(f"message {i}: {what} is not valid UTF-8", index=i)


def prepare(
    cfg: TopicConfig, batch: PackedBatch, allowed: Sequence[int] | None, limit: int
) -> Prepared:
    """Validate a packed batch as arrays and do its lock-free work (key hashes, key
    partitions); a bad message gets a typed error naming its index, and nothing is
    written. Its size was checked per producer batch (``check_batch_size``): a merged
    group may be larger than one batch may be."""
    n = len(batch)
    values = batch.values
    vlen = values.lens
    shortest, longest = values.length_range()
    if shortest < 0:
        raise InvalidBatch("every message needs a value", index=int(np.argmin(vlen)))
    if longest > limit:
        i = int(np.flatnonzero(vlen > limit)[0])
        raise MessageTooLarge(
            f"message {i} has {int(vlen[i])} bytes, more than the limit of {limit}",
            index=i,
            limit=limit,
        )
    total = int(np.add.reduce(vlen))
    if values.nbytes != total:
        raise InvalidBatch(f"value bytes ({values.nbytes}) do not add up to {total}")
    for column, what, most in (
        (batch.keys, "key", MAX_KEY_BYTES),
        (batch.tags, "tag", MAX_TAG_BYTES),
        (batch.msg_ids, "message ID", MAX_MSG_ID_BYTES),
    ):
        check_text(column, n, what, most)
    if batch.headers is not None:
        if len(batch.headers.lens) != n:
            raise InvalidBatch(f"headers must have one entry per message ({n})")
        check_headers_column(batch.headers.blob, batch.headers.lens)
    if not batch.keys.absent():
        empty = np.flatnonzero(batch.keys.lens == 0)
        if len(empty):
            i = int(empty[0])
            raise InvalidBatch(f"message {i}: {EMPTY_KEY_RULE}", index=i, field="key")
    nparts = cfg.partitions
    keyed = hashes = None
    if batch.keys.absent():
        parts = filled(n, -1)
    else:
        hashes = batch.key_hashes()
        keyed = batch.keys.lens >= 0
        if batch.keys.length_range()[0] >= 0:  # every message has a key
            parts = np.remainder(hashes, nparts, dtype=np.int64)
        else:
            parts = filled(n, -1)
            parts[keyed] = hashes[keyed] % nparts
    if batch.partitions is not None:
        given = np.asarray(batch.partitions, dtype=np.int64)
        if len(given) != n:
            raise InvalidBatch(f"partitions must have one entry per message ({n})")
        bad = np.flatnonzero((given < -1) | (given >= nparts))
        if len(bad):
            i = int(bad[0])
            raise InvalidBatch(
                f"message {i}: partition {int(given[i])} outside 0..{nparts - 1}", index=i
            )
        parts = np.where(given >= 0, given, parts)
    born = None
    if batch.timestamps is not None:
        born = np.asarray(batch.timestamps, dtype=np.int64)
        if len(born) != n:
            raise InvalidBatch(f"timestamps must have one entry per message ({n})")
        if int(np.minimum.reduce(born)) < -1:
            i = int(np.flatnonzero(born < -1)[0])
            raise InvalidBatch(f"message {i}: timestamp must be ms since epoch", index=i)
    given_ids: list[tuple[int, MessageId]] = []
    if not batch.msg_ids.absent():
        for i, raw in enumerate(batch.msg_ids.to_list()):
            if raw is None:
                continue
            try:
                given_ids.append((i, parse_canonical_msg_id(raw.decode())))
            except InvalidArgument as exc:
                raise InvalidBatch(f"message {i}: {exc.message}", index=i) from exc
    allowed_set = None
    if allowed is not None:
        allowed_set = {int(p) for p in allowed}
        chosen = np.unique(parts[parts >= 0]).tolist()
        bad_parts = [p for p in chosen if p not in allowed_set]
        if bad_parts:
            raise NotOwner(
                f"partition {bad_parts[0]} of {cfg.name!r} is not served by this node",
                topic=cfg.name,
                partition=bad_parts[0],
            )
    return Prepared(batch, n, total, parts, hashes, keyed, born, given_ids, allowed_set)
