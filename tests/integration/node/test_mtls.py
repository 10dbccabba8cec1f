"""mTLS between nodes on a local replicated TLS cluster (real node processes and the
failover controller on loopback): the routes only peers call (log shipping, fencing, the
routing hand-over) refuse a process without a node certificate of the store's CA, and a
certificate of another CA fails the handshake on every route; a CA rotation under two
producers restarts nothing and loses no acknowledged message."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from pathlib import Path

import pytest
import requests

from storage_node import tls
from storage_node.cli.local import LocalCluster
from storage_node.cli.local_ca_rotation import rotate_ca
from storage_node.client import Client

TOKEN = "mtls-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ENV = {
    "MSGSTORE_TOKEN": TOKEN,
    "MSGSTORE_LIFECYCLE_INTERVAL_S": "0",
    "MSGSTORE_TLS_RELOAD_S": "0.2",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("mtls") / "c")
    c.up(nodes=3, env=ENV, tls=True, replication_factor=3)
    try:
        with Client(c.addresses, token=TOKEN, ca=c.ca_file) as client:
            client.create_topic("m", partitions=3)
            client.produce("m", [{"key": f"k{i}", "value": str(i)} for i in range(30)])
        yield c
    finally:
        c.down()


def pair_files(directory: Path, stem: str, pair: tls.CertKey) -> tuple[str, str]:
    cert, key = tls.write_pair(directory, stem, pair)
    return str(cert), str(key)


def status(c: LocalCluster, address: str) -> dict:
    resp = requests.get(address + "/v1/replication/status", headers=AUTH, verify=c.ca_file)
    assert resp.status_code == 200, resp.text
    return resp.json()


def peer_calls(c: LocalCluster, address: str, node_id: str) -> list[tuple[str, str, dict]]:
    """(method, url, keyword arguments) of every peer-only route, aimed at ``node_id``'s log
    on the node at ``address``: a fetch by an intruder, its epoch end, a fence with a newer
    epoch, a routing table with a newer generation."""
    doc = status(c, address)
    epoch = doc["logs"][node_id]["epoch"]
    table = requests.get(address + "/v1/cluster", headers=AUTH, verify=c.ca_file).json()
    newer = {**table, "generation": table["generation"] + 100}
    log_url = f"{address}/v1/replication/logs/{node_id}"
    fetch = {"position": 0, "epoch": epoch, "follower": "intruder"}
    return [
        ("GET", f"{log_url}/fetch", {"params": fetch}),
        ("GET", f"{log_url}/epoch-end", {"params": {"epoch": epoch, "of": epoch}}),
        ("POST", f"{log_url}/fence", {"params": {"epoch": epoch + 50}}),
        ("PUT", f"{address}/v1/replication/routing", {"json": newer}),
    ]


def fingerprint(c: LocalCluster, address: str, node_id: str) -> tuple:
    """What the peer-only routes could change: the log's epoch and fence, its followers, the
    node's routing generation."""
    doc = status(c, address)
    hosted = doc["logs"][node_id]
    return (
        hosted["epoch"],
        hosted["fenced_epoch"],
        sorted(hosted.get("followers", {})),
        doc["generation"],
    )


def leader_of(c: LocalCluster, log_id: str) -> tuple[str, str]:
    table = requests.get(c.addresses[0] + "/v1/cluster", headers=AUTH, verify=c.ca_file).json()
    leader = table["logs"][log_id]["leader"]
    return leader, c.node(leader).address


def test_peer_routes_refuse_a_caller_without_a_node_certificate(cluster, tmp_path):
    node_id, address = leader_of(cluster, "node-0")
    before = fingerprint(cluster, address, node_id)
    store_ca = tls.CertKey(
        Path(cluster.ca_file).read_bytes(), (Path(cluster.tls_dir) / "ca.key").read_bytes()
    )
    user = pair_files(tmp_path, "user", tls.issue_cert(store_ca, "alice", ["alice"]))
    for method, url, kwargs in peer_calls(cluster, address, node_id):
        for cert in (None, user):  # no certificate; the store's CA but not a node
            resp = requests.request(
                method, url, headers=AUTH, verify=cluster.ca_file, cert=cert, **kwargs
            )
            assert resp.status_code == 403, (method, url, resp.status_code, resp.text)
            assert "for the store's nodes" in resp.json()["error"]["message"]
    assert fingerprint(cluster, address, node_id) == before
    # the user's certificate is fine for what clients do with a token
    resp = requests.get(address + "/v1/cluster", headers=AUTH, verify=cluster.ca_file, cert=user)
    assert resp.status_code == 200 and resp.json()["logs"]
    assert (
        "refused GET /v1/replication/logs/node-0/fetch"
        in Path(cluster.node(node_id).log).read_text()
    )


