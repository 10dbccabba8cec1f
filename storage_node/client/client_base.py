"""What the blocking and the asyncio client share: the operations' core built from the
connection options, and its state under the names callers use. Each client adds only its
transport (``_open``) and the way it carries out an operation's steps."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from storage_node.client.consumer_state import ConsumerState
from storage_node.client.core import ClientCore

C = TypeVar("C")  # the client's consumer: ``Consumer`` or ``AsyncConsumer``


class ClientBase(Generic[C], ABC):
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

    @abstractmethod
    def _open(self, timeout: float) -> None:
        """Set up this client's transport; ``timeout`` bounds each request (seconds)."""

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

    @property
    def sequences(self) -> Any:
        return self.core.sequences

    @property
    def max_retries(self) -> int:
        return self.core.retry.max_retries

    @max_retries.setter
    def max_retries(self, value: int) -> None:
        self.core.retry.max_retries = value

    @property
    def binary(self) -> bool:
        return self.core.binary

    def consumer(
        self,
        topic: str,
        partitions: Iterable[int] | None = None,
        offsets: dict[int, int] | None = None,
        page: int = 10_000,
        follow: bool = False,
        wait_ms: int = 1000,
        prefetch: bool = True,
        ends: dict[int, int] | None = None,
        tag: str | None = None,
        max_bytes: int = 8 * 1024 * 1024,
    ) -> C:
        """An iterator of pages (``ReadColumns``; ``.batches()`` gives Arrow record batches,
        ``.messages()`` dicts) over the topic's partitions from ``offsets`` (default: the
        start) to ``ends`` (default: the ends when it starts; a page may run past them), the
        next fetch on the wire while the caller works on this page; ``follow`` keeps waiting
        for new messages (long polls of ``wait_ms``). ``page`` and ``max_bytes`` bound each
        partition's page. The blocking client's is a ``Consumer`` (``for``), the asyncio
        client's an ``AsyncConsumer`` (``async for``); both run one ``ConsumerState``."""
        state = ConsumerState(
            topic, partitions, offsets, ends, page, follow, wait_ms, tag, max_bytes
        )
        return self._consumer(state, prefetch)

    @abstractmethod
    def _consumer(self, state: ConsumerState, prefetch: bool) -> C:
        """This client's consumer over ``state``."""
