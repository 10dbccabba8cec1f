"""External addresses in the routing table (Kubernetes NodePorts, like Kafka's external
listener): a client given one of them as its endpoint reaches every node through them.

Each node's "external" address here is a real TCP forwarder on its own loopback port, so the
test sees which path every connection took.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from storage_node.cli.local import free_port
from storage_node.client import Client
from storage_node.errors import InvalidArgument
from storage_node.server.routing_state import read_routing_file, write_routing_file
from storage_node.wire.routing_table import parse_routing


class Forwarder:
    """Accepts on its own port and pipes each connection to `target`; counts connections."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.connections = 0
        self.server = socket.create_server(("127.0.0.1", self.port))
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed = True
        self.server.close()


@pytest.fixture
def external(cluster) -> Iterator[list[Forwarder]]:
    """The cluster's routing table with an external address per node, served by every node."""
    table = read_routing_file(cluster.routing_file)
    forwarders = [Forwarder(int(n.address.rsplit(":", 1)[1])) for n in table.nodes]
    nodes = tuple(
        dataclasses.replace(n, external_address=f"http://127.0.0.1:{f.port}")
        for n, f in zip(table.nodes, forwarders, strict=True)
    )
    new = dataclasses.replace(table, generation=table.generation + 1, nodes=nodes)
    write_routing_file(cluster.routing_file, new)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        docs = [requests.get(a + "/v1/cluster").json() for a in cluster.addresses]
        if all(d["generation"] == new.generation for d in docs):
            break
        time.sleep(0.1)
    yield forwarders
    for f in forwarders:
        f.close()
    current = read_routing_file(cluster.routing_file)  # with the topics added meanwhile
    plain = tuple(dataclasses.replace(n, external_address=None) for n in current.nodes)
    write_routing_file(
        cluster.routing_file,
        dataclasses.replace(current, nodes=plain, generation=current.generation + 1),
    )


def test_a_client_given_an_external_address_uses_every_nodes_external_address(cluster, external):
    topic = "external-listener"
    Client(cluster.addresses[0]).create_topic(topic, partitions=6)
    before = [f.connections for f in external]
    client = Client(f"http://127.0.0.1:{external[0].port}")
    results = client.produce(topic, [{"key": f"k{i}", "value": f"v{i}"} for i in range(300)])
    assert {r["partition"] for r in results} == set(range(6))
    assert client.routing.listener_in_use() == "external"
    got = sorted(m["value"] for p in range(6) for m in client.read_all(topic, p))
    assert got == sorted(f"v{i}" for i in range(300))
    # Every node was reached through its own forwarder (each owns some partitions).
    assert all(f.connections > b for f, b in zip(external, before, strict=True))
    # So are calls to every node, such as the admin file listing (a fresh client: no
    # connection to reuse).
    before = [f.connections for f in external]
    admin = Client(f"http://127.0.0.1:{external[0].port}")
    assert sorted(admin.files()) == sorted(n.id for n in client.routing.table.nodes)
    assert all(f.connections > b for f, b in zip(external, before, strict=True))
    admin.close()
    client.close()


def test_a_client_given_an_internal_address_never_uses_the_external_ones(cluster, external):
    topic = "internal-listener"
    client = Client(cluster.addresses[1])
    client.create_topic(topic, partitions=3)
    before = [f.connections for f in external]
    client.produce(topic, [f"m{i}" for i in range(60)])
    assert client.routing.listener_in_use() == "internal"
    assert [f.connections for f in external] == before
    forced = Client(cluster.addresses[1], listener="external")
    forced.produce(topic, [f"n{i}" for i in range(60)])
    assert sum(f.connections for f in external) > sum(before)
    client.close()
    forced.close()


def test_a_bad_listener_or_external_address_is_refused():
    with pytest.raises(InvalidArgument, match="listener must be one of"):
        Client("http://127.0.0.1:1", listener="outside")
    doc = {
        "format": 1,
        "generation": 1,
        "nodes": [{"id": "n0", "address": "http://a:1", "external_address": "ftp://x"}],
        "topics": {},
    }
    with pytest.raises(InvalidArgument, match="'external_address' must be an http"):
        parse_routing(doc)
    doc["nodes"][0]["external_address"] = "http://127.0.0.1:30081/"
    table = parse_routing(doc)
    assert table.nodes[0].external_address == "http://127.0.0.1:30081"
    assert table.to_json()["nodes"][0]["external_address"] == "http://127.0.0.1:30081"