def test_a_certificate_of_another_ca_fails_the_handshake_on_every_route(cluster, tmp_path):
    node_id, address = leader_of(cluster, "node-1")
    before = fingerprint(cluster, address, node_id)
    other = tls.new_ca("another CA")
    forged = pair_files(
        tmp_path,
        "forged",
        tls.issue_cert(other, node_id, ["localhost"], ["127.0.0.1"], unit=tls.NODE_UNIT),
    )
    calls = peer_calls(cluster, address, node_id)
    calls.append(("GET", f"{address}/v1/cluster", {}))  # the routing table
    for method, url, kwargs in calls:
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.request(
                method, url, headers=AUTH, verify=cluster.ca_file, cert=forged, **kwargs
            )
    assert fingerprint(cluster, address, node_id) == before
    # the same connection without a certificate, or with a node's of the store, is answered
    port = cluster.node(node_id).port
    node_cert = tuple(str(Path(cluster.tls_dir) / f"{node_id}.{s}") for s in ("crt", "key"))
    assert answers_http(cluster, port, None) and answers_http(cluster, port, node_cert)
    assert not answers_http(cluster, port, forged)


def answers_http(c: LocalCluster, port: int, cert: tuple[str, str] | None) -> bool:
    """Whether a node answers a request over a connection presenting ``cert`` (the node
    ends the handshake of a certificate it does not trust: no answer)."""
    ctx = tls.client_context(c.ca_file)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as conn:
                conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                return conn.recv(16).startswith(b"HTTP/1.1 200")
    except (ssl.SSLError, OSError):
        return False


def test_a_node_certificate_of_the_store_ca_and_the_token_are_both_needed(cluster):
    node_id, address = leader_of(cluster, "node-2")
    follower = next(n.id for n in cluster.nodes if n.id != node_id)
    node_cert = (
        str(Path(cluster.tls_dir) / f"{follower}.crt"),
        str(Path(cluster.tls_dir) / f"{follower}.key"),
    )
    epoch = status(cluster, address)["logs"][node_id]["epoch"]
    url = f"{address}/v1/replication/logs/{node_id}/fetch"
    params = {"position": 0, "epoch": epoch, "follower": follower}
    resp = requests.get(url, params=params, headers=AUTH, verify=cluster.ca_file, cert=node_cert)
    assert resp.status_code == 200 and resp.content, resp.text
    resp = requests.get(url, params=params, verify=cluster.ca_file, cert=node_cert)
    assert resp.status_code == 401, resp.text


def produce_until(stop: threading.Event, c: LocalCluster, tag: str, fresh: bool, out: dict) -> None:
    """Produce batches until ``stop``; every acknowledged message goes into ``out['acked']``
    and unexpected failures into ``out['errors']`` (a 503 while a node takes a log over is
    retried by the client)."""
    client = Client(c.addresses, token=TOKEN, ca=c.ca_file)
    n = 0
    try:
        while not stop.is_set():
            if fresh and n % 5 == 0:  # new connections: new handshakes, the bundle re-read
                client.close()
                client = Client(c.addresses, token=TOKEN, ca=c.ca_file)
            batch = [{"key": f"{tag}-{n}-{j}", "value": f"{tag}/{n}/{j}"} for j in range(20)]
            results = client.produce("rot", batch)
            out["acked"].extend(
                (r["partition"], r["offset"], m["value"])
                for r, m in zip(results, batch, strict=True)
            )
            n += 1
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        out["errors"].append(exc)
    finally:
        client.close()


