"""``msgstore produce``: lines from stdin or a file into a topic, without losing or changing one.

A line is user data: by default (``--input json``) each line must be JSON and is stored
byte for byte; ``--input raw`` stores any line as it is; ``--input envelope`` reads the
message documents ``msgstore consume`` prints (value, key, tag, born time; a message ID or
partition only when asked with ``--keep``). Lines are sent in batches of at most
``--batch-size`` messages and ``--batch-bytes`` bytes, and a batch waits at most
``--linger-ms`` for more lines (streams are stored as they come). A run that stops early
says how many lines are stored and how to resume (``--skip N``; after a batch that was only
partly stored also ``--producer-id`` and ``--retry``, which resend its unconfirmed lines
so that each is stored once: cli/produce_send.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from storage_node.cli.common import silence_stdout, topic_command
from storage_node.cli.produce_input import (
    EOF,
    INTERRUPTED,
    TIMEOUT,
    BadLine,
    Interrupts,
    Line,
    LineParser,
    LineReader,
)
from storage_node.cli.produce_send import (
    Producer,
    RetryGroup,
    SendFailed,
    failure_report,
)
from storage_node.errors import MsgStoreError
from storage_node.formats.json_lines import UTF8_BOM

INPUT_MODES = ("json", "raw", "envelope")
KEEP_FIELDS = ("msg_id", "partition")


def cmd_produce(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from storage_node.cli.common import client_of

    if args.batch_size < 1 or args.batch_bytes < 1 or args.linger_ms < 0 or args.skip < 0:
        raise_usage("--batch-size and --batch-bytes must be >= 1, --linger-ms and --skip >= 0")
    keep = {k.strip() for k in (args.keep or "").split(",") if k.strip()}
    if keep - set(KEEP_FIELDS):
        raise_usage(f"--keep takes a comma-separated list of {', '.join(KEEP_FIELDS)}")
    if keep and args.input != "envelope":
        raise_usage("--keep only applies to --input envelope")
    if args.input == "envelope" and (args.key_field or args.key_delimiter or args.tag_field):
        raise_usage("--key-field, --tag-field and --key-delimiter do not apply to --input envelope")
    if args.input == "raw" and (args.key_field or args.tag_field or args.time_field):
        raise_usage("--key-field, --tag-field and --time-field need JSON lines (--input json)")
    if args.key_delimiter == "":
        raise_usage("--key-delimiter must not be empty")
    parser = LineParser(
        args.input,
        args.key_field,
        args.tag_field,
        args.time_field,
        args.key_delimiter.encode() if args.key_delimiter else None,
        keep,
    )
    if args.file:
        try:
            fd = os.open(args.file, os.O_RDONLY)
        except OSError as exc:
            raise MsgStoreError(f"cannot read --file {args.file}: {exc.strerror}") from None
    else:
        fd = sys.stdin.fileno()
    show_bar = not args.quiet and sys.stderr.isatty()
    interrupts = Interrupts()
    out = sys.stdout.buffer
    try:
        with (
            client_of(args) as client,
            tqdm(
                unit="msg", file=sys.stderr, desc=f"produce {args.topic}", disable=not show_bar
            ) as bar,
        ):
            producer = Producer(args, client, bar if show_bar else None)
            return _produce_loop(args, parser, LineReader(fd, interrupts.wake_fd), producer, out)
    finally:
        interrupts.close()
        if args.file:
            os.close(fd)


def raise_usage(message: str) -> None:
    from storage_node.errors import InvalidArgument

    raise InvalidArgument(message)


def _produce_loop(
    args: argparse.Namespace, parser: LineParser, reader: LineReader, producer: Producer, out: Any
) -> int:
    linger = args.linger_ms / 1000.0
    pending: list[Line] = []
    pending_bytes = 0
    deadline = 0.0
    number = 0
    stop_reason: str | None = None  # why the run ends before the input does
    exit_code = 0
    sending = [0, 0]  # first and last line of the batch being sent
    retries = [RetryGroup.parse(text) for text in args.retry or []]
    wanted = {n for group in retries for n in group.partitions}  # lines to resend
    if retries and not args.producer_id:
        raise_usage("--retry needs the --producer-id the failed run printed")
    if wanted and max(wanted) > args.skip:
        raise_usage("--retry names lines of the batch --skip skips: resume as the error said")
    kept: dict[int, Line] = {}

    def emit(stored: list[tuple[Line, Any]]) -> None:
        if stored and args.print_results:
            text = "".join(
                json.dumps({"line": line.number, **result}) + "\n" for line, result in stored
            )
            out.write(text.encode())
            out.flush()

    def send(batch: list[Line], group: RetryGroup | None = None) -> None:
        """Send and print the results of what is stored, also of a batch that failed."""
        try:
            emit(producer.send(batch) if group is None else producer.resend(group, kept))
        except SendFailed as failed:
            emit(failed.stored)
            raise

    def flush() -> None:
        nonlocal pending, pending_bytes
        batch, pending, pending_bytes = pending, [], 0
        if not batch:
            return
        sending[:] = [batch[0].number, batch[-1].number]
        send(batch)
        producer.through = batch[-1].number

    def resend() -> None:
        """The --retry groups, once every skipped line is read (their lines are among them)."""
        sending[:] = [1, args.skip]
        while retries:
            send([], retries[0])
            retries.pop(0)

    try:
        while True:
            if producer.bad and not producer.skip_bad:
                break
            if pending and time.monotonic() >= deadline:
                flush()
            item = reader.next(max(0.0, deadline - time.monotonic()) if pending else None)
            if item is TIMEOUT:
                flush()
                continue
            if item is INTERRUPTED:
                flush()
                stop_reason = "interrupted"
                exit_code = 130
                break
            if item is EOF:
                if retries:
                    resend()
                flush()
                producer.through = number
                break
            number += 1
            if number == 1 and item.startswith(UTF8_BOM):  # an editor's mark, not data
                item = item[len(UTF8_BOM) :]
            if number <= args.skip:
                if number in wanted:
                    message = parser.parse(item)
                    if message is not None:
                        kept[number] = Line(number, item, message, 0)
                if number == args.skip and retries:
                    resend()
                continue
            try:
                message = parser.parse(item)
            except BadLine as exc:
                if not producer.skip_bad:
                    flush()
                    print(f"error: line {number}: {exc}", file=sys.stderr)
                    print(
                        f"stored {producer.stored} message(s); every line before line {number} "
                        f"is stored: fix line {number} and resume with --skip {number - 1}",
                        file=sys.stderr,
                    )
                    return 1
                producer.reject_line(number, item, str(exc))
                continue
            if message is None:
                continue
            size = len(message.value) + len(message.key or "") + 64
            if pending and pending_bytes + size > args.batch_bytes:
                flush()
            if not pending:
                deadline = time.monotonic() + linger
            pending.append(Line(number, item, message, size))
            pending_bytes += size
            if len(pending) >= args.batch_size:
                flush()
    except BrokenPipeError:
        # the results' reader went away; the batch whose results failed to print is stored
        silence_stdout()
        batch_end = sending[1]
        print(
            f"error: output closed: stored {producer.stored} message(s) through line "
            f"{batch_end}, not every result was printed; resume with --skip {batch_end}",
            file=sys.stderr,
        )
        return 1
    except SendFailed as failed:
        print(f"error: {failed.error.code}: {failed.error.message}", file=sys.stderr)
        print(failure_report(failed, producer, sending[1]), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        first = producer.through + 1
        print(
            f"error: interrupted while sending: lines from {first} on may or may not be stored "
            f"(stored {producer.stored} message(s) before them); resume with --skip {first - 1}",
            file=sys.stderr,
        )
        return 130
    if producer.bad and not producer.skip_bad:
        line_no, _ = producer.bad[0]
        print(
            f"error: line {line_no} was refused (above); stored {producer.stored} message(s), "
            f"every other line through line {producer.through}: fix line {line_no}, send it "
            f"alone and resume with --skip {producer.through}",
            file=sys.stderr,
        )
        return 1
    summary = f"produced {producer.stored} message(s) to {args.topic}"
    if producer.bad:
        summary += f"; skipped {len(producer.bad)} bad line(s): " + ", ".join(
            str(n) for n, _ in producer.bad[:20]
        )
        if len(producer.bad) > 20:
            summary += ", ..."
    if stop_reason:
        summary = (
            f"{stop_reason}: {summary} through line {producer.through}; "
            f"resume with --skip {producer.through}"
        )
    print(summary, file=sys.stderr)
    return exit_code


def register_produce(sub: Any, parent: argparse.ArgumentParser) -> None:
    summary = "send lines from stdin or a file, one message per line"
    p = topic_command(sub, parent, "produce", summary, __doc__, "topic to append to")
    p.add_argument("--file", help="read this file instead of stdin")
    p.add_argument(
        "--input",
        choices=INPUT_MODES,
        default="json",
        help="json: every line must be JSON and is stored byte for byte (default); "
        "raw: any line is stored as it is; envelope: lines as 'consume' prints them",
    )
    p.add_argument(
        "--keep",
        metavar="FIELDS",
        help="with --input envelope: also take these fields from the input "
        f"(comma-separated: {', '.join(KEEP_FIELDS)}); by default the node assigns them",
    )
    p.add_argument("--key-field", help="take the key from this field of each JSON object")
    p.add_argument("--tag-field", help="take the tag from this field of each JSON object")
    p.add_argument("--time-field", help="take the born time (ms since epoch) from this field")
    p.add_argument(
        "--key-delimiter",
        "-K",
        metavar="DELIM",
        help="each line is KEY<DELIM>VALUE: the key is the text before the first DELIM",
    )
    p.add_argument("--batch-size", type=int, default=2000, help="messages per batch at most")
    p.add_argument(
        "--batch-bytes",
        type=int,
        default=8 << 20,
        help="bytes per batch at most (default 8 MiB); a batch the node finds too large is "
        "split further by itself",
    )
    p.add_argument(
        "--linger-ms",
        type=int,
        default=100,
        help="send a batch once its first line waited this long (default 100)",
    )
    p.add_argument(
        "--skip", type=int, default=0, metavar="N", help="skip the first N input lines (resume)"
    )
    p.add_argument(
        "--skip-bad",
        action="store_true",
        help="report bad lines (with their line numbers) and go on instead of stopping",
    )
    p.add_argument(
        "--reject-file",
        metavar="PATH",
        help="append bad lines to this file (implies --skip-bad)",
    )
    p.add_argument(
        "--print-results",
        action="store_true",
        help="print line, partition, offset and msg_id of every stored message",
    )
    p.add_argument(
        "--producer-id",
        metavar="ID",
        help="send under this idempotent producer id (default: a new one per run); a resume "
        "after a partly stored batch names the one to use",
    )
    p.add_argument(
        "--retry",
        action="append",
        metavar="SEQ:LINE@PARTITION,...",
        help="resend these skipped lines as the sub-batch SEQ of --producer-id was (as a "
        "failed run printed it): a node that stored it does not store it again",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_produce)
