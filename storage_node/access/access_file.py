"""The access document on disk, re-read when it changes: users and ACL changes apply
without restarting a node.

The file is written by the operator (a mounted Secret) or, for clusters outside Kubernetes,
by ``write_access_file`` (atomic rename). A document that does not parse, or whose
``generation`` is older than the one in force, never replaces it: the node logs it and
keeps the good one, the way the routing file is handled.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

from storage_node.access.document import AccessDocument, parse_access
from storage_node.errors import InvalidArgument

log = logging.getLogger("msgstore.access")
CHECK_INTERVAL_S = 0.5  # at most one stat() per interval, however many requests arrive


class AccessFile:
    def __init__(self, path: str | os.PathLike[str], check_interval_s: float = CHECK_INTERVAL_S):
        self.path = Path(path)
        self.check_interval_s = check_interval_s
        self._lock = threading.Lock()
        self._doc = AccessDocument()
        self._stamp: tuple[int, int, int] | None = None
        self._checked = 0.0
        self.rejected = 0  # documents refused (bad, or older than the one in force)
        self._load()

    def current(self) -> AccessDocument:
        now = time.monotonic()
        if now - self._checked >= self.check_interval_s:
            with self._lock:
                if now - self._checked >= self.check_interval_s:
                    self._load()
                    self._checked = now
        return self._doc

    def _load(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return  # none yet: keep what is in force (empty at start: only the node tokens)
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            doc = parse_access(json.loads(self.path.read_bytes()))
        except (OSError, ValueError, InvalidArgument) as exc:
            self.rejected += 1
            log.error("access file %s ignored: %s", self.path.name, exc)
            return
        if doc.generation < self._doc.generation:
            self.rejected += 1
            log.error(
                "access file %s ignored: generation %d is older than %d in force",
                self.path.name,
                doc.generation,
                self._doc.generation,
            )
            return
        self._doc = doc


def read_access_file(path: str | os.PathLike[str]) -> AccessDocument:
    """The document in ``path`` (an empty one when there is none yet); errors raise."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return AccessDocument()
    try:
        return parse_access(json.loads(raw))
    except ValueError as exc:
        raise InvalidArgument(f"access file is not JSON: {exc}") from None


def write_access_file(path: str | os.PathLike[str], doc: AccessDocument) -> None:
    """Atomically replace the file (temp file, fsync, rename, fsync the folder), mode 0600:
    it holds token digests."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    data = json.dumps(doc.to_json(), indent=2, sort_keys=True).encode() + b"\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