def test_ca_rotation_under_two_producers_restarts_nothing_and_loses_nothing(tmp_path):
    c = LocalCluster(tmp_path / "rot")
    c.up(nodes=3, env=ENV, tls=True, replication_factor=3)
    try:
        with Client(c.addresses, token=TOKEN, ca=c.ca_file) as admin:
            admin.create_topic("rot", partitions=6)
        pids = {n.id: n.pid for n in c.nodes} | {"controller": c.controller_pid}
        old = tls.CertKey(Path(c.ca_file).read_bytes(), (Path(c.tls_dir) / "ca.key").read_bytes())
        out: dict = {"acked": [], "errors": []}
        stop = threading.Event()
        threads = [
            threading.Thread(target=produce_until, args=(stop, c, tag, fresh, out))
            for tag, fresh in (("fresh", True), ("kept", False))
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while len(out["acked"]) < 400 and not out["errors"]:
            assert time.monotonic() < deadline, "the producers acknowledged nothing"
            time.sleep(0.05)
        steps: list[str] = []
        new = rotate_ca(c, 120, steps.append)
        acked_at_rotation = len(out["acked"])
        while len(out["acked"]) < acked_at_rotation + 400 and not out["errors"]:
            assert time.monotonic() < deadline + 120, "nothing acknowledged after the rotation"
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(120)
        # whole, not pytest's shortened repr: which peer refused which certificate matters
        whole = "\n".join(f"{e!r} caused by {e.__cause__!r}" for e in out["errors"])
        assert not out["errors"], whole
        assert len(steps) == 3, steps
        # nothing restarted
        assert {n.id: n.pid for n in c.running()} | {"controller": c.controller_pid} == pids
        assert len(c.running()) == 3
        # every node serves a certificate of the new CA; the bundle holds it alone
        assert tls.read_bundle(Path(c.ca_file).read_bytes()) == [new.cert]
        for n in c.nodes:
            pair = tls.read_pair(Path(c.tls_dir), n.id)
            assert pair is not None
            tls.verify_issued_by(pair.cert_pem, new.cert_pem)
        # every acknowledged message is stored once, with its value, on its leader
        stored = {}
        with Client(c.addresses, token=TOKEN, ca=c.ca_file) as reader:
            for p in range(6):
                for m in reader.read_all("rot", p):
                    stored[(p, m["offset"])] = m["value"]
        missing = [a for a in out["acked"] if stored.get((a[0], a[1])) != a[2]]
        assert not missing, missing[:5]
        assert len(stored) == len(out["acked"])
        # replication kept up through the rotation: no log under-replicated at the end
        deadline = time.monotonic() + 60
        while any(status(c, a)["under_replicated"] for a in c.addresses):
            assert time.monotonic() < deadline, [status(c, a) for a in c.addresses]
            time.sleep(0.1)
        # a node certificate of the retired CA is refused; one of the new CA is taken
        address = c.nodes[0].address
        log_id = "node-0"
        epoch = status(c, address)["logs"][log_id]["epoch"]
        leader, leader_address = leader_of(c, log_id)
        url = f"{leader_address}/v1/replication/logs/{log_id}/epoch-end"
        params = {"epoch": epoch, "of": epoch}
        retired = pair_files(
            tmp_path, "old-node", tls.issue_cert(old, "node-1", ["localhost"], unit=tls.NODE_UNIT)
        )
        current = pair_files(
            tmp_path, "new-node", tls.issue_cert(new, "node-1", ["localhost"], unit=tls.NODE_UNIT)
        )
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(url, params=params, headers=AUTH, verify=c.ca_file, cert=retired)
        port = c.node(leader).port
        assert not answers_http(c, port, retired) and answers_http(c, port, current)
        resp = requests.get(url, params=params, headers=AUTH, verify=c.ca_file, cert=current)
        assert resp.status_code == 200, resp.text
    finally:
        c.down()


def test_a_user_known_by_its_certificate_subject_gets_its_rules_without_a_token(cluster, tmp_path):
    """A ``tls`` user (MessageStoreUser authentication ``tls``): no token, its client
    certificate from the store's CA names it; it may read what its rules allow, nothing
    else, and a certificate whose subject no user has proves no one."""
    from storage_node.access.access_file import edit_access_file
    from storage_node.access.document import AclRule, Operation, Pattern, ResourceType, User

    store_ca = tls.CertKey(
        Path(cluster.ca_file).read_bytes(), (Path(cluster.tls_dir) / "ca.key").read_bytes()
    )
    bob = pair_files(tmp_path, "bob", tls.issue_client_cert(store_ca, "bob"))
    eve = pair_files(tmp_path, "eve", tls.issue_client_cert(store_ca, "eve"))
    read_m = AclRule("bob", Operation.READ, ResourceType.TOPIC, Pattern.LITERAL, "m")
    edit_access_file(
        cluster.access_file,
        lambda doc: doc.with_user(User("bob", tls_subject="CN=bob")).with_rule(read_m),
    )
    address = cluster.addresses[0]
    url = address + "/v1/topics/m/keys/k1"

    def get(cert: tuple[str, str], target: str = url) -> requests.Response:
        return requests.get(target, verify=cluster.ca_file, cert=cert, timeout=30)

    deadline = time.monotonic() + 60
    while get(bob).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.2)  # the node re-reads the access file within a second
    found = get(bob)
    assert found.status_code == 200, found.text
    assert [m["value"] for m in found.json()["messages"]] == ["1"]
    refused = requests.post(
        address + "/v1/topics/m/messages",
        json={"messages": [{"key": "x", "value": "y"}]},
        verify=cluster.ca_file,
        cert=bob,
        timeout=30,
    )
    assert refused.status_code == 403, refused.text
    stranger = get(eve)
    assert stranger.status_code == 401 and "CN=eve" in stranger.json()["error"]["message"]


