"""The Kafka listener: an asyncio server on the node's event loop.

Each connection is read as Kafka frames (a 4-byte big-endian size, then the request). A
connection's requests are answered one at a time, in order, as a Kafka broker does (a long
Fetch holds the ones behind it). What closes a connection, with a warning in the log and no
answer, as Kafka's broker does: a size below 8 bytes or above the node's request limit, an
unknown API key, a version outside the API's range (except ApiVersions, answered with v0 and
UNSUPPORTED_VERSION so the client can pick), a header or body that does not parse, an
exception escaping a handler, or a request the connection may not send (``sasl``: before
SASL authentication on a node with a token, only ApiVersions and the SASL APIs, in frames of
at most 512 KiB as Kafka's ``sasl.server.max.receive.size``; a failed authentication is
answered, then closed; a user removed, or whose token changed, since the connection
authenticated; an API without an entry in the ACL table, ``acl.NEEDS``, from anyone but the
super-user). Each request gets the ACL checks of its API (``acl.Guard``) with the
connection's principal; its handler answers a refusal with the API's authorization error.
With TLS on, the listener speaks TLS with the node's reloading certificate context, the one
the HTTP API uses. Bytes left after a request that parsed are
ignored, as Kafka's broker ignores them. Nothing a request carries is stored
before its whole body has parsed and every batch in it passed its checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
import time
from typing import Any

from kio.serial import entity_reader, entity_writer

from storage_node.kafka.acl import Guard
from storage_node.kafka.apis import HANDLER_MODULES
from storage_node.kafka.direct_send import DIRECT_SEND_BYTES, direct_fd, send_direct
from storage_node.kafka.node import KafkaNode
from storage_node.kafka.records import RecordBatches
from storage_node.kafka.registry import ApiTable, ConnectionState, RequestContext
from storage_node.kafka.sasl import PRE_AUTH_MAX_BYTES, Session, authenticate, certificate_login
from storage_node.tls import peer_subject

log = logging.getLogger("msgstore.kafka")

API_VERSIONS_KEY = 18
# the APIs timed in the node's produce and fetch histograms (protocol "kafka"), beside the
# HTTP routes that do the same (server/middleware.py), from the parsed request to the answer
OPERATION_OF_API = {0: "produce", 1: "fetch"}
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
# An answer goes to the transport this many bytes at a time, each piece sent once the one
# before it has left: asyncio's transport (3.11) keeps what a send did not take in a
# bytearray and moves its rest down after every send, so a 6 MB Fetch answer written whole
# costs a memmove of megabytes per send.
SEND_PIECE = 256 * 1024
Buffer = bytes | bytearray | memoryview


class BadRequest(Exception):
    """The bytes are not a request this listener can answer: the connection is closed."""


def build_table() -> ApiTable:
    table = ApiTable()
    for module in HANDLER_MODULES:
        module.register(table)
    return table


class KafkaListener:
    """Serves the Kafka protocol for one node until ``close``."""

    def __init__(
        self, node: KafkaNode, table: ApiTable | None = None, listener: str = "internal"
    ) -> None:
        self.node = node
        self.table = table or build_table()
        # "external": Metadata, FindCoordinator and DescribeCluster name every node's external
        # address (clients outside the cluster reach only those)
        self.listener = listener
        self.max_request_bytes = node.max_request_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        self._server = await asyncio.start_server(
            self._serve, host, port, reuse_address=True, ssl=tls
        )

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop accepting, end every connection (requests in flight are cancelled)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        authorizer = self.node.runtime.authorizer
        session = Session(required=authorizer.required)
        certificate_login(session, authorizer, peer_subject(writer.get_extra_info("ssl_object")))
        connection = ConnectionState()
        try:
            while True:
                try:
                    head = await reader.readexactly(4)
                except asyncio.IncompleteReadError:
                    return  # the client closed the connection between requests
                (size,) = _SIZE.unpack(head)
                limit = self.max_request_bytes
                if not session.authenticated:
                    limit = min(limit, PRE_AUTH_MAX_BYTES)
                if not 8 <= size <= limit:
                    raise BadRequest(f"a request of {size} bytes (8..{limit} allowed)")
                try:
                    frame = await reader.readexactly(size)
                except asyncio.IncompleteReadError as exc:
                    raise BadRequest(
                        f"the connection closed {len(exc.partial)} bytes into a {size}-byte request"
                    ) from None
                if session.raw_next:  # the bare SASL token after SaslHandshake v0
                    session.raw_next = False
                    failure = authenticate(session, authorizer, frame)
                    if failure is not None:
                        raise BadRequest(f"SASL authentication failed: {failure}")
                    answer: list[Buffer] | None = [_SIZE.pack(0)]
                else:
                    answer = await self._answer(frame, peer, session, connection)
                if answer is not None:
                    await send(writer, answer)
                if session.close_reason is not None:
                    raise BadRequest(session.close_reason)
        except BadRequest as exc:
            log.warning("kafka: closing the connection from %s: %s", peer, exc)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # noqa: BLE001 - one connection's failure never stops the listener
            log.exception("kafka: closing the connection from %s after an error", peer)
        finally:
            connection.close()
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(
        self, frame: bytes, peer: Any, session: Session, connection: ConnectionState
    ) -> list[Buffer] | None:
        """The framed answer to one request (None: the request gets no answer)."""
        api_key, version, correlation_id = _HEAD.unpack_from(frame)
        api = self.table.get(api_key)
        if api is None:
            raise BadRequest(f"unknown API key {api_key} (correlation id {correlation_id})")
        authorizer = self.node.runtime.authorizer
        refusal = session.refusal(api_key, api.name, authorizer)
        if refusal is not None:
            raise BadRequest(refusal)
        if not api.min_version <= version <= api.max_version:
            if api_key == API_VERSIONS_KEY:
                return self._unsupported_api_versions(correlation_id)
            raise BadRequest(
                f"{api.name} v{version} is not supported (v{api.min_version}..v{api.max_version})"
            )
        request_type = self.table.request_type(api_key, version)
        header_type: Any = request_type.__header_schema__  # type: ignore[attr-defined]
        try:
            header, used = entity_reader(header_type)(frame, 0)
            request: Any
            request, body_used = entity_reader(request_type)(frame, used)
        except Exception as exc:  # noqa: BLE001 - whatever the parser raises for bad bytes
            raise BadRequest(f"{api.name} v{version} does not parse: {exc}") from None
        if used + body_used < len(frame):  # Kafka's broker ignores them too (librdkafka
            # 2.16 sends 3 more bytes after a Metadata v12 body)
            log.debug(
                "kafka: %s v%d: %d bytes after the request",
                api.name,
                version,
                len(frame) - used - body_used,
            )
        module = self.table.response_module(api_key, version)
        ctx = RequestContext(api_key, version, correlation_id, header.client_id, self.node, module)
        ctx.client_host = f"/{peer[0]}" if isinstance(peer, tuple) else ""
        ctx.session = session
        ctx.connection = connection
        source = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""
        ctx.guard = Guard(authorizer, session.principal, api_key, source)
        ctx.listener = self.listener
        started = time.perf_counter()
        try:
            response = await api.handler(ctx, request)
            return None if response is None else encode_response(correlation_id, response)
        finally:
            operation, observe = OPERATION_OF_API.get(api_key), self.node.runtime.observe_operation
            if operation is not None and observe is not None:
                observe(operation, "kafka", time.perf_counter() - started)

    def _unsupported_api_versions(self, correlation_id: int) -> list[Buffer]:
        """ApiVersions v0 with UNSUPPORTED_VERSION and the versions we have (KIP-511)."""
        from storage_node.kafka.api_versions import unsupported_answer

        return encode_response(correlation_id, unsupported_answer(self.table))


class AnswerParts:
    """What kio's writer writes, as a list of buffers: small fields are joined, a large
    value (a Fetch answer's record batches) is kept by reference, not copied."""

    BIG = 64 * 1024

    def __init__(self) -> None:
        self.parts: list[Buffer] = []
        self._small = bytearray(4)  # the size, filled in by ``done``
        self.size = 0

    def write(self, data: Buffer | RecordBatches) -> int:
        n = len(data)
        if isinstance(data, RecordBatches):  # a Fetch answer's batches, each by reference
            self.parts.append(self._small)
            self.parts.extend(data.batches)
            self._small = bytearray()
        elif n >= self.BIG:
            self.parts.append(self._small)
            self.parts.append(data)
            self._small = bytearray()
        else:
            self._small += data
        self.size += n
        return n

    def done(self) -> list[Buffer]:
        parts = [*self.parts, self._small] if self._small else self.parts
        _SIZE.pack_into(parts[0], 0, self.size)  # parts[0] is the first bytearray
        return parts


def encode_response(correlation_id: int, response: Any) -> list[Buffer]:
    """Size, response header (its version from the response's schema), body: the buffers
    to send, in order."""
    header_type: Any = type(response).__header_schema__
    parts = AnswerParts()
    out: Any = parts  # kio writes to anything with ``write``
    entity_writer(header_type)(out, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(out, response)
    return parts.done()


async def send(writer: asyncio.StreamWriter, parts: list[Buffer]) -> None:
    """Write an answer's buffers: a large one on a plain TCP connection from a sender thread
    (``direct_send``), others SEND_PIECE bytes at a time, each after the transport has sent
    all but its low-water mark of the ones before (``drain``)."""
    if sum(len(p) for p in parts) >= DIRECT_SEND_BYTES:
        fd = direct_fd(writer)
        if fd is not None:
            await send_direct(fd, parts)
            return
    for part in parts:
        view = memoryview(part)
        for at in range(0, len(view), SEND_PIECE):
            writer.write(view[at : at + SEND_PIECE])
            await writer.drain()
