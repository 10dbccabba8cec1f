"""The input of ``msgstore produce``: lines read from a file descriptor (with a timeout, and
woken by Ctrl-C) and parsed into messages by the input mode (json, raw, envelope)."""

from __future__ import annotations

import base64
import binascii
import json
import os
import select
import signal
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from storage_node.client.out_message import OutMessage
from storage_node.formats.json_lines import born_ms, line_content, load_json
from storage_node.formats.limits import EMPTY_KEY_HINT as RULE

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
    if what == "key" and not text:
        raise BadLine(f"the key is empty: {RULE}")
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
            if not key:
                raise BadLine(f"the key before {self.key_delimiter.decode()!r} is empty: {RULE}")
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
