"""A minimal Kafka wire client for the tests that must send exact bytes (kio entities in,
kio entities out), so a test can send a retried batch, a corrupt CRC or plain garbage."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from aiokafka.record._crecords import DefaultRecordBatchBuilder
from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer


class Wire:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes | None:
        """The next answer frame; None when the node closed the connection."""
        head = self._exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._exact(size)

    def _exact(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            try:
                chunk = self.sock.recv(n - len(data))
            except ConnectionResetError:  # closed with our request unread: a reset, not EOF
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def frame(self, request: Any) -> bytes:
        self.correlation += 1
        header_type = request.__header_schema__
        buf = io.BytesIO()
        entity_writer(header_type)(
            buf,
            header_type(
                request_api_key=request.__api_key__,
                request_api_version=request.__version__,
                correlation_id=self.correlation,
                client_id="wire-test",
            ),
        )
        entity_writer(type(request))(buf, request)
        body = buf.getvalue()
        return struct.pack(">i", len(body)) + body

    def call(self, request: Any) -> Any:
        """Send a request and parse its answer (the answer's correlation id checked)."""
        self.send_raw(self.frame(request))
        data = self.read_frame()
        assert data is not None, "the node closed the connection"
        response_type: Any = load_response_schema(request.__api_key__, request.__version__)
        header, used = entity_reader(response_type.__header_schema__)(data, 0)
        assert header.correlation_id == self.correlation
        response, _ = entity_reader(response_type)(data, used)
        return response


def record_batch(
    records: list[tuple[bytes | None, bytes]],
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    codec: int = 0,
) -> bytearray:
    builder = DefaultRecordBatchBuilder(2, codec, 0, producer_id, epoch, sequence, 2**30)
    for i, (key, value) in enumerate(records):
        builder.append(i, 1_700_000_000_000 + i, key, value, [])
    return builder.build()
