"""Local file primitives: atomic replacement, directory fsync and positional reads.

Every state change of a file (a topic list, a checkpoint, a compacted segment) goes through
``atomic_write`` so a crash leaves either the old or the new version, never a mix.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from collections.abc import Callable, Iterable

TMP_SUFFIX = ".tmp"
SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of dirty pages, do not wait


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call


_sync_file_range = _load_sync_file_range()


def ensure_dir(path: str) -> str:
    """Create ``path`` (and parents) if missing; returns it for chaining."""
    os.makedirs(path, exist_ok=True)
    return path


def fsync_dir(path: str) -> None:
    """Persist the directory entry changes (create, rename, unlink) inside ``path``."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte (os.write may write less than asked for large buffers)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing ``length`` bytes at ``offset`` to the device now,
    without waiting (Linux ``sync_file_range``; elsewhere nothing happens).

    Data written at full speed otherwise piles up in the page cache until an fsync or the
    kernel's own writeback: starting early lets the device work while the writer goes on, so
    the next fsync has little left to wait for. It promises nothing about durability.
    """
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE)  # a failure costs speed only


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """Positional write of every byte."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def pread_exact(fd: int, length: int, offset: int) -> bytes:
    """Positional read that returns fewer bytes only at end of file."""
    data = os.pread(fd, length, offset)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def atomic_write(
    path: str,
    data: bytes | bytearray | memoryview | Iterable[bytes],
    mode: int = 0o644,
    unique: bool = False,
) -> None:
    """Write ``data`` to ``path`` atomically: temp file, fsync, rename, directory fsync.

    ``mode``: the new file's permission bits (less the umask). ``unique``: the temporary file
    is named for this process and thread (``.NAME.tmp-PID-TID``) instead of ``path`` +
    ``.tmp``, for a shared file (routing, access) that several processes may replace at once.
    """
    directory = os.path.dirname(path) or "."
    tmp = path + TMP_SUFFIX
    if unique:
        name = f".{os.path.basename(path)}.tmp-{os.getpid()}-{threading.get_ident()}"
        tmp = os.path.join(directory, name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        if isinstance(data, bytes | bytearray | memoryview):
            write_all(fd, data)
        else:
            for chunk in data:
                write_all(fd, chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


def remove_file(path: str) -> bool:
    """Unlink ``path`` if it exists; True when something was removed."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def remove_temporaries(root: str) -> list[str]:
    """Delete every leftover ``*.tmp`` under ``root`` (half-written files of a crash)."""
    removed = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(TMP_SUFFIX):
                full = os.path.join(dirpath, name)
                remove_file(full)
                removed.append(full)
    return removed
