"""The listener's answers are kio's encoding, sent as buffers: a Fetch answer's record
batches are kept by reference (not copied into the answer) and the bytes on the wire are
exactly what kio writes into one buffer."""

from __future__ import annotations

import asyncio
import datetime
import io
import socket

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import response as fetch_v12
from kio.serial import entity_writer

from storage_node.kafka.listener import SEND_PIECE, AnswerParts, encode_response, send
from storage_node.kafka.records import RecordBatches
from storage_node.kafka.registry import make


def fetch_answer(records: list[bytes]) -> object:
    parts = tuple(
        make(
            fetch_v12.PartitionData,
            partition_index=i,
            error_code=ErrorCode.none,
            high_watermark=10,
            last_stable_offset=10,
            log_start_offset=0,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=r,
        )
        for i, r in enumerate(records)
    )
    return make(
        fetch_v12.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(make(fetch_v12.FetchableTopicResponse, topic="t", partitions=parts),),
    )


def kio_bytes(correlation_id: int, response: object) -> bytes:
    header_type = type(response).__header_schema__  # type: ignore[attr-defined]
    buf = io.BytesIO()
    entity_writer(header_type)(buf, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(buf, response)
    body = buf.getvalue()
    return len(body).to_bytes(4, "big") + body


def test_large_records_are_kept_by_reference_and_the_bytes_are_kios() -> None:
    big = bytes(range(256)) * 1024  # 256 KiB: kept by reference
    small = b"\x01" * 100
    response = fetch_answer([big, small, b""])
    parts = encode_response(7, response)
    assert any(p is big for p in parts)
    assert b"".join(parts) == kio_bytes(7, response)


def test_small_answers_are_one_buffer() -> None:
    response = fetch_answer([b"\x02" * 10])
    parts = encode_response(3, response)
    assert len(parts) == 1
    assert bytes(parts[0]) == kio_bytes(3, response)


def test_a_write_of_nothing_leaves_the_size_only() -> None:
    out = AnswerParts()
    assert out.done() == [bytearray(4)]


def test_send_puts_every_byte_on_the_socket_in_order() -> None:
    payload = [bytearray(b"\0\0\0\0head"), bytes(range(256)) * 4096, b"tail"]  # 1 MiB + bits
    assert len(payload[1]) > 3 * SEND_PIECE

    async def run() -> bytes:
        left, right = socket.socketpair()
        reader, right_writer = await asyncio.open_connection(sock=right)
        _, writer = await asyncio.open_connection(sock=left)
        want = sum(map(len, payload))
        got = asyncio.ensure_future(reader.readexactly(want))
        await send(writer, payload)
        data = await got
        writer.close()
        right_writer.close()
        return data

    assert asyncio.run(run()) == b"".join(bytes(p) for p in payload)


def test_a_partitions_several_batches_are_each_kept_by_reference() -> None:
    """A page read from several spans of the log is sent as several record batches
    (``records.RecordBatches``): each is sent by reference, none joined, and the answer's
    bytes are kio's for the same batches joined into one field."""
    first, second = bytearray(b"\x02" * 300), bytearray(b"\x03" * 70_000)
    batches = RecordBatches([first, second])
    assert len(batches) == 70_300 and bytes(batches) == bytes(first) + bytes(second)
    response = fetch_answer([batches, b"\x01" * 10])  # type: ignore[list-item]
    parts = encode_response(3, response)
    assert any(p is first for p in parts) and any(p is second for p in parts)
    joined = fetch_answer([bytes(first) + bytes(second), b"\x01" * 10])
    assert b"".join(parts) == kio_bytes(3, joined)
