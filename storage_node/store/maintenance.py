"""The maintenance thread: periodic checkpoints, the file lifecycle, spare key-index files.

One daemon thread per store. Each tick it makes the next key-index file if an append took
the spare, then runs the lifecycle pass when its interval is up (which checkpoints first)
or else a checkpoint when that interval is up. An error is counted and kept for stats; the
store keeps serving.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from storage_node.store.stats import count_error


class Maintenance:
    def __init__(
        self,
        checkpoint_interval_s: float,
        lifecycle_interval_s: float,
        checkpoint: Callable[[], object],
        run_lifecycle: Callable[[], object],
        prepare_spare: Callable[[], None],
        counters: dict,
    ) -> None:
        self.checkpoint_interval_s = checkpoint_interval_s
        self.lifecycle_interval_s = lifecycle_interval_s
        self.checkpoint = checkpoint
        self.run_lifecycle = run_lifecycle
        self.prepare_spare = prepare_spare
        self.counters = counters
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="msgstore-maint", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for its current step to finish."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        interval = self.lifecycle_interval_s
        next_ckpt = time.monotonic() + self.checkpoint_interval_s
        next_life = time.monotonic() + interval if interval > 0 else float("inf")
        while not self._stop.wait(
            min(1.0, max(0.05, min(next_ckpt, next_life) - time.monotonic()))
        ):
            self.prepare_spare()  # after an append took the last one
            now = time.monotonic()
            try:
                if now >= next_life:
                    self.run_lifecycle()
                    next_life = time.monotonic() + interval
                    next_ckpt = time.monotonic() + self.checkpoint_interval_s
                elif now >= next_ckpt:
                    self.checkpoint()
                    next_ckpt = time.monotonic() + self.checkpoint_interval_s
            except Exception as exc:  # keep serving; surface the problem in stats
                count_error(self.counters, "maintenance", repr(exc))
