"""The in-sync set of a led log and the wait of a ``sync`` append for its copies.

A follower acknowledges by fetching: the position it fetches from is durable on its disk.
A follower is in sync while it keeps fetching and has reached the leader's durable end
within ``max_lag_s``; one that falls behind leaves the set and rejoins once caught up. A
``sync`` append is acknowledged once ``min_in_sync - 1`` followers have acknowledged its
end; the leader fails it fast (503 ``not_enough_replicas``) when fewer are in sync.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from storage_node.errors import NotEnoughReplicas


@dataclass
class FollowerState:
    acked: int = 0  # durable on the follower below this position
    seen: float = 0.0  # monotonic time of its last fetch
    caught_up: float = 0.0  # monotonic time it last reached the leader's durable end


class InSyncTracker:
    def __init__(self, followers: list[str], min_in_sync: int, max_lag_s: float = 10.0) -> None:
        # a new leader counts every follower in sync until it misses ``max_lag_s`` (as a
        # Kafka ISR starts with every replica): writes wait for real acknowledgements
        # either way, this only decides when to fail fast
        now = time.monotonic()
        self.followers = {f: FollowerState(0, now, now) for f in followers}
        self.min_in_sync = min_in_sync
        self.max_lag_s = max_lag_s
        self._changed = asyncio.Event()  # replaced at every acknowledgement
        self.data = asyncio.Event()  # replaced whenever the leader's log grows
        self._loop: asyncio.AbstractEventLoop | None = None  # the fetches' (``ack``)

    def ack(self, follower: str, position: int, leader_end: int) -> None:
        """(Event loop.) A fetch from ``position``: everything below it is durable there."""
        self._loop = asyncio.get_running_loop()
        state = self.followers.setdefault(follower, FollowerState())
        now = time.monotonic()
        state.acked = position  # lower after a truncation: it holds less now
        state.seen = now
        if position >= leader_end:
            state.caught_up = now
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    def grew(self) -> None:
        """(Event loop.) The leader's log grew in its files: wake waiting fetches."""
        event, self.data = self.data, asyncio.Event()
        event.set()

    def grew_elsewhere(self) -> None:
        """(Any thread: the commit log's ``on_written``.) ``grew`` on the fetches' loop, as
        soon as bytes are written, so followers copy them while the leader's fsync runs."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.grew)

    def in_sync(self, leader_end: int) -> list[str]:
        now = time.monotonic()
        return sorted(
            f
            for f, s in self.followers.items()
            if now - s.seen <= self.max_lag_s
            and (s.acked >= leader_end or now - s.caught_up <= self.max_lag_s)
        )

    def copies(self, position: int) -> int:
        """Replicas (the leader counted) durable at least up to ``position``."""
        return 1 + sum(1 for s in self.followers.values() if s.acked >= position)

    async def wait_copies(self, position: int, leader_end: int, timeout_s: float) -> int:
        """Wait until ``min_in_sync`` replicas hold ``position``; returns how many do."""
        need = self.min_in_sync
        if self.copies(position) >= need:
            return self.copies(position)
        if 1 + len(self.in_sync(leader_end)) < need:
            raise NotEnoughReplicas(
                f"only {1 + len(self.in_sync(leader_end))} replicas are in sync, "
                f"{need} must hold a write",
                retry_after_s=1,
            )
        deadline = time.monotonic() + timeout_s
        while self.copies(position) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NotEnoughReplicas(
                    f"{self.copies(position)} of the {need} replicas a write needs hold it "
                    f"after {timeout_s}s",
                    retry_after_s=1,
                )
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                pass
        return self.copies(position)

    def status(self, leader_end: int) -> dict[str, dict[str, object]]:
        now = time.monotonic()
        synced = set(self.in_sync(leader_end))
        return {
            f: {
                "acked": s.acked,
                "lag_bytes": max(0, leader_end - s.acked),
                "in_sync": f in synced,
                "last_fetch_s_ago": round(now - s.seen, 3) if s.seen else None,
            }
            for f, s in sorted(self.followers.items())
        }
