"""Large answers written to the socket from a thread, outside the event loop and the GIL.

A Fetch answer of several megabytes sent through asyncio's transport goes out a piece at a
time, each piece a trip through the event loop, and each trip waits for the GIL while the
node's read pool decodes the connection's next pages (the read-ahead): measured, 9 MB took
10-50 ms to leave, most of a fast consumer's time between two Fetches. Here the buffers go
to the kernel with ``writev`` from a sender thread, which holds no GIL while the kernel
copies or while it waits for the socket to take more (``poll``).

Only for plain TCP connections whose transport holds nothing unsent (TLS writes through its
own transport). The thread writes to a duplicate of the socket's descriptor, so a
connection closed meanwhile can never make it write into another file that took the same
number; it stops within POLL_MS of the send being cancelled (the listener closing).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import select
import threading

DIRECT_SEND_BYTES = 1 << 20  # answers at least this large are sent from a thread
POLL_MS = 200
IOV_MAX = 1024  # buffers per writev (Linux's UIO_MAXIOV)
Buffer = bytes | bytearray | memoryview

_pool = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="msgstore-kafka-send")


def direct_fd(writer: asyncio.StreamWriter) -> int | None:
    """The descriptor to write to directly, or None when the connection must go through
    its transport (TLS, no socket, or bytes still queued in the transport)."""
    if writer.get_extra_info("ssl_object") is not None:
        return None
    sock = writer.get_extra_info("socket")
    if sock is None or writer.transport.get_write_buffer_size():
        return None
    fd = sock.fileno()
    return fd if fd >= 0 else None


async def send_direct(fd: int, parts: list[Buffer]) -> None:
    """Write ``parts`` whole to the socket ``fd`` from a sender thread (ConnectionError when
    the peer is gone); cancelling stops the thread at its next wait."""
    stop = threading.Event()
    dup = os.dup(fd)
    future = asyncio.get_running_loop().run_in_executor(_pool, write_all, dup, parts, stop)
    try:
        await asyncio.shield(future)
    except asyncio.CancelledError:
        stop.set()
        raise
    finally:
        if future.done():
            os.close(dup)
        else:  # the thread closes it once it has stopped
            future.add_done_callback(lambda _: os.close(dup))


def write_all(fd: int, parts: list[Buffer], stop: threading.Event) -> None:
    """(In a sender thread.) ``writev`` until every byte left; wait for room with ``poll``.
    The descriptor is non-blocking (it shares the transport's file description)."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    while views:
        if stop.is_set():
            raise ConnectionAbortedError("the send was cancelled")
        try:
            sent = os.writev(fd, views[:IOV_MAX])
        except (BlockingIOError, InterruptedError):
            poller.poll(POLL_MS)
            continue
        while sent:
            head = views[0]
            if sent >= len(head):
                sent -= len(head)
                views.pop(0)
            else:
                views[0] = head[sent:]
                sent = 0
