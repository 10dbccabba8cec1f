"""What one console process holds: its settings, the live sessions, the metrics history,
and the one client of its own (the console's token) that reads the routing table and the
nodes' metrics in the background. Users' pages never go through that client."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from storage_node.client import AsyncClient
from storage_node.console.history import History
from storage_node.console.sessions import Sessions
from storage_node.console.settings import ConsoleSettings
from storage_node.errors import MsgStoreError

OPEN_CHECK_SECONDS = 10.0  # how long "the cluster needs no token" is believed


@dataclass
class ConsoleRuntime:
    settings: ConsoleSettings
    sessions: Sessions = field(default_factory=Sessions)
    history: History = field(default_factory=History)
    _open: tuple[float, bool] = (0.0, False)
    _service: AsyncClient | None = None
    _anonymous: AsyncClient | None = None

    def client(self, token: str | None) -> AsyncClient:
        """A client of the cluster sending ``token``: few retries and a short timeout, so a
        page says a node is down instead of waiting for it."""
        s = self.settings
        return AsyncClient(
            list(s.endpoints), token=token, timeout=s.timeout, max_retries=2, ca=s.ca
        )

    @property
    def service(self) -> AsyncClient:
        """The console's own client (its ``--token``): the routing table and metrics only."""
        if self._service is None:
            self._service = self.client(self.settings.token)
        return self._service

    @property
    def anonymous(self) -> AsyncClient:
        """The client every session of an open cluster shares (it sends no token)."""
        if self._anonymous is None:
            self._anonymous = self.client(None)
        return self._anonymous

    async def token_status(self, token: str | None) -> int:
        """What the cluster answers to ``token`` asking for the routing table: 200 (or 403:
        known, but not allowed that) for a token it accepts, 401 otherwise. Raises when no
        node answers."""
        client = self.client(token)
        try:
            await client.refresh_routing()
            return 200
        except MsgStoreError as exc:
            if exc.status in (401, 403):
                return exc.status
            raise
        finally:
            await client.close()

    async def cluster_is_open(self) -> bool:
        """Whether the cluster answers without any token (its nodes have none): then so does
        the console, as the API does."""
        checked, is_open = self._open
        if time.monotonic() - checked < OPEN_CHECK_SECONDS:
            return is_open
        try:
            is_open = await self.token_status(None) == 200
        except MsgStoreError:
            is_open = False
        self._open = (time.monotonic(), is_open)
        return is_open

    async def close(self) -> None:
        await self.sessions.close_all()
        for client in (self._service, self._anonymous):
            if client is not None:
                await client.close()


RUNTIME = web.AppKey("console_runtime", ConsoleRuntime)


def runtime_of(request: web.Request) -> ConsoleRuntime:
    return request.app[RUNTIME]


async def each_node(client: AsyncClient, path: str) -> dict[str, Any]:
    """``path`` asked of every node of the routing table at once: {node id: its JSON
    answer, or the MsgStoreError it failed with}."""
    doc = await client.refresh_routing()
    # the address of the listener the client uses (internal, or a node's external one)
    addresses = {
        n["id"]: client.routing.address_of(n["id"]) or n["address"] for n in doc.get("nodes", [])
    }

    async def one(address: str) -> Any:
        try:
            return await client.request("GET", address, path)
        except MsgStoreError as exc:
            return exc

    answers = await asyncio.gather(*(one(a) for a in addresses.values()))
    return dict(zip(addresses, answers, strict=True))
