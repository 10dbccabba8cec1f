"""One store per data directory: an exclusive lock on its LOCK file while it is open."""

from __future__ import annotations

import fcntl
import os

from storage_node.errors import Unavailable
from storage_node.formats.filenames import LOCK


class DirectoryLock:
    """Held from construction until ``release`` (or the process ends: the kernel drops it)."""

    def __init__(self, root: str) -> None:
        fd = os.open(os.path.join(root, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise Unavailable(f"data directory is in use by another store: {exc}") from exc
        self._fd: int | None = fd

    def release(self) -> None:
        """Drop the lock (closing the descriptor drops the flock). Idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
