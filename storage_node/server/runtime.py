"""The node's moving parts in one place: the store, routing, thread pool, peers, state.

Route handlers reach everything through one NodeRuntime stored on the aiohttp app, which
keeps handlers thin and lets tests build an app around any store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import aiohttp

from storage_node.access.access_file import AccessFile
from storage_node.access.authorizer import Authorizer
from storage_node.errors import Unavailable
from storage_node.formats.partitioning import RoundRobin
from storage_node.mtls import PeerCheck, PeerIdentity
from storage_node.partitions import PartitionService, SingleLog
from storage_node.partitions.write_gate import WriteGate
from storage_node.replication.replicas import LogHost, topic_configs
from storage_node.server.routing_state import RoutingState
from storage_node.server.settings import NodeSettings
from storage_node.store import Store
from storage_node.tls import ReloadingServerContext, client_context

log = logging.getLogger(__name__)
T = TypeVar("T")


class NodeRuntime:
    """State shared by all requests of one node process. Which store serves a request is
    the partition service's answer (``self.partitions``), never the runtime's."""

    def __init__(self, settings: NodeSettings, store: Store | None = None) -> None:
        self.settings = settings
        self.executor = ThreadPoolExecutor(
            max_workers=max(1, settings.read_threads), thread_name_prefix="msgstore-read"
        )
        self.routing = RoutingState(
            settings.node_id, settings.address, settings.routing_file or None, self._local_topics
        )
        self.partitions = PartitionService(
            settings.node_id,
            self.routing,
            WriteGate(settings.data_dir, settings.min_free_bytes),
            self.executor,
        )
        if store is not None:
            self.partitions.attach(SingleLog(store))
        self.round_robin = RoundRobin()  # partitions of messages without key
        self.peer_session: aiohttp.ClientSession | None = None
        self.replicas: LogHost | None = None  # replicated logs (routing table with "logs")
        # TLS: the served certificate and trusted CAs (set by serve), the certificate peer
        # calls present, and the check of peers' certificates (storage_node/mtls.py)
        self.server_tls: ReloadingServerContext | None = None
        self.peer_identity: PeerIdentity | None = None
        if settings.tls_cert or settings.tls_ca:
            self.peer_identity = PeerIdentity(settings.tls_ca, settings.tls_cert, settings.tls_key)
        self.peer_check = PeerCheck()
        # a produce or fetch request of a protocol front end took so many seconds: the
        # node's metrics (NodeMetrics.observe) once its HTTP app is built
        self.observe_operation: Callable[[str, str, float], None] | None = None
        # who a credential is and what it may do: the one check of every front end
        self.authorizer = Authorizer(
            settings.token,
            settings.read_token,
            AccessFile(settings.access_file) if settings.access_file else None,
        )

    @property
    def store(self) -> Store | None:
        """The store of the node's own log (readiness, metrics); None while opening."""
        return self.partitions.own_store()

    @property
    def draining(self) -> bool:
        return self.partitions.gate.draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self.partitions.gate.draining = value

    @property
    def startup_error(self) -> str | None:
        return self.partitions.startup_error

    @startup_error.setter
    def startup_error(self, value: str | None) -> None:
        self.partitions.startup_error = value

    def _local_topics(self) -> dict[str, dict[str, Any]]:
        store = self.store
        return {} if store is None else topic_configs(store)

    async def in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking store work in the read pool so the event loop never waits on disk."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))

    # -- routing and peers --------------------------------------------------------------
    def sync_topics_from_routing(self) -> None:
        """Create every topic of the routing table in the local stores (blocking)."""
        self.partitions.sync_topics()

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
            # the node's certificate (mTLS) and the trusted CAs, as the files are now
            ssl: Any = self.peer_identity.context() if self.peer_identity is not None else True
            async with self.peer_session.request(
                method, address + path, params=params, headers=headers, json=json_body, ssl=ssl
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
