"""Message-ID indexes of a node: one two-level index file per app and hour.

Keeps a bounded set of open files, hands out node-assigned sequence numbers (continuing
after a restart from what the index already holds), and resolves IDs to log positions.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections import OrderedDict
from typing import Literal, overload

import numpy as np

from storage_node.backend.files import ensure_dir
from storage_node.formats.filenames import hour_folder
from storage_node.formats.message_id import MessageId, MsgIdIndexFile

MAX_OPEN = 64


class MsgIdIndexes:
    def __init__(self, root: str) -> None:
        self.root = ensure_dir(root)
        self._files: OrderedDict[tuple[int, str], MsgIdIndexFile] = OrderedDict()
        self._next: dict[tuple[str, int], int] = {}
        self._dirty: set[tuple[int, str]] = set()
        self._lock = threading.RLock()

    def _path(self, hour: int, app: str) -> str:
        return os.path.join(self.root, hour_folder(hour), app)

    @overload
    def _file(self, hour: int, app: str, create: Literal[True]) -> MsgIdIndexFile: ...
    @overload
    def _file(self, hour: int, app: str, create: bool) -> MsgIdIndexFile | None: ...
    def _file(self, hour: int, app: str, create: bool) -> MsgIdIndexFile | None:
        key = (hour, app)
        f = self._files.get(key)
        if f is not None:
            self._files.move_to_end(key)
            return f
        path = self._path(hour, app)
        if not create and not os.path.exists(path):
            return None
        f = MsgIdIndexFile(path)
        self._files[key] = f
        while len(self._files) > MAX_OPEN:
            old_key, old = self._files.popitem(last=False)
            if old_key in self._dirty:
                old.sync()
                self._dirty.discard(old_key)
            old.close()
        return f

    def assign(self, app: str, hour: int, ip: int, n: int) -> int:
        """Reserve ``n`` consecutive sequence numbers of (app, hour) for this node's IP."""
        with self._lock:
            key = (app, hour)
            first = self._next.get(key)
            if first is None:
                f = self._file(hour, app, create=False)
                first = f.next_seq(ip) if f is not None else 0
            self._next[key] = first + n
            return first

    def forget_assigned(self) -> None:
        """Count again from the files at the next ``assign``: IDs were indexed meanwhile
        that this cache did not hand out (a replicated log's copy, led elsewhere)."""
        with self._lock:
            self._next.clear()

    def reserve(self, app: str, hour: int, ip: int, seq: int) -> None:
        """Keep node-assigned numbers of (app, hour) above ``seq`` (a producer-supplied ID
        with this node's IP must never be handed out again)."""
        with self._lock:
            key = (app, hour)
            if key not in self._next:
                f = self._file(hour, app, create=False)
                self._next[key] = f.next_seq(ip) if f is not None else 0
            if self._next[key] <= seq:
                self._next[key] = seq + 1

    def put_run(self, app: str, hour: int, ip: int, first_seq: int, positions: np.ndarray) -> None:
        with self._lock:
            self._file(hour, app, create=True).put_run(ip, first_seq, positions)
            self._dirty.add((hour, app))

    def put(self, mid: MessageId, position: int) -> None:
        with self._lock:
            self._file(mid.hour, mid.app, create=True).put(mid.ip, mid.seq, position)
            self._dirty.add((mid.hour, mid.app))

    def get(self, mid: MessageId) -> int | None:
        with self._lock:
            f = self._file(mid.hour, mid.app, create=False)
            return None if f is None else f.get(mid.ip, mid.seq)

    def sync(self) -> None:
        with self._lock:
            for key in list(self._dirty):
                f = self._files.get(key)
                if f is not None:
                    f.sync()
            self._dirty.clear()

    def expire_before(self, hour: int) -> int:
        """Delete hour folders older than ``hour`` that nobody wrote to since; returns how many.

        The folder is named by the hour inside the IDs, which a producer chooses: a folder
        written recently (a producer with an old clock) stays until its files are old too.
        """
        removed = 0
        cutoff_s = (hour + 1) * 3600
        with self._lock:
            cutoff = hour_folder(hour)
            for name in os.listdir(self.root):
                if not (len(name) == 10 and name.isdigit() and name < cutoff):
                    continue
                folder = os.path.join(self.root, name)
                files = [os.path.join(folder, f) for f in os.listdir(folder)]
                if any(os.path.getmtime(f) >= cutoff_s for f in files):
                    continue
                for key in [k for k in self._files if hour_folder(k[0]) == name]:
                    self._files.pop(key).close()
                    self._dirty.discard(key)
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        return removed

    def close(self) -> None:
        with self._lock:
            self.sync()
            for f in self._files.values():
                f.close()
            self._files.clear()
