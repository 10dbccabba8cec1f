"""``msgstore consume``: print a topic's messages; with a group, commit exactly what was printed.

Without ``--partition`` every partition is read and the messages are printed in store-time
order across partitions. The start is the beginning (default), ``--offset`` (a number with
one ``--partition``, ``beginning``, ``end``, or ``-N`` for the last N of each partition),
``--last N`` (the last N messages of the topic), ``--from TIME`` or, with ``--group``, the
group's committed position. ``--follow`` keeps waiting for new messages (a long poll on the
owning node); with ``--until`` it ends once every partition is past that time. With
``--group`` the position after every printed message is committed: at the end, on Ctrl-C,
on a closed output and every few seconds while following, so repeated ``--max N`` runs read
every message exactly once; into a pipe a message counts as printed once the reader took it
(cli/consume_output.py). The output formats live in cli/consume_output.py.

Over 400 lines on purpose: one command whose options, start positions, cross-partition
order and group commits depend on each other; nothing here is used by another command.
"""

from __future__ import annotations

import argparse
import errno
import heapq
import queue
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from storage_node.cli.common import UsageError, silence_stdout, topic_command
from storage_node.cli.consume_output import Output, compile_format, exact_output
from storage_node.errors import InvalidArgument, MsgStoreError, Unavailable
from storage_node.wire.message_json import value_json
from storage_node.wire.read_answer import ReadColumns

PAGE = 1000
LONG_POLL_MS = 10_000
COMMIT_EVERY_S = 5.0


