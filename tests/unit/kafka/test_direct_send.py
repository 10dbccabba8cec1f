"""Large answers written from a sender thread (kafka/direct_send.py): every byte arrives in
order whatever the socket takes at a time, a peer that goes away is a ConnectionError, a
cancelled send stops its thread, and a transport still holding bytes is not bypassed."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

import pytest

from storage_node.kafka import direct_send
from storage_node.kafka.direct_send import DIRECT_SEND_BYTES, direct_fd, send_direct
from storage_node.kafka.listener import send


def payload() -> list:
    """An answer of many buffers of every kind, about 5 MiB, far more than a socket holds."""
    return [
        bytearray(b"\0\0\0\0head"),
        bytes(range(256)) * 8192,
        memoryview(bytes(range(255, -1, -1)) * 4096)[7:],
        b"",
        bytearray(os.urandom(3 << 20)),
        b"tail",
    ]


async def pair() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.StreamWriter]:
    left, right = socket.socketpair()
    for sock in (left, right):  # small buffers: the sender must wait for room many times
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    reader, right_writer = await asyncio.open_connection(sock=right)
    _, writer = await asyncio.open_connection(sock=left)
    return reader, writer, right_writer


def test_a_large_answer_arrives_whole_and_in_order_from_the_sender_thread() -> None:
    parts = payload()
    want = b"".join(bytes(p) for p in parts)
    assert len(want) >= DIRECT_SEND_BYTES

    async def run() -> tuple[bytes, bool]:
        reader, writer, right_writer = await pair()
        threads = set()
        real = direct_send.write_all

        def spy(*args):  # noqa: ANN002, ANN202 - the sender thread's own signature
            threads.add(threading.current_thread().name)
            return real(*args)

        direct_send.write_all = spy  # type: ignore[assignment]
        try:
            got = asyncio.ensure_future(reader.readexactly(len(want)))
            await send(writer, parts)
            data = await got
        finally:
            direct_send.write_all = real  # type: ignore[assignment]
            writer.close()
            right_writer.close()
        return data, any(n.startswith("msgstore-kafka-send") for n in threads)

    data, threaded = asyncio.run(run())
    assert threaded  # it went through the sender thread, not the transport
    assert data == want


def test_a_peer_that_closes_mid_answer_is_a_connection_error() -> None:
    async def run() -> None:
        reader, writer, right_writer = await pair()
        sending = asyncio.ensure_future(send_direct(direct_fd(writer) or -1, payload()))
        await reader.readexactly(1000)  # reads a little, then goes away
        right_writer.transport.abort()
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(sending, 10)
        writer.close()

    asyncio.run(run())


def test_a_cancelled_send_stops_its_thread() -> None:
    """A peer that never reads: the send waits; cancelling it (the listener closing) ends
    the thread within its poll interval, and the duplicate descriptor is closed."""

    async def run() -> None:
        _reader, writer, right_writer = await pair()
        before = set(os.listdir("/proc/self/fd"))
        task = asyncio.ensure_future(send_direct(direct_fd(writer) or -1, payload()))
        await asyncio.sleep(0.3)
        assert not task.done()  # nobody reads: it waits for room
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadline = time.monotonic() + 5
        while set(os.listdir("/proc/self/fd")) - before and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not set(os.listdir("/proc/self/fd")) - before  # the duplicate is closed
        writer.close()
        right_writer.close()

    asyncio.run(run())


def test_a_transport_holding_unsent_bytes_is_not_bypassed() -> None:
    async def run() -> None:
        _reader, writer, right_writer = await pair()
        assert direct_fd(writer) is not None
        writer.write(b"x" * (4 << 20))  # more than the socket takes: the transport keeps some
        assert writer.transport.get_write_buffer_size() > 0
        assert direct_fd(writer) is None  # those must go first, through the transport
        writer.transport.abort()
        right_writer.close()

    asyncio.run(run())
