"""Thread pools made on first use and shut down with the store."""

from __future__ import annotations

import concurrent.futures
import threading


class LazyPool:
    """A ``ThreadPoolExecutor`` started by the first ``get`` (most stores never need one)."""

    def __init__(self, workers: int, name: str) -> None:
        self.workers = workers
        self.name = name
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def get(self) -> concurrent.futures.ThreadPoolExecutor:
        pool = self._pool
        if pool is None:
            with self._lock:
                pool = self._pool
                if pool is None:
                    pool = self._pool = concurrent.futures.ThreadPoolExecutor(
                        self.workers, thread_name_prefix=self.name
                    )
        return pool

    def shutdown(self) -> None:
        """Wait for the queued work and stop the threads; a later ``get`` starts anew."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
