"""What the blocking and the asyncio client share: the operations' core built from the
connection options, and its state under the names callers use. Each client adds only its
transport (``_open``) and the way it carries out an operation's steps."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from storage_node.client.core import ClientCore


class ClientBase:
    def __init__(
        self,
        endpoint: str | Iterable[str],
        token: str | None = None,
        timeout: float = 60.0,
        producer_id: str | None = None,
        max_retries: int = 8,
        binary: bool = True,
        listener: str = "auto",
        ca: str | None = None,
    ) -> None:
        # ca: CA bundle (PEM file) that node certificates must verify against; default env
        # MSGSTORE_CA. With one, every address must be https.
        self.core = ClientCore.build(
            endpoint, token, producer_id, max_retries, binary, listener, ca
        )
        self.token = token
        self._open(timeout)

    def _open(self, timeout: float) -> None:
        """Set up this client's transport; ``timeout`` bounds each request (seconds)."""
        raise NotImplementedError

    @property
    def ca(self) -> str | None:
        return self.core.ca

    @property
    def endpoints(self) -> list[str]:
        return self.core.endpoints

    @property
    def routing(self) -> Any:
        return self.core.routing

    @property
    def producer_id(self) -> str:
        return self.core.producer_id
