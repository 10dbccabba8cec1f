"""What the partition service needs of the logs a node hosts, whether one log of factor 1
(``SingleLog``) or replicated logs led and followed (``replication.replicas.LogHost``)."""

from __future__ import annotations

from typing import Protocol

from storage_node.store import Store


class LogSet(Protocol):
    """The logs of one node. ``log_id`` None names the node's own log."""

    @property
    def offsets_in_log(self) -> bool:
        """True when group offset commits go into the log (its copies must hold them)."""
        ...

    def own_store(self) -> Store | None:
        """The store of the node's own log in any role (topic metadata: every hosted log
        holds every topic); None when this node hosts no copy of it."""
        ...

    def leader_store(self, log_id: str | None) -> Store:
        """The store of a log this node leads and may write; NotLeader, Fenced (a newer
        epoch replaced it) or Unavailable (the controller has not named a leader) else."""
        ...

    def hosted_store(self, log_id: str | None) -> Store | None:
        """The store of a log this node holds a copy of (led or followed), else None."""
        ...

    def led_stores(self) -> list[Store]:
        """The stores of every log this node leads, in log id order."""
        ...

    def led_logs(self) -> dict[str, Store]:
        """Every log this node leads by id."""
        ...

    def hosted_logs(self) -> dict[str, tuple[Store, bool]]:
        """Every log copy held here by log id ("" for an unreplicated node's one log):
        its store and whether this node leads it."""
        ...

    def hosted_stores(self) -> list[Store]:
        """Every store this node holds (led and followed copies)."""
        ...

    async def copies(self, log_id: str | None, store: Store) -> int | None:
        """(After an append to a led log.) Wait, for a ``sync`` log, until its minimum
        in-sync replicas hold what was appended; how many replicas do (None: unreplicated)."""
        ...

    def close(self) -> None: ...