def test_a_certificate_user_produces_over_kafka_without_sasl(cluster, tmp_path):
    """Over the Kafka listener's TLS (librdkafka's ``security.protocol=SSL``): a client
    certificate whose subject is a user's ``tls_subject`` is that user, no SASL; its rules
    apply (WRITE on one topic, not on another), a subject no user has proves no one and
    stores nothing, and removing the user closes its connection at the next request."""
    from confluent_kafka import KafkaError, Producer

    from storage_node.access.access_file import edit_access_file
    from storage_node.access.document import AclRule, Operation, Pattern, ResourceType, User

    store_ca = tls.CertKey(
        Path(cluster.ca_file).read_bytes(), (Path(cluster.tls_dir) / "ca.key").read_bytes()
    )
    carol = pair_files(tmp_path, "carol", tls.issue_client_cert(store_ca, "carol"))
    mallory = pair_files(tmp_path, "mallory", tls.issue_client_cert(store_ca, "mallory"))
    with Client(cluster.addresses, token=TOKEN, ca=cluster.ca_file) as admin:
        admin.create_topic("by-cert", partitions=2)
    write = AclRule("carol", Operation.WRITE, ResourceType.TOPIC, Pattern.LITERAL, "by-cert")
    edit_access_file(
        cluster.access_file,
        lambda doc: doc.with_user(User("carol", tls_subject="CN=carol")).with_rule(write),
    )

    def produce(cert: tuple[str, str], topic: str, count: int) -> list[object]:
        producer = Producer(
            {
                "bootstrap.servers": cluster.kafka_address(cluster.nodes[0]),
                "security.protocol": "SSL",
                "ssl.ca.location": cluster.ca_file,
                "ssl.certificate.location": cert[0],
                "ssl.key.location": cert[1],
                "message.timeout.ms": 15000,
            }
        )
        outcomes: list[object] = []
        for i in range(count):
            producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, _m: outcomes.append(e))
        producer.flush(30)
        return outcomes

    def held(topic: str) -> int:
        with Client(cluster.addresses, token=TOKEN, ca=cluster.ca_file) as reader:
            doc = reader.describe_topic(topic)
        return sum(p["next_offset"] - p["first_offset"] for p in doc["partition_offsets"])

    deadline = time.monotonic() + 60
    outcomes = produce(carol, "by-cert", 10)
    while outcomes != [None] * 10 and time.monotonic() < deadline:
        time.sleep(0.5)  # the nodes re-read the access file within a second
        outcomes = produce(carol, "by-cert", 10)
    assert outcomes == [None] * 10, outcomes
    stored = held("by-cert")
    assert stored >= 10
    refused = produce(carol, "m", 1)
    assert len(refused) == 1 and refused[0] is not None
    assert refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused[0]
    stranger = produce(mallory, "by-cert", 3)
    assert len(stranger) == 3 and all(e is not None for e in stranger), stranger
    assert held("by-cert") == stored
