"""Ports for local servers come from below the kernel's ephemeral range, so no outgoing
connection can take one between the check and the server's bind."""

from __future__ import annotations

import socket

from storage_node.cli.ports import ephemeral_low as _ephemeral_low
from storage_node.cli.ports import free_port


def test_ports_are_free_below_the_ephemeral_range_and_not_taken() -> None:
    low = _ephemeral_low()
    taken: set[int] = set()
    for _ in range(50):
        port = free_port("127.0.0.1", taken)
        assert port not in taken
        if low > 11000:
            assert 10000 <= port < low
        with socket.socket() as s:  # free: a server can bind it
            s.bind(("127.0.0.1", port))
        taken.add(port)


def test_a_port_in_use_is_not_handed_out(monkeypatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        used = held.getsockname()[1]
        draws = iter([used, used, used + 1])  # the port in use comes up first
        monkeypatch.setattr("storage_node.cli.ports.random.randrange", lambda *_: next(draws))
        assert free_port("127.0.0.1") == used + 1