def parse_time(text: str, flag: str) -> int:
    """Epoch ms (digits) or an ISO 8601 date/time (local time unless it names a zone)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(
            f"{flag} takes epoch milliseconds or an ISO date/time like 2026-11-24T10:00, "
            f"got {text!r}"
        ) from None
    return int(moment.timestamp() * 1000)


def parse_offset(text: str) -> int | str:
    """``beginning``, ``end``, ``-N`` (N before the end) or an absolute offset."""
    if text in ("beginning", "end"):
        return text
    try:
        return int(text)
    except ValueError:
        raise InvalidArgument(
            f"--offset takes beginning, end, -N or an offset, got {text!r}"
        ) from None


# -- reading --------------------------------------------------------------------------------
def json_rows(topic: str, cols: ReadColumns) -> list[dict[str, Any]]:
    """A binary page as messages in the JSON API's shape (``value`` when UTF-8, else
    ``value_base64``), the form the output formats print."""
    rows = cols.to_rows(topic)
    for row in rows:
        row.update(value_json(row.pop("value")))
    return rows


@dataclass
class Part:
    partition: int
    offset: int | None  # next offset to read (None: use start_time first)
    start_time: int | None = None
    buf: deque[dict[str, Any]] = field(default_factory=deque)
    done: bool = False
    error: str | None = None
    ahead: Future[ReadColumns] | None = None  # the next page, already requested


class Consumer:
    def __init__(self, args: argparse.Namespace, client: Any) -> None:
        self.args = args
        self.client = client
        self.render = compile_format(args.format)
        self.out = Output(sys.stdout.isatty(), exact_output(args.group))
        self.until = parse_time(args.until, "--until") if args.until else None
        self.unreachable: dict[int, str] = {}
        self.committed: dict[int, int] = {}
        self.skip = 0
        self.last_commit = time.monotonic()
        self.pool: ThreadPoolExecutor | None = None

    # positions
    def plan(self) -> list[Part]:
        args = self.args
        info = self.client.describe_topic(args.topic)
        count = len(info["partition_offsets"])
        wanted = args.partition or list(range(count))
        bad = [p for p in wanted if not 0 <= p < count]
        if bad:
            raise InvalidArgument(
                f"topic {args.topic!r} has partitions 0..{count - 1}, not {bad[0]}"
            )
        spans = {}
        for item in info["partition_offsets"]:
            p = item["partition"]
            if p not in wanted:
                continue
            if item["first_offset"] is None:
                self.unreachable[p] = f"node {item['owner']} did not answer"
                continue
            spans[p] = (item["first_offset"], item["next_offset"])
        if args.group:
            doc = self.client.committed_offsets(args.group, args.topic)
            self.committed = doc.get(args.topic, {})
        start_time = parse_time(args.from_time, "--from") if args.from_time else None
        parts = []
        total_last = 0
        for p in wanted:
            if p not in spans:
                continue
            first, nxt = spans[p]
            if args.group:
                offset: int | None = max(self.committed.get(p, first), first)
            elif start_time is not None:
                offset = None
            elif args.last is not None:
                offset = max(first, nxt - args.last)
                total_last += nxt - offset
            elif args.offset == "end":
                offset = nxt
            elif isinstance(args.offset, int) and args.offset < 0:
                offset = max(first, nxt + args.offset)
            elif isinstance(args.offset, int):
                if not first <= args.offset <= nxt:
                    raise InvalidArgument(
                        f"offset {args.offset} is outside partition {p}'s [{first}, {nxt}]"
                    )
                offset = args.offset
            else:
                offset = first
            parts.append(Part(p, offset, start_time))
        if args.last is not None:
            self.skip = max(0, total_last - args.last)
        return parts

    def _read(self, part: Part, wait_ms: int | None) -> ReadColumns:
        return self.client.read_columns(
            self.args.topic,
            part.partition,
            part.offset,
            max_messages=PAGE,
            tag=self.args.tag,
            start_time=part.start_time if part.offset is None else None,
            end_time=self.until,
            wait_ms=wait_ms,
        )

    def fetch(self, part: Part, wait_ms: int | None = None) -> None:
        """One page into the partition's buffer; marks it done at its end (or --until).

        Pages come in the binary read framing; while this one is printed the next is
        already being read (``part.ahead``), as plain messages only at the output."""
        try:
            ahead, part.ahead = part.ahead, None
            cols = ahead.result() if ahead is not None else self._read(part, wait_ms)
        except Unavailable as err:
            part.done = True
            self.unreachable[part.partition] = err.message
            return
        part.buf.extend(json_rows(self.args.topic, cols))
        if cols.next_offset is not None:
            part.offset = cols.next_offset
        if cols.end_reached:
            part.done = True
        elif not len(cols) and not self.args.follow:
            part.done = True
        elif len(cols) and wait_ms is None:
            part.ahead = self._reader().submit(self._read, part, None)

    def _reader(self) -> ThreadPoolExecutor:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(2, "msgstore-consume")
        return self.pool

    # printing and committing
    def emit(self, m: dict[str, Any]) -> bool:
        """Print one message; False once --max is reached."""
        if self.skip:
            self.skip -= 1
            return True
        self.out.add(self.render(m), m["partition"], m["offset"])
        return not (self.args.max and self.out.count + len(self.out.chunks) >= self.args.max)

    def commit(self) -> None:
        if not self.args.group:
            return
        for p, offset in sorted(self.out.printed.items()):
            if self.committed.get(p) == offset:
                continue
            try:
                self.client.commit_offset(self.args.group, self.args.topic, p, offset)
                self.committed[p] = offset
            except MsgStoreError as err:
                print(
                    f"error: cannot commit partition {p} at offset {offset}: {err.message}",
                    file=sys.stderr,
                )
        self.last_commit = time.monotonic()

    def run(self) -> bool:
        """Print until the end (or --max, or forever with --follow); False at --max."""
        parts = self.plan()
        heap: list[tuple[int, int, int]] = []  # (store time, partition, offset) of each head
        by_id = {part.partition: part for part in parts}
        for part in parts:
            self.fetch(part)
            if part.buf:
                m = part.buf[0]
                heapq.heappush(heap, (m["store_timestamp"], part.partition, m["offset"]))
        while heap:  # merge the partitions by store time
            _ts, p, _o = heapq.heappop(heap)
            part = by_id[p]
            if not self.emit(part.buf.popleft()):
                return False
            if not part.buf and not part.done:
                self.fetch(part)
            if part.buf:
                m = part.buf[0]
                heapq.heappush(heap, (m["store_timestamp"], p, m["offset"]))
        self.out.flush()
        if self.args.follow:
            return self.follow([p for p in parts if p.partition not in self.unreachable])
        return True

    def follow(self, parts: list[Part]) -> bool:
        """Long polls on every partition (one thread each); print as messages arrive."""
        inbox: queue.Queue[tuple[Part, list[dict[str, Any]] | None]] = queue.Queue()
        stop = threading.Event()

        def poll(part: Part) -> None:
            while not stop.is_set() and not part.done:
                self.fetch(part, LONG_POLL_MS)
                if part.partition in self.unreachable:
                    self.unreachable.pop(part.partition, None)  # keep trying while following
                    part.done = False
                    inbox.put((part, None))
                    stop.wait(1.0)
                    continue
                batch = list(part.buf)
                part.buf.clear()
                if batch:
                    inbox.put((part, batch))
            inbox.put((part, []))

        threads = [threading.Thread(target=poll, args=(p,), daemon=True) for p in parts]
        for t in threads:
            t.start()
        live = len(parts)
        try:
            while live:
                try:
                    part, batch = inbox.get(timeout=1.0)
                except queue.Empty:
                    batch = None
                    part = None
                if part is not None and batch == []:
                    live -= 1
                elif part is not None and batch is None:
                    print(
                        f"warning: partition {part.partition} is unreachable; retrying",
                        file=sys.stderr,
                    )
                for m in batch or []:
                    if not self.emit(m):
                        return False
                self.out.flush()
                if time.monotonic() - self.last_commit > COMMIT_EVERY_S:
                    self.commit()
            return True
        finally:
            stop.set()


def check_flags(args: argparse.Namespace) -> None:
    if args.max is not None and args.max < 1:
        raise InvalidArgument("--max must be at least 1 (leave it out to read everything)")
    if args.last is not None and args.last < 1:
        raise InvalidArgument("--last must be at least 1")
    starts = [
        name
        for name, given in (
            ("--offset", args.offset is not None),
            ("--last", args.last is not None),
            ("--from", args.from_time is not None),
        )
        if given
    ]
    if len(starts) > 1:
        raise InvalidArgument(f"give one start position, not {' and '.join(starts)}")
    if args.group and starts:
        raise InvalidArgument(
            f"--group starts where the group stopped; {starts[0]} would silently skip or "
            "repeat its messages: move the group with 'msgstore group reset' instead"
        )
    if isinstance(args.offset, int) and args.offset >= 0 and len(args.partition or []) != 1:
        raise InvalidArgument(
            "an absolute --offset needs exactly one --partition (offsets are per partition); "
            "use --offset beginning|end|-N for every partition"
        )
    if args.partition and len(set(args.partition)) != len(args.partition):
        raise InvalidArgument("--partition lists a partition twice")
    if args.from_time and args.until:
        begin, end = parse_time(args.from_time, "--from"), parse_time(args.until, "--until")
        if begin > end:
            raise UsageError(
                f"--from ({args.from_time}) is later than --until ({args.until}): "
                "no message can be in that range"
            )


def cmd_consume(args: argparse.Namespace) -> int:
    from storage_node.cli.common import client_of

    if args.offset is not None:
        args.offset = parse_offset(args.offset)
    check_flags(args)
    with client_of(args) as client:
        client.max_retries = 3  # an unreachable partition is reported, not waited for
        consumer = Consumer(args, client)
        code = 0
        try:
            consumer.run()
            consumer.out.flush()
        except KeyboardInterrupt:
            code = 130
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            silence_stdout()  # the reader went away: what it got is committed below
        finally:
            consumer.commit()
            if consumer.pool is not None:
                consumer.pool.shutdown(wait=False, cancel_futures=True)
        if consumer.unreachable:
            names = ", ".join(f"{p} ({why})" for p, why in sorted(consumer.unreachable.items()))
            print(
                f"error: partitions not read, their nodes are unreachable: {names}; "
                f"every other partition was read",
                file=sys.stderr,
            )
            return code or 1
        return code


def register_consume(sub: Any, parent: argparse.ArgumentParser) -> None:
    summary = "print messages (JSON lines, raw values or a template)"
    c = topic_command(sub, parent, "consume", summary, __doc__, "topic to read")
    c.add_argument(
        "--group",
        "-G",
        help="start where this consumer group stopped and commit what is printed",
    )
    c.add_argument(
        "--partition",
        "-p",
        type=int,
        action="append",
        help="only this partition (repeat for several); with --group only these are committed",
    )
    c.add_argument(
        "--offset",
        "-o",
        metavar="POS",
        help="start: beginning (default), end, -N (N before the end of each partition) or "
        "an offset (with one --partition)",
    )
    c.add_argument("--last", "-N", type=int, metavar="N", help="the last N messages of the topic")
    c.add_argument(
        "--from",
        dest="from_time",
        metavar="TIME",
        help="start at messages stored at or after TIME (epoch ms or ISO, e.g. 2026-11-24T10:00)",
    )
    c.add_argument(
        "--until", metavar="TIME", help="stop before messages stored after TIME (epoch ms or ISO)"
    )
    c.add_argument("--tag", help="only messages with this tag")
    c.add_argument("--max", "-c", type=int, help="stop after N messages")
    c.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="after the end, wait for new messages (Ctrl-C to stop)",
    )
    c.add_argument(
        "--format",
        default="json",
        metavar="FMT",
        help="json (default: one JSON object per line), raw (the value), or a template: "
        "%%t topic %%p partition %%o offset %%k key %%v value %%s value size %%g tag "
        "%%i msg_id %%T store time %%B born time, \\n \\t escapes (a newline ends each message)",
    )
    c.set_defaults(func=cmd_consume)
