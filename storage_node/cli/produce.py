"""``msgstore produce``: lines from stdin or a file into a topic, without losing or changing one.

A line is user data: by default (``--input json``) each line must be JSON and is stored
byte for byte; ``--input raw`` stores any line as it is; ``--input envelope`` reads the
message documents ``msgstore consume`` prints (value, key, tag, born time; a message ID or
partition only when asked with ``--keep``). Lines are sent in batches of at most
``--batch-size`` messages and ``--batch-bytes`` bytes, and a batch waits at most
``--linger-ms`` for more lines (streams are stored as they come). A run that stops early
says how many lines are stored and how to resume (``--skip N``).

Over 400 lines on purpose: one command; its input formats, batching by count, bytes and
time, and the resume report share one read loop and are used by nothing else.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from storage_node.cli.common import silence_stdout, topic_command
from storage_node.client.common import OutMessage
from storage_node.errors import MsgStoreError
from storage_node.formats.json_lines import UTF8_BOM, born_ms, line_content, load_json

INPUT_MODES = ("json", "raw", "envelope")
KEEP_FIELDS = ("msg_id", "partition")
# refusals that concern single messages: the rest of their batch can still be stored
MESSAGE_ERRORS = {
    "invalid_batch",
    "invalid_argument",
    "message_too_large",
    "request_too_large",
    "duplicate_msg_id",
}
READ_CHUNK = 1 << 20
TIMEOUT = object()
EOF = object()
INTERRUPTED = object()


class BadLine(Exception):
    """An input line that cannot be sent; the reason names what is wrong with it."""


@dataclass
class Line:
    number: int
    raw: bytes
    message: OutMessage
    size: int


class LineReader:
    """Lines of a file descriptor as bytes, with a timeout, and woken by Ctrl-C."""

    def __init__(self, fd: int, wake_fd: int | None) -> None:
        self.fd = fd
        self.wake_fd = wake_fd
        self.buf = bytearray()
        self.pos = 0
        self.eof = False

    def next(self, timeout: float | None) -> Any:
        """The next line without its newline, TIMEOUT, EOF or INTERRUPTED."""
        while True:
            nl = self.buf.find(b"\n", self.pos)
            if nl >= 0:
                line = bytes(self.buf[self.pos : nl])
                self.pos = nl + 1
                if self.pos > READ_CHUNK:
                    del self.buf[: self.pos]
                    self.pos = 0
                return line
            if self.eof:
                if self.pos < len(self.buf):
                    line = bytes(self.buf[self.pos :])
                    self.pos = len(self.buf)
                    return line
                return EOF
            fds = [self.fd] + ([self.wake_fd] if self.wake_fd is not None else [])
            ready, _, _ = select.select(fds, [], [], timeout)
            if self.wake_fd is not None and self.wake_fd in ready:
                try:
                    os.read(self.wake_fd, 4096)
                except BlockingIOError:
                    pass
                return INTERRUPTED
            if not ready:
                return TIMEOUT
            chunk = os.read(self.fd, READ_CHUNK)
            if not chunk:
                self.eof = True
            else:
                self.buf += chunk


def _key_text(value: Any, what: str) -> str:
    """A key or tag from JSON: strings as they are, numbers and others as compact JSON."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadLine(f"the {what} is not valid Unicode (a lone surrogate?)") from None
    return text


