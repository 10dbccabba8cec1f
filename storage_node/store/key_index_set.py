"""The set of key-index files of a node, newest last, in any lifecycle state.

Appends go to the one active unsealed IndexFile; when it is full it is sealed and a new one
starts, taken from a spare made ahead of need (as RocketMQ pre-allocates its next mapped
file): making one faults in its slot table, tens of milliseconds that would otherwise stall
the append that needs it. Lookups walk the files newest first, choosing a file when its
[begin, end] time range overlaps the query, and the caller stops as soon as max_count is
met.
"""

from __future__ import annotations

import json
import mmap
import os
import threading
import time
from collections.abc import Iterator

import numpy as np

from storage_node.backend.files import ensure_dir, remove_file
from storage_node.backend.objectstore import ObjectStore
from storage_node.formats.filenames import FOLDERS, State, index_file_name, spare_index_name
from storage_node.formats.key_index_compacted import CompactedKeyIndex
from storage_node.formats.key_index_file import KeyIndexFile
from storage_node.store.pinned import pinned_reader

KeyIndexHandle = KeyIndexFile | CompactedKeyIndex


class KeyIndexSet:
    def __init__(self, root: str, slots: int, items: int) -> None:
        self.dirs: dict[str, str] = {s: ensure_dir(os.path.join(root, s)) for s in FOLDERS}
        self.slots = slots
        self.items = items
        self.files: dict[str, KeyIndexHandle] = {}
        self.states: dict[str, str] = {}
        self.names: list[str] = []
        self.active: KeyIndexFile | None = None
        self.retired: list[tuple[float, KeyIndexHandle]] = []
        self._lock = threading.Lock()
        self._spare: KeyIndexFile | None = None  # the next active file, made ahead of need
        self._spare_lock = threading.Lock()  # one maker of spares at a time
        self._spares_made = 0

    def install(self, name: str, state: str, handle: KeyIndexHandle) -> None:
        with self._lock:
            old = self.files.get(name)
            self.files[name] = handle
            self.states[name] = state
            if old is None:
                self.names = sorted(self.files)
            elif old is not handle:
                self.retired.append((time.monotonic(), old))

    def remove(self, name: str) -> None:
        with self._lock:
            old = self.files.pop(name, None)
            self.states.pop(name, None)
            self.names = sorted(self.files)
            if old is not None:
                self.retired.append((time.monotonic(), old))
            if old is self.active:
                self.active = None

    @staticmethod
    def open_local(path: str, state: str) -> KeyIndexHandle:
        if state == State.UNSEALED:
            return KeyIndexFile.open(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            # mapped read-only: a lookup's two reads are memory copies, no system call, and the
            # mapping outlives a later unlink (upload, expiry) until the handle is dropped
            data = mmap.mmap(fd, size, prot=mmap.PROT_READ) if size else b""
        finally:
            os.close(fd)
        return CompactedKeyIndex(size, lambda o, n: data[o : o + n])

    @staticmethod
    def open_remote(manifest_path: str, objects: ObjectStore) -> KeyIndexHandle:
        with open(manifest_path, "rb") as fh:
            manifest = json.loads(fh.read())
        key = manifest["object_key"]
        return CompactedKeyIndex(
            int(manifest["stored_size"]), pinned_reader(manifest, objects, key)
        )

    def add(self, hashes: np.ndarray, positions: np.ndarray, store_ms: int) -> list[str]:
        """Insert a batch; returns the names of files sealed because they filled up."""
        sealed = []
        done = 0
        n = len(hashes)
        while done < n:
            active = self.active
            if active is None or active.full:
                if active is not None:
                    active.flush()
                    sealed.append(active.name)
                active = self._new_active(store_ms, int(positions[done]))
            done += active.add_batch(hashes[done:], positions[done:], store_ms)
        return sealed

    def _new_active(self, begin_ms: int, begin_pos: int) -> KeyIndexFile:
        name = index_file_name(begin_ms, begin_pos)
        path = os.path.join(self.dirs[State.UNSEALED], name)
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            spare.take_as(path, begin_ms, begin_pos)
            f = spare
        else:
            f = KeyIndexFile.create(path, self.slots, self.items, begin_ms, begin_pos)
        self.install(name, State.UNSEALED, f)
        self.active = f
        return f

    def prepare_spare(self) -> None:
        """Make the next active file now unless one is ready: at open, and in the
        background after a spare was taken. It is a temporary (``*.tmp``) until taken, so
        recovery deletes one left by a crash."""
        with self._spare_lock:
            if self._spare is not None:
                return
            self._spares_made += 1
            path = os.path.join(self.dirs[State.UNSEALED], spare_index_name(self._spares_made))
            spare = KeyIndexFile.create(path, self.slots, self.items, 0, 0)
            with self._lock:
                self._spare = spare

    def seal_active(self) -> str | None:
        """Stop appending to the active file (the next keyed message starts a new one)."""
        if self.active is None or self.active.count <= 1:
            return None
        name = self.active.name
        self.active.flush()
        self.active = None
        return name

    def lookup(self, khash: int, begin_ms: int, end_ms: int) -> Iterator[int]:
        with self._lock:
            handles = [self.files[n] for n in reversed(self.names)]
        for h in handles:
            if h.end_ms < begin_ms or h.begin_ms > end_ms:
                continue
            yield from h.candidates(khash, begin_ms, end_ms)

    def sync(self) -> None:
        if self.active is not None:
            self.active.flush()

    def close(self) -> None:
        for h in list(self.files.values()) + [h for _t, h in self.retired]:
            if isinstance(h, KeyIndexFile):
                h.close()
        with self._spare_lock, self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:  # never taken: nothing refers to it
            spare.close()
            remove_file(spare.path)

    def reap_retired(self, grace_s: float = 60.0) -> None:
        """Unmap replaced files once no lookup can still be walking them."""
        cutoff = time.monotonic() - grace_s
        with self._lock:
            old = [h for t, h in self.retired if t < cutoff]
            self.retired = [(t, h) for t, h in self.retired if t >= cutoff]
        for h in old:
            if isinstance(h, KeyIndexFile):
                h.close()
