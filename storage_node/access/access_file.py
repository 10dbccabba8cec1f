"""The access document on disk, re-read when it changes: users and ACL changes apply
without restarting a node.

The file is written by the operator (a mounted Secret) or, for clusters outside Kubernetes,
by ``write_access_file`` (atomic rename). A document that does not parse, or whose
``generation`` is older than the one in force, never replaces it: the node logs it and
keeps the good one, the way the routing file is handled.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from storage_node.access.document import AccessDocument, parse_access, rule_text
from storage_node.backend.files import atomic_write
from storage_node.errors import InvalidArgument

log = logging.getLogger("msgstore.access")
CHANGE_KINDS = ("user_added", "user_removed", "user_changed", "acl_added", "acl_removed")
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
        # changes applied since start, by kind (CHANGE_KINDS): what each node counts, whoever
        # made the change (this node's API, another node's, the operator)
        self.changes: Counter[str] = Counter()
        self._started = False  # the first document is the starting point, not a change
        self._load()
        self._started = True

    @property
    def generation(self) -> int:
        return self._doc.generation

    def refresh(self) -> AccessDocument:
        """Re-read the file now (after this node changed it): the change applies at once here."""
        with self._lock:
            self._load()
            self._checked = time.monotonic()
        return self._doc

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
        if self._started:
            self._count_changes(self._doc, doc)
        self._doc = doc

    def _count_changes(self, old: AccessDocument, new: AccessDocument) -> None:
        """Count and log what a new document changes (never a token or its digest)."""
        old_users = {u.name: u for u in old.users}
        new_users = {u.name: u for u in new.users}
        found: Counter[str] = Counter()
        for name in new_users.keys() - old_users.keys():
            found["user_added"] += 1
            log.info("access: user %s added", name, extra={"resource": f"user:{name}"})
        for name in old_users.keys() - new_users.keys():
            found["user_removed"] += 1
            log.info("access: user %s removed", name, extra={"resource": f"user:{name}"})
        for name in new_users.keys() & old_users.keys():
            if new_users[name] != old_users[name]:
                found["user_changed"] += 1
                log.info(
                    "access: user %s has a new credential", name, extra={"resource": f"user:{name}"}
                )
        old_rules, new_rules = set(old.acls), set(new.acls)
        for rule in sorted(new_rules - old_rules, key=rule_text):
            found["acl_added"] += 1
            log.info(
                "access: rule added: %s", rule_text(rule), extra={"resource": f"user:{rule.user}"}
            )
        for rule in sorted(old_rules - new_rules, key=rule_text):
            found["acl_removed"] += 1
            log.info(
                "access: rule removed: %s", rule_text(rule), extra={"resource": f"user:{rule.user}"}
            )
        self.changes.update(found)
        log.info("access document generation %d in force", new.generation)


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
    data = json.dumps(doc.to_json(), indent=2, sort_keys=True).encode() + b"\n"
    atomic_write(os.fspath(path), data, mode=0o600, unique=True)


def edit_access_file(
    path: str | os.PathLike[str], change: Callable[[AccessDocument], AccessDocument]
) -> AccessDocument:
    """Change the document in ``path`` as one step: under an exclusive lock of
    ``<path>.lock`` (every node of a local cluster and the CLI share the file), read it,
    apply ``change``, write it back with the next generation. ``change`` raising, or
    returning the document it was given (nothing to do), leaves the file as it was.
    Returns the document in the file afterwards."""
    target = Path(path)
    lock_fd = os.open(target.with_name(target.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        before = read_access_file(target)
        changed = change(before)
        if changed is before:
            return before
        after = replace(changed, generation=before.generation + 1)
        write_access_file(target, after)
        return after
    finally:
        os.close(lock_fd)  # releases the lock


def access_file_writable(path: str | os.PathLike[str]) -> bool:
    """Whether this process may replace the file: its folder writable (a mounted Secret's
    is not), and the file itself when it exists."""
    target = Path(path)
    if not os.access(target.parent, os.W_OK | os.X_OK):
        return False
    return not target.exists() or os.access(target, os.W_OK)
