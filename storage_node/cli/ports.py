"""Free loopback ports for servers started a moment later (local clusters, tests)."""

from __future__ import annotations

import random
import socket
from collections.abc import Collection

LOWEST_PORT = 10000


def free_port(host: str = "127.0.0.1", taken: Collection[int] = ()) -> int:
    """A port free on ``host`` now, for a server started a moment later (not in ``taken``).

    It is chosen at random below the kernel's ephemeral range: a port from that range (the
    one ``bind(0)`` picks from) can be taken by any outgoing connection between this check
    and the server's own bind, as seen in a test run; one below it only by another
    listener.
    """
    low = ephemeral_low()
    for _ in range(500 if low - LOWEST_PORT > 1000 else 0):
        port = random.randrange(LOWEST_PORT, low)
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # no room below the range
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def ephemeral_low() -> int:
    """First port of the kernel's ephemeral range (Linux; 32768 elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
