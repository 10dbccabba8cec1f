"""The node's moving parts in one place: the store, routing, thread pool, peers, state.

Route handlers reach everything through one NodeRuntime stored on the aiohttp app, which
keeps handlers thin and lets tests build an app around any store.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import aiohttp

from storage_node.errors import DiskFull, MsgStoreError, Unavailable, UnknownTopic
from storage_node.formats.partitioning import RoundRobin
from storage_node.replication.replicas import LogHost, routed_topic, topic_configs
from storage_node.server.routing_state import RoutingState
from storage_node.server.settings import NodeSettings
from storage_node.tls import client_context

log = logging.getLogger(__name__)
T = TypeVar("T")


class NodeRuntime:
    """State shared by all requests of one node process."""

    def __init__(self, settings: NodeSettings, store: Any = None) -> None:
        self.settings = settings
        self._store = store
        self.draining = False
        self.startup_error: str | None = None
        self.executor = ThreadPoolExecutor(
            max_workers=max(1, settings.read_threads), thread_name_prefix="msgstore-read"
        )
        self.routing = RoutingState(
            settings.node_id, settings.address, settings.routing_file or None, self._local_topics
        )
        self._free_checked_at = 0.0
        self._free_bytes: int | None = None
        self.round_robin = RoundRobin()  # partitions of messages without key
        self.peer_session: aiohttp.ClientSession | None = None
        self._appended: dict[tuple[str, int], asyncio.Event] = {}
        self.replicas: LogHost | None = None  # replicated logs (routing table with "logs")

    @property
    def store(self) -> Any:
        """The node's store; with replicated logs, the store of its own log (opened again
        after a truncation, so always asked for anew)."""
        if self.replicas is not None:
            return self.replicas.home_store()
        return self._store

    @store.setter
    def store(self, value: Any) -> None:
        self._store = value

    # -- long polls -------------------------------------------------------------------
    def append_event(self, topic: str, partition: int) -> asyncio.Event:
        """An event set at the next append to the partition (take it before reading)."""
        key = (topic, partition)
        event = self._appended.get(key)
        if event is None:
            event = self._appended[key] = asyncio.Event()
        return event

    def notify_appended(self, topic: str, partitions: Any) -> None:
        """Wake the reads waiting on these partitions (called once a batch is stored)."""
        for p in set(int(p) for p in partitions):
            event = self._appended.pop((topic, p), None)
            if event is not None:
                event.set()

    # -- store access -------------------------------------------------------------------
    def _local_topics(self) -> dict[str, dict[str, Any]]:
        store = self.store
        return {} if store is None else topic_configs(store)

    def require_store(self) -> Any:
        """The open store, or 503 while recovering/closing."""
        if self.store is None:
            reason = self.startup_error or "the node is still recovering its store"
            raise Unavailable(reason, retry_after_s=1)
        return self.store

    def store_for(self, topic: str, partition: int) -> Any:
        """The store holding a partition: the node's store, or the replicated log's (which
        this node must lead: 421 / 409 otherwise)."""
        log_id = self.routing.log_of(topic, partition) if self.replicas is not None else None
        if log_id is None:
            return self.require_store()
        return self.replicas.led(log_id).store  # type: ignore[union-attr]

    def served_offsets(self, topic: str, partitions: int) -> list[tuple[int, int]]:
        """(first, next offset) of each partition as this node serves it: from the store of
        a replicated log the routing table says it leads (one taken over from another node
        included; 503 while it is still taking it over), else from its own store."""
        own = self.require_store()
        table = self.routing.current()
        offsets: dict[int, list[tuple[int, int]]] = {}
        out = []
        for p in range(partitions):
            store = own
            log_id = self.routing.log_of(topic, p) if self.replicas is not None else None
            if log_id is not None and table.leader_of(log_id) == self.settings.node_id:
                store = self.store_for(topic, p)
            if id(store) not in offsets:
                offsets[id(store)] = store.partition_offsets(topic)
            out.append(offsets[id(store)][p])
        return out

    def read_stores(self) -> list[Any]:
        """The stores whose messages this node answers lookups for (the logs it leads)."""
        if self.replicas is not None:
            return self.replicas.led_stores()
        return [self.require_store()]

    async def replicated(self, topic: str, partition: int, store: Any) -> int | None:
        """(After a ``sync`` append to ``store``.) Wait until the log's minimum in-sync
        replicas hold it; returns how many replicas do (None when not replicated)."""
        log_id = self.routing.log_of(topic, partition) if self.replicas is not None else None
        if log_id is None:
            return None
        hosted = self.replicas.led(log_id)  # type: ignore[union-attr]
        tracker = hosted.tracker
        assert tracker is not None
        position = store.log.durable_end if store.log.sync_mode else store.log.end
        if not store.log.sync_mode:
            return tracker.copies(position)
        copies = await tracker.wait_copies(
            position,
            store.log.durable_end,
            self.replicas.ack_timeout_s,  # type: ignore[union-attr]
        )
        self.replicas.led(log_id)  # type: ignore[union-attr]  # not replaced meanwhile
        return copies

    def require_writable(self) -> Any:
        store = self.require_store()
        if self.draining:
            raise Unavailable("the node is draining and accepts no writes", retry_after_s=1)
        self.check_free_space()
        return store

    def check_free_space(self) -> None:
        """507 when the data disk has less than min_free_bytes left (checked once a second)."""
        limit = self.settings.min_free_bytes
        if limit <= 0:
            return
        now = time.monotonic()
        if self._free_bytes is None or now - self._free_checked_at > 1.0:
            self._free_bytes = shutil.disk_usage(self.settings.data_dir).free
            self._free_checked_at = now
        if self._free_bytes < limit:
            raise DiskFull(
                f"only {self._free_bytes} bytes free on the data disk, "
                f"{limit} must stay free (MSGSTORE_MIN_FREE_BYTES)",
                free_bytes=self._free_bytes,
            )

    async def in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking store work in the read pool so the event loop never waits on disk."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))

    # -- routing and peers --------------------------------------------------------------
    def sync_topics_from_routing(self) -> None:
        """Create every topic of the routing table in the local store (blocking)."""
        if self.store is None or self.routing.standalone:
            return
        table = self.routing.table
        deleted = frozenset(
            name
            for name, pending in table.pending_deletions().items()
            if self.settings.node_id in pending and name not in table.topics
        )
        # every store this node holds: its own, or with replicated logs each log's copy
        stores = self.replicas.all_stores() if self.replicas is not None else [self.store]
        for store in stores:
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
            self.routing.deletion_done(name, frozenset({self.settings.node_id}))

    async def peer_get(self, address: str, path: str, params: dict[str, str]) -> Any:
        """GET a JSON document from another node (same token); None for a 404.

        Raises Unavailable when the peer cannot answer, so callers can report it."""
        return await self.peer_call("GET", address, path, params)

    async def peer_call(
        self,
        method: str,
        address: str,
        path: str,
        params: dict[str, str],
        json_body: Any = None,
    ) -> Any:
        """``peer_get`` with any method and an optional JSON body; a peer's typed error
        other than 404 comes back as Unavailable naming its answer."""
        if self.peer_session is None:
            # Peers are verified against the cluster's CA (https addresses only).
            ssl_ctx = client_context(self.settings.tls_ca or None)
            self.peer_session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.settings.peer_timeout_s),
                connector=aiohttp.TCPConnector(ssl=ssl_ctx),
            )
        headers = {}
        if self.settings.tls_cert and self.settings.token and not address.startswith("https://"):
            # A node that serves HTTPS never sends its token over plain HTTP.
            raise Unavailable(f"node {address} is not an https address; the token stays here")
        if self.settings.token:
            headers["Authorization"] = f"Bearer {self.settings.token}"
        try:
            async with self.peer_session.request(
                method, address + path, params=params, headers=headers, json=json_body
            ) as resp:
                if resp.status == 404:
                    return None
                if resp.status != 200:
                    try:
                        reason = (await resp.json())["error"]["message"]
                    except (ValueError, KeyError, TypeError, aiohttp.ContentTypeError):
                        reason = ""
                    raise Unavailable(
                        f"node {address} answered {resp.status} for {method} {path}"
                        + (f": {reason}" if reason else "")
                    )
                return await resp.json()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise Unavailable(f"node {address} is unreachable: {exc}") from None

    async def close(self) -> None:
        if self.peer_session is not None:
            await self.peer_session.close()
        self.executor.shutdown(wait=True)
