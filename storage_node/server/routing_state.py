"""The node's live copy of the routing table: reload on change, ownership checks, topic adds.

The file is the shared truth (written by the launcher, a node of a ``local`` cluster, or the
operator). A bad document never replaces a good one: it is logged and ignored.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from storage_node.backend.files import atomic_write
from storage_node.errors import InvalidArgument, NotLeader, TopicConflict, UnknownTopic
from storage_node.store.topics import adds_partitions
from storage_node.wire.routing_table import (
    RoutingTable,
    TopicRoute,
    parse_routing,
    standalone_table,
)

if TYPE_CHECKING:
    from storage_node.store.types import TopicConfig

log = logging.getLogger(__name__)


def write_routing_file(path: str | os.PathLike[str], table: RoutingTable) -> None:
    """Atomically replace the routing file: temp file, fsync, rename, fsync the folder."""
    data = json.dumps(table.to_json(), indent=2, sort_keys=True).encode() + b"\n"
    atomic_write(os.fspath(path), data, mode=0o666, unique=True)  # 0666: as open() makes it


def read_routing_file(path: str | os.PathLike[str]) -> RoutingTable:
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidArgument(f"routing file {path} is not JSON: {exc}") from None
    return parse_routing(doc)


class RoutingState:
    """Holds the current table and answers 'who owns this partition?'."""

    def __init__(
        self,
        node_id: str,
        address: str,
        routing_file: str | None,
        local_topics: Callable[[], dict[str, dict[str, Any]]],
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.path = routing_file or None
        self._local_topics = local_topics
        self._stamp: tuple[int, int, int] | None = None
        self._lock = threading.Lock()
        self.table: RoutingTable = standalone_table(node_id, address, {})
        self.last_error: str | None = None
        if self.path:
            self.refresh_if_changed()

    @property
    def standalone(self) -> bool:
        return self.path is None

    def current(self) -> RoutingTable:
        if self.standalone:
            return standalone_table(self.node_id, self.address, self._local_topics())
        return self.table

    def refresh_if_changed(self) -> bool:
        """Reload the file if its stat changed; True when a new table was taken."""
        if not self.path:
            return False
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.last_error = f"routing file {self.path} does not exist"
            return False
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return False
        with self._lock:
            try:
                table = read_routing_file(self.path)
            except (OSError, InvalidArgument) as exc:
                self.last_error = str(exc)
                log.error("ignoring routing file: %s", exc)
                self._stamp = stamp
                return False
            self._stamp = stamp
            if table.generation < self.table.generation:
                log.warning(
                    "ignoring routing generation %d older than %d",
                    table.generation,
                    self.table.generation,
                )
                return False
            changed = table != self.table
            self.table = table
            self.last_error = None
            return changed

    def offer(self, table: RoutingTable) -> bool:
        """Take a table handed over by the cluster's controller (faster than the shared file
        when that file is a mounted ConfigMap); True when taken. Only a newer generation of
        the same cluster is taken: same nodes, same manager, this node among them."""
        if self.standalone:
            raise TopicConflict("this node has no routing file: there is no table to replace")
        with self._lock:
            held = self.table
            if table.managed_by != held.managed_by:
                raise InvalidArgument(
                    f"the table is managed by {table.managed_by!r}, this node's by "
                    f"{held.managed_by!r}"
                )
            if [n.id for n in table.nodes] != [n.id for n in held.nodes]:
                raise InvalidArgument("the table lists other nodes than this node's table")
            if table.generation <= held.generation:
                return False
            self.table = table
            return True

    def route(self, topic: str) -> TopicRoute | None:
        if self.standalone:
            return None
        route = self.table.topics.get(topic)
        if route is None and self.refresh_if_changed():
            route = self.table.topics.get(topic)
        return route

    def check_owner(self, topic: str, partition: int) -> None:
        """Raise NotLeader (421) naming the owner if another node owns the partition."""
        route = self.route(topic)
        if route is None or not 0 <= partition < route.partitions:
            return  # not routed: this node serves it (or the store rejects the partition)
        owner = self.table.leader_of(route.owners[partition])
        if owner == self.node_id:
            return
        if self.refresh_if_changed():
            self.check_owner(topic, partition)
            return
        address = self.table.node_address(owner)
        log_route = self.table.logs.get(route.owners[partition])
        raise NotLeader(
            f"partition {partition} of topic {topic!r} is owned by node {owner!r} at {address}",
            topic=topic,
            partition=partition,
            leader_id=owner,
            leader_address=address,
            epoch=log_route.epoch if log_route is not None else 0,
            owner=address,
            owner_id=owner,
        )

    def owned_partitions(self, topic: str, partitions: int) -> list[int]:
        route = self.route(topic)
        if route is None:
            return list(range(partitions))
        table = self.table
        mine = [p for p, o in enumerate(route.owners) if table.leader_of(o) == self.node_id]
        if table.logs and mine:  # a batch goes to one log: the first one led here
            first = route.owners[mine[0]]
            mine = [p for p in mine if route.owners[p] == first]
        return mine

    def log_of(self, topic: str, partition: int) -> str | None:
        """The replicated log holding a partition (None when logs are not replicated)."""
        table = self.table
        route = table.topics.get(topic)
        if not table.logs or route is None or not 0 <= partition < route.partitions:
            return None
        return route.owners[partition]

    def peers(self) -> list[tuple[str, str]]:
        """(id, address) of every other node (none for a standalone node: no table built)."""
        if self.standalone:
            return []
        table = self.current()
        return [(n.id, n.address) for n in table.nodes if n.id != self.node_id]

    def _update(self, change: Callable[[RoutingTable], RoutingTable | None]) -> RoutingTable:
        """Apply ``change`` to the file's table under the exclusive lock and write the result
        (nothing is written when it returns None); the table in force afterwards."""
        assert self.path
        table = read_routing_file(self.path)
        if table.managed_by != "local":
            # the operator's table (a read-only mount): the change refuses itself, naming
            # where topics are declared; never a lock file or a write on that mount
            if change(table) is not None:
                table.check_managed("change it")
            return table
        with open(self.path + ".lock", "a+") as lock_fh:
            fcntl.flock(lock_fh, fcntl.LOCK_EX)
            try:
                table = read_routing_file(self.path)
                new = change(table)
                if new is not None:
                    write_routing_file(self.path, new)
                    table = new
            finally:
                fcntl.flock(lock_fh, fcntl.LOCK_UN)
        self.refresh_if_changed()
        return table

    def remove_topic(self, name: str) -> RoutingTable:
        """Delete a topic from a ``local``-managed file; every node is marked as still
        having to delete its copy (``deletion_done`` clears them)."""

        def change(table: RoutingTable) -> RoutingTable:
            if name not in table.topics:
                raise UnknownTopic(f"unknown topic {name!r}", topic=name)
            table.check_managed(f"remove {name!r}")
            return table.without_topic(name)

        return self._update(change)

    def deletion_done(self, name: str, node_ids: frozenset[str]) -> None:
        """Record that these nodes deleted their copy of a deleted topic."""
        if name in self.table.pending_deletions():
            self._update(lambda table: table.with_deletion_done(name, node_ids))

    def grow_topic(
        self, name: str, partitions: int, exclude: frozenset[str] = frozenset()
    ) -> TopicRoute:
        """Raise a topic's partition count in a ``local``-managed file (idempotent); a
        lower count is refused and changes nothing."""

        def change(table: RoutingTable) -> RoutingTable | None:
            route = table.topics.get(name)
            if route is None:
                raise UnknownTopic(f"unknown topic {name!r}", topic=name)
            if not adds_partitions(name, route.partitions, partitions):
                return None
            table.check_managed(f"change {name!r}")
            return table.with_partitions(name, partitions, exclude)

        return self._update(change).topics[name]

    def add_topic(self, cfg: TopicConfig, exclude: frozenset[str] = frozenset()) -> TopicRoute:
        """Add a topic to a ``local``-managed file under an exclusive lock (idempotent)."""
        return self._update(lambda table: table.adding_topic(cfg, exclude)).topics[cfg.name]
