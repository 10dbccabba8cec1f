"""PartitionService: which store serves a partition here, for every kind of request.

A front end parses its protocol, makes one call here and encodes the answer. Each call
either works on the store of the partition's log, which this node leads, or raises a typed
error: ``NotLeader`` (another node serves it: its id, address and the log's epoch),
``Fenced`` (a newer leader epoch replaced this node's), ``Unavailable`` (the store is still
opening, or a taken-over log waits for its leader to be named), ``DiskFull``. Methods named
``*_store``/``*_stores`` only resolve (no I/O, safe on the event loop); ``async`` methods do
the work in the node's thread pool. docs/ENGINE_API.md ("Partition service") lists them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

from storage_node.errors import MsgStoreError, NotFound, Unavailable, UnknownTopic
from storage_node.formats.packed import PackedBatch
from storage_node.partitions.append_events import AppendEvents
from storage_node.partitions.log_set import LogSet
from storage_node.partitions.merge import sum_reports
from storage_node.partitions.routing_view import RoutingView
from storage_node.partitions.write_gate import WriteGate
from storage_node.replication.replicas import routed_topic
from storage_node.store import AppendColumns, FileInfo, Store, TopicConfig

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class AppendDone:
    """A stored batch: its results and, for a replicated log, how many replicas hold it."""

    result: AppendColumns  # partitions, offsets, message IDs, one row per message
    copies: int | None


class PartitionService:
    """The logs this node hosts, answered by partition. One per node process."""

    def __init__(
        self, node_id: str, routing: RoutingView, gate: WriteGate, executor: Executor
    ) -> None:
        self.node_id = node_id
        self.routing = routing
        self.gate = gate
        self.executor = executor
        self.events = AppendEvents()
        self.logs: LogSet | None = None  # set once the store(s) are open
        self.startup_error: str | None = None

    # -- the logs -------------------------------------------------------------------------
    def attach(self, logs: LogSet) -> None:
        """Serve from ``logs`` (called once the node's stores are open)."""
        self.logs = logs

    def _logs(self) -> LogSet:
        if self.logs is None:
            reason = self.startup_error or "the node is still recovering its store"
            raise Unavailable(reason, retry_after_s=1)
        return self.logs

    def own_store(self) -> Store | None:
        """The node's own log's store (readiness, metrics); None while opening."""
        return self.logs.own_store() if self.logs is not None else None

    def catalog(self) -> Store:
        """The store answering topic metadata (every hosted log holds every topic)."""
        store = self._logs().own_store()
        if store is None:
            raise Unavailable(f"node {self.node_id} holds no copy of its own log")
        return store

    async def in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking store work in the node's pool so the event loop never waits on disk."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(*args))

    # -- resolving a partition ------------------------------------------------------------
    def leader_store(self, topic: str, partition: int) -> Store:
        """The store serving a partition here (reads, offsets); NotLeader if another node
        serves it."""
        logs = self._logs()
        self.routing.check_owner(topic, partition)
        return logs.leader_store(self.routing.log_of(topic, partition))

    def writable_store(self, topic: str, partition: int) -> Store:
        """``leader_store`` for a write: also 503 while draining, 507 on a full disk."""
        self.routing.check_owner(topic, partition)
        self.check_writable()
        return self._logs().leader_store(self.routing.log_of(topic, partition))

    def check_writable(self) -> None:
        """Whether this node takes writes at all now (before a request body is parsed)."""
        self._logs()
        self.gate.check()

    def stores_for(self, topic: str, partitions: Iterable[int]) -> list[tuple[Store, list[int]]]:
        """The partitions grouped by the store serving them (a fetch reads each log once);
        every partition is checked first, so a fetch fails before reading anything."""
        logs = self._logs()
        wanted = list(partitions)
        for p in wanted:
            self.routing.check_owner(topic, p)
        groups: dict[int, tuple[Store, list[int]]] = {}
        for p in wanted:
            store = logs.leader_store(self.routing.log_of(topic, p))
            groups.setdefault(id(store), (store, []))[1].append(p)
        return list(groups.values())

    def hosted_logs(self) -> list[tuple[str, Store, bool]]:
        """(log id, store, led here) of every log copy this node holds, the node's own log
        named by the node id; empty while the stores open (metrics, status)."""
        if self.logs is None:
            return []
        return [
            (log_id or self.node_id, store, led)
            for log_id, (store, led) in self.logs.hosted_logs().items()
        ]

    def served_partitions(self) -> Iterator[tuple[str, Store, str, list[int]]]:
        """(log id, store, topic, partitions) for every partition this node serves: each
        partition once across the cluster, from the node that leads its log."""
        table = None if self.routing.standalone else self.routing.current()
        for log_id, store, led in self.hosted_logs():
            if not led:
                continue
            for cfg in store.list_topics():
                if table is None:
                    yield log_id, store, cfg.name, list(range(cfg.partitions))
                    continue
                route = table.topics.get(cfg.name)
                if route is None:
                    continue
                owners = route.owners[: cfg.partitions]
                yield log_id, store, cfg.name, [p for p, o in enumerate(owners) if o == log_id]

    def lookup_stores(self) -> list[Store]:
        """The stores whose messages this node answers lookups (key, message ID, groups)
        for: every log it leads, a taken-over one included."""
        return self._logs().led_stores()

    def partition_stats(self, topic: str, partitions: int) -> list[tuple[int, int, int]]:
        """(Blocking.) (first offset, next offset, stored bytes) of each partition from the
        copy of its log held here (led or followed); (0, 0, 0) for a partition of a log not
        held here."""
        logs = self._logs()
        by_store: dict[int, list[tuple[int, int, int]]] = {}
        out = []
        for p in range(partitions):
            log_id = self.routing.log_of(topic, p)
            store = logs.hosted_store(log_id)
            if store is None:
                out.append((0, 0, 0))
                continue
            if id(store) not in by_store:
                spans = store.partition_offsets(topic)
                sizes = store.partition_sizes(topic)
                by_store[id(store)] = [(f, n, b) for (f, n), b in zip(spans, sizes, strict=True)]
            out.append(by_store[id(store)][p])
        return out

    # -- appends --------------------------------------------------------------------------
    async def append(
        self,
        topic: str,
        batch: PackedBatch,
        producer_id: str | None,
        sequence: int | None,
        wait_replicas: bool = True,
    ) -> AppendDone:
        """Store a batch whose partitions are set (one log: the first partition's), wait
        for the log's minimum in-sync replicas (a ``sync`` log; not with ``wait_replicas``
        False: Kafka's acks=1), wake long polls."""
        assert batch.partitions is not None
        first = int(batch.partitions[0])
        store = self.writable_store(topic, first)
        future = store.submit_packed(topic, batch, producer_id=producer_id, sequence=sequence)
        result = await asyncio.wrap_future(future)
        copies = await self.replicated(topic, first, store) if wait_replicas else None
        self.events.notify(topic, set(batch.partitions.tolist()))
        return AppendDone(result, copies)

    async def replicated(self, topic: str, partition: int, store: Store) -> int | None:
        """(After a ``sync`` write to ``store``.) Wait until the partition's log's minimum
        in-sync replicas hold it; how many replicas do (None when not replicated)."""
        return await self._logs().copies(self.routing.log_of(topic, partition), store)

    # -- consumer groups ------------------------------------------------------------------
    async def commit_offset(
        self, group: str, topic: str, partition: int, offset: int
    ) -> int | None:
        """Commit a group's offset where the partition is served; a replicated log writes it
        into the log, so its copies hold it across a failover. Returns the copies."""
        store = self.writable_store(topic, partition)
        in_log = self._logs().offsets_in_log and self.routing.log_of(topic, partition) is not None
        await self.in_thread(store.commit_offset, group, topic, partition, offset, in_log)
        return await self.replicated(topic, partition, store)

    async def committed_offsets(self, group: str, topic: str | None) -> dict[str, dict[int, int]]:
        """A group's committed offsets in every log this node leads."""
        out: dict[str, dict[int, int]] = {}
        for store in self.lookup_stores():
            for t, parts in (await self.in_thread(store.committed_offsets, group, topic)).items():
                out.setdefault(t, {}).update(parts)
        return out

    async def delete_offsets(
        self, group: str, topic: str | None = None, partition: int | None = None
    ) -> bool:
        """Forget a group's committed offsets (all, a topic's, or one partition's) in every
        log this node leads, a replicated one through its log; whether any was there."""
        found = False
        in_log = self._logs().offsets_in_log
        one = topic is not None and partition is not None
        stores = [self.leader_store(topic, partition)] if one else self.lookup_stores()  # type: ignore[arg-type]
        for store in stores:
            found |= await self.in_thread(store.delete_offsets, group, topic, partition, in_log)
        return found

    async def consumer_groups(self) -> set[str]:
        groups: set[str] = set()
        for store in self.lookup_stores():
            groups.update(await self.in_thread(store.consumer_groups))
        return groups

    # -- lookups --------------------------------------------------------------------------
    async def get_message(self, msg_id: str) -> Any:
        """The message with this ID in any log this node leads (NotFound otherwise)."""
        for store in self.lookup_stores():
            try:
                return await self.in_thread(store.get_message, msg_id)
            except NotFound:
                pass
        raise NotFound(f"no message with ID {msg_id!r}", msg_id=msg_id)

    # -- topics ---------------------------------------------------------------------------
    async def topic_config(self, topic: str) -> TopicConfig:
        """The topic's config; a topic only in the routing table (or grown there) is
        created in the local stores first."""
        store = self.catalog()
        try:
            cfg = store.get_topic(topic)
        except UnknownTopic:
            self.routing.refresh_if_changed()
            if self.routing.route(topic) is None:
                raise
            await self.in_thread(self.sync_topics)
            return store.get_topic(topic)
        route = self.routing.route(topic)
        if route is not None and route.partitions != cfg.partitions:  # grown elsewhere
            self.routing.refresh_if_changed()
            route = self.routing.route(topic)
            if route is not None and route.partitions > cfg.partitions:
                await self.in_thread(self.sync_topics)
                cfg = store.get_topic(topic)
        return cfg

    def list_topics(self) -> list[TopicConfig]:
        return self.catalog().list_topics()

    async def create_topic(self, cfg: TopicConfig) -> bool:
        """Create a topic in every store held here; True if the node's own log lacked it."""
        created = await self.in_thread(self.catalog().create_topic, cfg)
        for store in self._others():
            await self.in_thread(store.create_topic, cfg)
        return created

    async def delete_topic(self, name: str) -> None:
        """Delete a topic from every store held here (UnknownTopic if the node lacks it)."""
        await self.in_thread(self.catalog().delete_topic, name)
        for store in self._others():
            try:
                await self.in_thread(store.delete_topic, name)
            except UnknownTopic:
                pass

    async def add_partitions(self, name: str, partitions: int) -> TopicConfig:
        """Raise a topic's partition count in every store held here."""
        cfg = await self.in_thread(self.catalog().add_partitions, name, partitions)
        for store in self._others():
            await self.in_thread(store.add_partitions, name, partitions)
        return cfg

    def _others(self) -> list[Store]:
        own = self.catalog()
        return [s for s in self._logs().hosted_stores() if s is not own]

    def sync_topics(self) -> None:
        """(Blocking.) Create, grow and delete the routing table's topics in every store held
        here (a topic changed while this node was away)."""
        if self.logs is None or self.routing.standalone:
            return
        table = self.routing.table
        deleted = frozenset(
            name
            for name, pending in table.pending_deletions().items()
            if self.node_id in pending and name not in table.topics
        )
        for store in self.logs.hosted_stores():
            for name in deleted:  # deleted while this node was away
                try:
                    store.delete_topic(name)
                except UnknownTopic:
                    pass
            local = {t.name: t for t in store.list_topics()}
            for name, route in table.topics.items():
                if name in local and local[name].partitions < route.partitions:
                    try:  # partitions added while this node was away
                        store.add_partitions(name, route.partitions)
                    except MsgStoreError as exc:
                        log.error("cannot add partitions to routed topic %s: %s", name, exc)
                    continue
                try:
                    store.create_topic(routed_topic(route))
                except MsgStoreError as exc:
                    log.error("cannot create routed topic %s: %s", name, exc)
        for name in deleted:
            self.routing.deletion_done(name, frozenset({self.node_id}))

    # -- files and compaction -------------------------------------------------------------
    def file_stores(self, log_id: str | None = None) -> list[Store]:
        """The stores whose files this node lists and compacts: every log it leads, or the
        one named (NotLeader when this node does not lead it)."""
        logs = self._logs()
        if log_id is None:
            return logs.led_stores()
        led = logs.led_logs()
        if log_id not in led:
            logs.leader_store(log_id)  # raises the typed refusal
            raise NotFound(f"log {log_id!r} is not held here")
        return [led[log_id]]

    async def list_files(self, log_id: str | None = None) -> list[FileInfo]:
        out: list[FileInfo] = []
        for store in self.file_stores(log_id):
            out.extend(await self.in_thread(store.list_files))
        return out

    def exchange_store(self, log_id: str | None = None) -> Store:
        """The store of the remote-compaction exchange (seal, sealed files, fetch one, put
        back its rewrite), which names files without their log: the node's own log, or
        the led log named (file names repeat across logs)."""
        if log_id is None:
            return self.catalog()
        return self.file_stores(log_id)[0]

    async def sealed_files(self, log_id: str | None = None) -> list[FileInfo]:
        return await self.in_thread(self.exchange_store(log_id).sealed_files)

    async def seal(self, log_id: str | None = None) -> list[FileInfo]:
        """Seal the active files (of the exchange's log); its sealed files afterwards."""
        self.check_writable()
        store = self.exchange_store(log_id)
        await self.in_thread(store.seal_active)
        return await self.in_thread(store.sealed_files)

    async def compact(self, log_id: str | None = None) -> dict[str, Any]:
        """Seal and compact everything sealed in the led logs; one report for all."""
        self.check_writable()
        reports = [await self.in_thread(store.compact_now) for store in self.file_stores(log_id)]
        return sum_reports(reports)

    def close(self) -> None:
        """(Blocking.) Close every store held here."""
        if self.logs is not None:
            self.logs.close()
