"""The steps a client operation yields (``Call`` an HTTP request, ``Sleep`` a pause,
``Gather`` several operations at once), the answer of a ``Call`` as its caller gets it, and
how long to wait between attempts. Both clients carry these steps out (client/core.py has
the operations)."""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from storage_node.client.common import error_from_response
from storage_node.errors import MsgStoreError

T = TypeVar("T")


@dataclass
class Call:
    """One HTTP request. ``raw`` answers a ``RawAnswer`` instead of the parsed JSON body."""

    method: str
    address: str
    path: str
    params: Mapping[str, Any] | None = None
    json_body: Any = None
    data: bytes | None = None
    content_type: str | None = None
    headers: Mapping[str, str] | None = None
    raw: bool = False

    def query(self) -> dict[str, str]:
        return {k: str(v) for k, v in (self.params or {}).items() if v is not None}

    def body_and_headers(self) -> tuple[bytes | None, dict[str, str]]:
        headers = dict(self.headers or {})
        body = self.data
        if self.json_body is not None:
            body = json.dumps(self.json_body).encode()
            headers["Content-Type"] = "application/json"
        if self.content_type:
            headers["Content-Type"] = self.content_type
        return body, headers


@dataclass
class Sleep:
    seconds: float


@dataclass
class Gather:
    """Run operations concurrently; the outcome is each one's result or its MsgStoreError."""

    ops: list[Generator[Any, Any, Any]]


Step = Call | Sleep | Gather
Op = Generator[Step, Any, T]


class Headers:
    """Answer headers with case-insensitive lookup."""

    def __init__(self, items: Iterable[tuple[str, str]]) -> None:
        self._items = {k.lower(): v for k, v in items}

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._items.get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return self._items[key.lower()]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._items


@dataclass
class RawAnswer:
    """An answer's status, headers and body bytes, for callers that decode it themselves."""

    status_code: int
    headers: Headers
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


class NotMsgstore(MsgStoreError):
    """The address answered, but not as a msgstore node does (an error without msgstore's
    JSON error body, or a page that is not JSON): a wrong ``--endpoint``. Not retried."""

    code = "not_msgstore"
    status = 502


def _not_msgstore(call: Call, status: int, headers: Headers, body: bytes) -> NotMsgstore:
    kind = (headers.get("Content-Type") or "no content type").split(";")[0]
    return NotMsgstore(
        f"{call.address} is not a msgstore node: {call.method} {call.path} answered "
        f"HTTP {status} with {kind} instead of msgstore's JSON; check --endpoint "
        "(or MSGSTORE_ENDPOINT)",
        address=call.address,
    )


def answer_of(call: Call, status: int, headers: Iterable[tuple[str, str]], body: bytes) -> Any:
    """The outcome of ``call``: the typed error for an error status, else JSON or raw. A
    node's errors are always ``{"error": {...}}``: any other error body below 500 is an
    answer from something else (a proxy's 5xx page stays a retryable error)."""
    answer_headers = Headers(headers)
    if status >= 400:
        try:
            doc: Any = json.loads(body)
        except ValueError:
            doc = body.decode("utf-8", "replace")
        if status < 500 and not (isinstance(doc, dict) and isinstance(doc.get("error"), dict)):
            raise _not_msgstore(call, status, answer_headers, body)
        if not isinstance(doc, dict):  # one line, not a whole HTML page
            doc = " ".join(str(doc).split())[:200]
        raise error_from_response(status, doc)
    if call.raw:
        return RawAnswer(status, answer_headers, body)
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        raise _not_msgstore(call, status, answer_headers, body) from None


@dataclass
class RetryPolicy:
    """Exponential pauses between attempts: 50 ms doubling up to 2 s, ``max_retries`` times."""

    max_retries: int = 8
    first_delay: float = 0.05
    max_delay: float = 2.0
    sweep_max_delay: float = 1.0  # between sweeps over every node

    def delay(self, attempt: int) -> float:
        return min(self.first_delay * 2**attempt, self.max_delay)

    def sweep_delay(self, attempt: int) -> float:
        return min(self.first_delay * 2**attempt, self.sweep_max_delay)