@dataclass
class LineParser:
    mode: str
    key_field: str | None = None
    tag_field: str | None = None
    time_field: str | None = None
    key_delimiter: bytes | None = None
    keep: set[str] = field(default_factory=set)

    def parse(self, raw: bytes) -> OutMessage | None:
        """The message of one line (None for a blank line); BadLine when it cannot be sent."""
        if not raw.strip():
            return None
        if self.mode == "envelope":
            return self._envelope(raw)
        if self.mode == "json":  # the rule shared with the Spark ingest job
            raw = line_content(raw)
        key: str | None = None
        value = raw
        if self.key_delimiter is not None:
            head, sep, tail = raw.partition(self.key_delimiter)
            if not sep:
                raise BadLine(f"no key delimiter {self.key_delimiter.decode()!r} in the line")
            try:
                key = head.decode("utf-8")
            except UnicodeDecodeError:
                raise BadLine("the key before the delimiter is not UTF-8") from None
            value = tail
        message = OutMessage(value, key)
        if self.mode == "raw":
            return message
        try:
            doc = load_json(value.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise BadLine(
                f"not UTF-8 (byte {exc.start}); use --input raw for binary lines"
            ) from None
        except ValueError as exc:
            raise BadLine(f"not JSON ({exc}); use --input raw for plain text lines") from None
        if isinstance(doc, dict):
            if self.key_field and doc.get(self.key_field) is not None:
                message.key = _key_text(doc[self.key_field], "key")
            if self.tag_field and doc.get(self.tag_field) is not None:
                message.tag = _key_text(doc[self.tag_field], "tag")
            if self.time_field and self.time_field in doc:
                try:
                    message.timestamp = born_ms(doc[self.time_field])
                except ValueError as exc:
                    raise BadLine(f"field {self.time_field!r} {exc}") from None
        return message

    def _envelope(self, raw: bytes) -> OutMessage:
        try:
            doc = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise BadLine(f"not UTF-8 (byte {exc.start})") from None
        except ValueError as exc:
            raise BadLine(f"not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise BadLine("an envelope line must be a JSON object with 'value' or 'value_base64'")
        if doc.get("value") is not None and doc.get("value_base64") is not None:
            raise BadLine("an envelope has both 'value' and 'value_base64': give one of them")
        if "value" in doc and doc["value"] is not None:
            if not isinstance(doc["value"], str):
                raise BadLine(
                    f"'value' must be a string, not {type(doc['value']).__name__} "
                    "(use --input json to store the whole line)"
                )
            try:
                value = doc["value"].encode("utf-8")
            except UnicodeEncodeError:
                raise BadLine("'value' is not valid Unicode (a lone surrogate?)") from None
        elif isinstance(doc.get("value_base64"), str):
            try:
                value = base64.b64decode(doc["value_base64"], validate=True)
            except (binascii.Error, ValueError) as exc:
                raise BadLine(f"'value_base64' is not base64: {exc}") from None
        else:
            raise BadLine("an envelope needs 'value' (a string) or 'value_base64'")
        message = OutMessage(value)
        for name in ("key", "tag"):
            if doc.get(name) is not None:
                if not isinstance(doc[name], str):
                    raise BadLine(f"'{name}' must be a string")
                setattr(message, name, _key_text(doc[name], name))
        born = doc.get("timestamp")
        if born is not None:
            if isinstance(born, bool) or not isinstance(born, int) or born < 0:
                raise BadLine("'timestamp' must be ms since epoch (an integer)")
            message.timestamp = born
        if "msg_id" in self.keep and doc.get("msg_id") is not None:
            if not isinstance(doc["msg_id"], str):
                raise BadLine("'msg_id' must be a string")
            message.msg_id = doc["msg_id"]
        if "partition" in self.keep and doc.get("partition") is not None:
            p = doc["partition"]
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise BadLine("'partition' must be a non-negative integer")
            message.partition = p
        return message


class Interrupts:
    """Ctrl-C while producing: the first one asks to stop after sending what is read (it
    wakes the line reader), a second one stops at once."""

    def __init__(self) -> None:
        self.requested = False
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._old_fd = signal.set_wakeup_fd(self._w)
        self._old = signal.signal(signal.SIGINT, self._handle)

    @property
    def wake_fd(self) -> int:
        return self._r

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def close(self) -> None:
        signal.signal(signal.SIGINT, self._old)
        signal.set_wakeup_fd(self._old_fd)
        os.close(self._r)
        os.close(self._w)


class Producer:
    """Sends lines in batches and keeps the account of what is stored."""

    def __init__(self, args: argparse.Namespace, client: Any, bar: Any) -> None:
        self.args = args
        self.client = client
        self.bar = bar
        self.stored = 0
        self.through = args.skip  # every line up to here is stored or was skipped
        self.bad: list[tuple[int, str]] = []
        self.reject = open(args.reject_file, "ab") if args.reject_file else None  # noqa: SIM115
        self.skip_bad = args.skip_bad or args.reject_file is not None

    def reject_line(self, line_no: int, raw: bytes, reason: str) -> None:
        self.bad.append((line_no, reason))
        print(f"line {line_no}: {reason}", file=sys.stderr)
        if self.reject is not None:
            self.reject.write(raw + b"\n")
            self.reject.flush()

    def send(self, lines: list[Line]) -> list[tuple[Line, dict[str, Any]]]:
        """Store a batch; refused messages are found by halving the refused sub-batches
        (an oversized request is split the same way) and set aside as bad lines."""
        stored: list[tuple[Line, dict[str, Any]]] = []
        todo = [lines]
        while todo:
            part = todo.pop()
            results, failures = self.client.produce_partial(
                self.args.topic, [line.message for line in part]
            )
            for line, result in zip(part, results, strict=True):
                if result is not None:
                    stored.append((line, result))
            for indices, err in failures:
                refused = [part[i] for i in indices]
                if err.code not in MESSAGE_ERRORS:
                    raise SendFailed(err, refused, stored)
                if len(refused) == 1:
                    self.reject_line(
                        refused[0].number, refused[0].raw, f"{err.code}: {err.message}"
                    )
                else:
                    half = len(refused) // 2
                    todo.extend([refused[half:], refused[:half]])
        stored.sort(key=lambda pair: pair[0].number)
        self.stored += len(stored)
        if self.bar is not None:
            self.bar.update(len(stored))
        return stored


class SendFailed(Exception):
    def __init__(self, error: MsgStoreError, refused: list[Line], stored: list[Any]) -> None:
        super().__init__(error.message)
        self.error = error
        self.refused = refused
        self.stored = stored


def _resume_hint(first_unstored: int, stored_after: int) -> str:
    text = f"resume with --skip {first_unstored - 1}"
    if stored_after:
        text += f" ({stored_after} later line(s) of that batch are stored and would be sent again)"
    return text


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

    def flush() -> None:
        nonlocal pending, pending_bytes
        batch, pending, pending_bytes = pending, [], 0
        if not batch:
            return
        sending[:] = [batch[0].number, batch[-1].number]
        stored = producer.send(batch)
        if stored and args.print_results:
            text = "".join(
                json.dumps({"line": line.number, **result}) + "\n" for line, result in stored
            )
            out.write(text.encode())
            out.flush()
        producer.through = batch[-1].number

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
                flush()
                producer.through = number
                break
            number += 1
            if number == 1 and item.startswith(UTF8_BOM):  # an editor's mark, not data
                item = item[len(UTF8_BOM) :]
            if number <= args.skip:
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
        first = min(line.number for line in failed.refused)
        after = sum(1 for line, _ in failed.stored if line.number > first)
        print(f"error: {failed.error.code}: {failed.error.message}", file=sys.stderr)
        print(
            f"stored {producer.stored + len(failed.stored)} message(s); line {first} and "
            f"{len(failed.refused) - 1} other line(s) of its batch are not: "
            + _resume_hint(first, after),
            file=sys.stderr,
        )
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
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_produce)
