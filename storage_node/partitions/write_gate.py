"""Whether this node takes writes now: not while draining, not with a nearly full disk."""

from __future__ import annotations

import shutil
import time

from storage_node.errors import DiskFull, Unavailable


class WriteGate:
    def __init__(self, data_dir: str, min_free_bytes: int) -> None:
        self.data_dir = data_dir
        self.min_free_bytes = min_free_bytes
        self.draining = False
        self._free_checked_at = 0.0
        self._free_bytes: int | None = None

    def check(self) -> None:
        """503 while draining, 507 when the data disk is short of space."""
        if self.draining:
            raise Unavailable("the node is draining and accepts no writes", retry_after_s=1)
        self.check_free_space()

    def check_free_space(self) -> None:
        """507 when the data disk has less than min_free_bytes left (checked once a second)."""
        limit = self.min_free_bytes
        if limit <= 0:
            return
        now = time.monotonic()
        if self._free_bytes is None or now - self._free_checked_at > 1.0:
            self._free_bytes = shutil.disk_usage(self.data_dir).free
            self._free_checked_at = now
        if self._free_bytes < limit:
            raise DiskFull(
                f"only {self._free_bytes} bytes free on the data disk, "
                f"{limit} must stay free (MSGSTORE_MIN_FREE_BYTES)",
                free_bytes=self._free_bytes,
            )
