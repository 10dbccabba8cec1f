"""The output of ``msgstore consume``: messages rendered as JSON, raw values or a template,
written to stdout with an exact account of which ones the reader got."""

from __future__ import annotations

import array
import base64
import errno
import fcntl
import json
import os
import select
import stat
import sys
import termios
import time
from typing import Any

from storage_node.errors import InvalidArgument

FLUSH_BYTES = 64 * 1024
PIPE_POLL_FIRST_S = 0.0001  # waiting for a pipe's reader: first look again after this
PIPE_POLL_MAX_S = 0.01


def _value_bytes(m: dict[str, Any]) -> bytes:
    if m.get("value") is not None:
        return str(m["value"]).encode("utf-8")
    return base64.b64decode(m.get("value_base64") or "")


TEMPLATE_FIELDS = {
    "t": lambda m: m["topic"].encode(),
    "p": lambda m: str(m["partition"]).encode(),
    "o": lambda m: str(m["offset"]).encode(),
    "k": lambda m: (m.get("key") or "").encode("utf-8"),
    "v": _value_bytes,
    "s": lambda m: str(len(_value_bytes(m))).encode(),
    "g": lambda m: (m.get("tag") or "").encode("utf-8"),
    "i": lambda m: m["msg_id"].encode(),
    "T": lambda m: str(m["store_timestamp"]).encode(),
    "B": lambda m: str(m["timestamp"]).encode(),
}
ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}


def compile_format(fmt: str) -> Any:
    """A function message -> output bytes (with its line end)."""
    if fmt == "json":
        return lambda m: (json.dumps(m, sort_keys=True, ensure_ascii=False) + "\n").encode()
    if fmt == "raw":
        return lambda m: _value_bytes(m) + b"\n"
    parts: list[Any] = []
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c in "%\\" and i + 1 < len(fmt):
            d = fmt[i + 1]
            if c == "%" and d == "%":
                parts.append(b"%")
            elif c == "%" and d in TEMPLATE_FIELDS:
                parts.append(TEMPLATE_FIELDS[d])
            elif c == "\\" and d in ESCAPES:
                parts.append(ESCAPES[d])
            else:
                raise InvalidArgument(
                    f"unknown format directive {c}{d}: use %t %p %o %k %v %s %g %i %T %B %% "
                    "and \\n \\t \\r \\0 \\\\"
                )
            i += 2
            continue
        parts.append(c.encode("utf-8"))
        i += 1
    if not (parts and parts[-1] == b"\n"):
        parts.append(b"\n")

    def render(m: dict[str, Any]) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(m) for p in parts)

    return render


class Output:
    """Writes rendered messages to stdout and knows exactly which were written (even when
    the reader goes away in the middle of a write).

    ``exact`` (a consumer group printing into a pipe): a message counts as printed only
    once the reader has taken it out of the pipe. Each message is written alone and the
    next waits until the pipe is empty (``FIONREAD``), so ``| head -5`` commits the five
    messages head read, not the ones it left in the pipe."""

    def __init__(self, interactive: bool, exact: bool = False) -> None:
        self.fd = sys.stdout.fileno()
        self.interactive = interactive
        self.exact = exact
        self.chunks: list[bytes] = []
        self.marks: list[tuple[int, int]] = []
        self.size = 0
        self.printed: dict[int, int] = {}  # partition -> offset after its last printed message
        self.count = 0

    def add(self, data: bytes, partition: int, offset: int) -> None:
        self.chunks.append(data)
        self.marks.append((partition, offset))
        self.size += len(data)
        if self.exact:
            self._taken()
        elif self.interactive or self.size >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.chunks:
            return
        data = b"".join(self.chunks)
        done = 0
        try:
            while done < len(data):
                done += os.write(self.fd, data[done:])
        finally:
            written = 0
            for chunk, (p, o) in zip(self.chunks, self.marks, strict=True):
                written += len(chunk)
                if written > done:
                    break
                self.printed[p] = o + 1
                self.count += 1
            self.chunks, self.marks, self.size = [], [], 0

    def _taken(self) -> None:
        """Write the one pending message, then wait until the reader has taken all of it
        (BrokenPipeError, with the message not counted, when the reader goes away)."""
        data = self.chunks[0]
        (p, o), self.chunks, self.marks, self.size = self.marks[0], [], [], 0
        done = 0
        while done < len(data):
            done += os.write(self.fd, data[done:])
        pause = PIPE_POLL_FIRST_S
        watch = select.poll()
        watch.register(self.fd, select.POLLOUT)
        unread = array.array("i", [0])
        while True:
            fcntl.ioctl(self.fd, termios.FIONREAD, unread)
            if not unread[0]:
                break
            if any(events & (select.POLLERR | select.POLLHUP) for _, events in watch.poll(0)):
                raise BrokenPipeError(errno.EPIPE, "the reader closed the pipe")
            time.sleep(pause)  # no event says "the pipe is empty": look again shortly
            pause = min(pause * 2, PIPE_POLL_MAX_S)
        self.printed[p] = o + 1
        self.count += 1


def exact_output(group: str | None) -> bool:
    """A group's messages printed into a pipe are committed only once the reader took them."""
    return bool(group) and stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
