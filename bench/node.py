"""Node server benchmarks: HTTP ingest (binary and JSON batches) and reads, against the
engine's own in-process append rate measured in the same run.

Prints JSON lines:
  inprocess_append     msgs_per_s of Store.append with the same batches (the peer)
  http_ingest_binary   msgs_per_s through one node (--connections concurrent producers, default
                       2), application/x-msgstore-batch, ratio_vs_inprocess
  http_ingest_json     msgs_per_s through one node, JSON bodies, ratio_vs_inprocess
  http_read            p50_us / p99_us of 10-message page reads over keep-alive HTTP, JSON and
                       (binary_p50_us / binary_p99_us) the binary read framing, both decoded
  http_scan_pages      msgs_per_s reading whole partitions in 10,000-message pages, JSON vs
                       binary read framing (ratio_binary_vs_json), and Store.read scanning
                       the same way in-process (ratio_binary_vs_inprocess)
  client_produce       --produce-messages (default 2,000,000) {"key", "value"} dicts through
                       Client.produce in calls of 100,000, against pre-encoded binary
                       batches of the same messages (--connections producers) into another
                       fresh node in the same run: ratio_vs_binary_ingest
  http_lookup_key      p50_us / p99_us of Client.lookup_key, with a bare /healthz through the
                       same client transport in turns (healthz_p50_us / healthz_p99_us)
  tail_latency         a consumer following the topic (Client.consumer, long polls) while a
                       producer sends a message every 2 ms: produce answer -> consumer has
                       it, p50_ms / p99_ms
  http_scan            one consumer (Client.consumer: multi-partition fetches of 10,000
                       messages per partition, the next page prefetched) reading
                       --scan-messages (default 2,000,000) 100-byte messages back:
                       msgs_per_s and server_cpu_s_per_million, with the http_ingest of the
                       same messages into the same node just before (binary batches,
                       --connections producers, its own server CPU) and
                       ratio_scan_vs_ingest; then the same scan page by page, partition by
                       partition, through Client.read_columns: read_columns_msgs_per_s,
                       ratio_read_columns_vs_ingest

  append_replicated    msgs_per_s of binary batches (--connections producers) into the
                       partitions of one node's log on a 3-node ``msgstore local`` cluster
                       with replication factor 3 (sync, min in sync 2), against the same on a
                       factor-1 cluster in the same run (ratio_vs_single_copy); then
                       failover_s: SIGKILL of that log's leader until a batch to the log is
                       acknowledged by its new leader (controller timeout 3 s included);
                       nodes_cpu_us_per_msg: CPU of the three node processes per message
  metrics_scrape       (--only-metrics) GET /metrics of a node with 1,000 partitions and 100
                       consumer groups (each lagging on the 10 partitions of one topic; with
                       --every-partition also each on all 1,000): first scrape and median of
                       ten more (first_scrape_ms, scrape_p50_ms), series, page_bytes

Usage: python bench/node.py [--quick] [--messages N] [--batch B] [--scan-messages N]
       [--only-scan] [--only-client] [--produce-messages N] [--only-replicated]
       [--only-metrics [--every-partition]]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from storage_node.cli.local import free_port  # noqa: E402
from storage_node.client import Client  # noqa: E402
from storage_node.store import MessageIn, Store, StoreConfig, TopicConfig  # noqa: E402
from storage_node.wire.batch_codec import CONTENT_TYPE, encode_batch  # noqa: E402
from storage_node.wire.read_answer import decode_read_answer  # noqa: E402

VALUE_BYTES = 100


def values(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789"
    return [bytes(rng.choices(alphabet, k=VALUE_BYTES)) for _ in range(n)]


def keys(n: int) -> list[str]:
    return [f"key-{i % 10_000}" for i in range(n)]


def inprocess(messages: int, batch: int, workdir: Path) -> float:
    data_dir = workdir / "inproc"
    shutil.rmtree(data_dir, ignore_errors=True)
    store = Store.open(StoreConfig(data_dir=str(data_dir), lifecycle_interval_s=0))
    try:
        store.create_topic(TopicConfig("bench", 4, "none"))
        vals, ks = values(messages, 1), keys(messages)
        started = time.perf_counter()
        for i in range(0, messages, batch):
            store.append_columns("bench", vals[i : i + batch], ks[i : i + batch])
        return messages / (time.perf_counter() - started)
    finally:
        store.close()


class Node:
    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / f"node-{time.monotonic_ns()}"
        self.port = free_port()
        self.address = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MSGSTORE_LIFECYCLE_INTERVAL_S": "0"}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "storage_node.cli",
                "serve",
                "--data-dir",
                str(self.dir),
                "--port",
                str(self.port),
                "--set",
                "log_level=WARNING",
            ],
            env=env,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(self.address + "/readyz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("node did not start")
            time.sleep(0.05)
        requests.post(
            self.address + "/v1/topics",
            json={"name": "bench", "partitions": 4, "compression": "none"},
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def fast_values(n: int, seed: int) -> list[bytes]:
    """``n`` random 100-byte values from the same alphabet as ``values``, made with numpy."""
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)
    rng = np.random.default_rng(seed)
    blob = alphabet[rng.integers(0, len(alphabet), n * VALUE_BYTES)].tobytes()
    return [blob[i : i + VALUE_BYTES] for i in range(0, n * VALUE_BYTES, VALUE_BYTES)]


def server_cpu_s(node: Node) -> float:
    """User + system CPU seconds the node's process has used so far."""
    return pid_cpu_s(node.proc.pid)


def pid_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def http_ingest(
    node: Node,
    messages: int,
    batch: int,
    binary: bool,
    connections: int = 1,
    data: tuple[list[bytes], list[str]] | None = None,
) -> float:
    """Pre-encoded bodies sent over ``connections`` keep-alive connections at once."""
    vals, ks = data if data is not None else (values(messages, 2), keys(messages))
    bodies = []
    for i in range(0, messages, batch):
        v, k = vals[i : i + batch], ks[i : i + batch]
        if binary:
            bodies.append(encode_batch(v, keys=k))
        else:
            bodies.append(
                json.dumps(
                    {
                        "messages": [
                            {"value": x.decode(), "key": y} for x, y in zip(v, k, strict=True)
                        ]
                    }
                ).encode()
            )
    ctype = CONTENT_TYPE if binary else "application/json"
    headers = {"Content-Type": ctype, "Accept": ctype}  # binary producers take the binary answer
    url = node.address + "/v1/topics/bench/messages"

    def send(share: list[bytes]) -> None:
        session = requests.Session()
        for body in share:
            session.post(url, data=body, headers=headers).raise_for_status()

    shares = [bodies[i::connections] for i in range(connections)]
    started = time.perf_counter()
    with ThreadPoolExecutor(connections) as pool:
        list(pool.map(send, shares))
    return messages / (time.perf_counter() - started)


def http_read(node: Node, reads: int, binary: bool = False) -> tuple[float, float, float]:
    """p50, p99 of 10-message page reads at random offsets, and p50 of /healthz (the floor).

    ``binary`` asks for the binary read framing and decodes it, as a client would."""
    session = requests.Session()
    offsets = requests.get(node.address + "/v1/topics/bench").json()["partition_offsets"]
    rng = random.Random(3)
    headers = {"Accept": CONTENT_TYPE} if binary else {}
    lat = []
    for _ in range(reads):
        p = rng.randrange(len(offsets))
        off = rng.randrange(max(1, offsets[p]["next_offset"]))
        started = time.perf_counter()
        resp = session.get(
            f"{node.address}/v1/topics/bench/partitions/{p}/messages",
            params={"offset": off, "max_messages": 10},
            headers=headers,
        )
        resp.raise_for_status()
        if binary:
            decode_read_answer(resp.content).value_list()
        else:
            resp.json()
        lat.append(time.perf_counter() - started)
    lat.sort()
    floor = []
    for _ in range(reads // 2):
        started = time.perf_counter()
        session.get(node.address + "/healthz").raise_for_status()
        floor.append(time.perf_counter() - started)
    floor.sort()
    return lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6, floor[len(floor) // 2] * 1e6


def http_scan(node: Node, binary: bool, page: int = 10_000) -> float:
    """msgs/s of reading every partition to its end in ``page``-message pages, decoded as a
    client would (JSON parse, or the binary framing's decoder plus the value list)."""
    session = requests.Session()
    offsets = requests.get(node.address + "/v1/topics/bench").json()["partition_offsets"]
    headers = {"Accept": CONTENT_TYPE} if binary else {}
    count = 0
    started = time.perf_counter()
    for part in offsets:
        offset, end = part["first_offset"], part["next_offset"]
        while offset < end:
            resp = session.get(
                f"{node.address}/v1/topics/bench/partitions/{part['partition']}/messages",
                params={"offset": offset, "max_messages": page, "max_bytes": 64 << 20},
                headers=headers,
            )
            resp.raise_for_status()
            if binary:
                cols = decode_read_answer(resp.content)
                cols.value_list()
                count, offset = count + len(cols), cols.next_offset
            else:
                doc = resp.json()
                count, offset = count + len(doc["messages"]), doc["next_offset"]
    return count / (time.perf_counter() - started)


def client_scan(node: Node) -> tuple[int, float, float]:
    """One consumer reading every partition to its end through ``Client.read_columns`` in
    10,000-message pages: (messages, msgs/s, server CPU seconds)."""
    client = Client(node.address)
    offsets = requests.get(node.address + "/v1/topics/bench").json()["partition_offsets"]
    count = 0
    cpu = server_cpu_s(node)
    started = time.perf_counter()
    for part in offsets:
        offset, end = part["first_offset"], part["next_offset"]
        while offset < end:
            cols = client.read_columns(
                "bench", part["partition"], offset, max_messages=10_000, max_bytes=64 << 20
            )
            count, offset = count + len(cols), cols.next_offset
    elapsed = time.perf_counter() - started
    return count, count / elapsed, server_cpu_s(node) - cpu


def bench_http_scan(workdir: Path, messages: int, batch: int, connections: int) -> None:
    """``http_scan``: ingest ``messages`` into a fresh node, then scan them back once."""
    data = (fast_values(messages, 5), keys(messages))
    node = Node(workdir)
    try:
        cpu = server_cpu_s(node)
        ingest = http_ingest(node, messages, batch, True, connections, data)
        ingest_cpu = server_cpu_s(node) - cpu
        del data
        count, rate, scan_cpu = consumer_scan(node)
        pcount, prate, pcpu = client_scan(node)
    finally:
        node.stop()
    if count != messages or pcount != messages:
        raise RuntimeError(f"the scans read {count}, {pcount} messages, {messages} were written")
    print(
        json.dumps(
            {
                "bench": "http_scan",
                "msgs_per_s": round(rate),
                "server_cpu_s_per_million": round(scan_cpu / messages * 1e6, 3),
                "http_ingest_msgs_per_s": round(ingest),
                "http_ingest_server_cpu_s_per_million": round(ingest_cpu / messages * 1e6, 3),
                "ratio_scan_vs_ingest": round(rate / ingest, 3),
                "read_columns_msgs_per_s": round(prate),
                "read_columns_server_cpu_s_per_million": round(pcpu / messages * 1e6, 3),
                "ratio_read_columns_vs_ingest": round(prate / ingest, 3),
                "messages": messages,
                "page": 10_000,
                "batch": batch,
                "connections": connections,
                "value_bytes": VALUE_BYTES,
            }
        ),
        flush=True,
    )


def consumer_scan(node: Node) -> tuple[int, float, float]:
    """The same scan through ``Client.consumer``: multi-partition fetches of 10,000-message
    pages, the next fetched while this one is decoded (values split as a caller would)."""
    client = Client(node.address)
    count = 0
    cpu = server_cpu_s(node)
    started = time.perf_counter()
    with client.consumer("bench", page=10_000) as consumer:
        for cols in consumer:
            count += len(cols)
    elapsed = time.perf_counter() - started
    client.close()
    return count, count / elapsed, server_cpu_s(node) - cpu


def client_produce(workdir: Path, messages: int, connections: int, call: int) -> None:
    """``client_produce``: ``messages`` dicts ({"key", "value"}) through ``Client.produce``
    in calls of ``call`` messages, against pre-encoded binary batches of the same messages
    sent over ``connections`` connections into another fresh node, in the same run."""
    vals, ks = fast_values(messages, 7), keys(messages)
    rates = {}
    for kind in ("binary_ingest", "client_produce"):
        node = Node(workdir)
        try:
            if kind == "binary_ingest":
                rates[kind] = http_ingest(node, messages, 5000, True, connections, (vals, ks))
                continue
            dicts = [{"key": k, "value": v} for k, v in zip(ks, vals, strict=True)]
            client = Client(node.address)
            started = time.perf_counter()
            done = 0
            for i in range(0, messages, call):
                done += len(client.produce("bench", dicts[i : i + call]))
            rates[kind] = done / (time.perf_counter() - started)
            client.close()
        finally:
            node.stop()
    print(
        json.dumps(
            {
                "bench": "client_produce",
                "msgs_per_s": round(rates["client_produce"]),
                "binary_ingest_msgs_per_s": round(rates["binary_ingest"]),
                "ratio_vs_binary_ingest": round(
                    rates["client_produce"] / rates["binary_ingest"], 3
                ),
                "messages": messages,
                "call_messages": call,
                "value_bytes": VALUE_BYTES,
            }
        ),
        flush=True,
    )


def http_lookup_key(workdir: Path, lookups: int) -> None:
    """``http_lookup_key``: p50/p99 of ``Client.lookup_key`` (JSON answer) and of a bare
    ``/healthz`` through the same client transport, in turns, on one node."""
    node = Node(workdir)
    try:
        client = Client(node.address)
        client.produce(
            "bench", [{"key": f"k{i}", "value": b"v" * VALUE_BYTES} for i in range(10_000)]
        )
        rng = random.Random(5)
        lookup, health = [], []
        for i in range(lookups):
            key = f"k{rng.randrange(10_000)}"
            started = time.perf_counter()
            found = client.lookup_key("bench", key)
            lookup.append(time.perf_counter() - started)
            if len(found["messages"]) != 1:
                raise RuntimeError(f"lookup of {key} found {len(found['messages'])} messages")
            if i % 2 == 0:
                started = time.perf_counter()
                client.request("GET", node.address, "/healthz")
                health.append(time.perf_counter() - started)
        client.close()
    finally:
        node.stop()
    lookup.sort()
    health.sort()
    print(
        json.dumps(
            {
                "bench": "http_lookup_key",
                "p50_us": round(lookup[len(lookup) // 2] * 1e6),
                "p99_us": round(lookup[int(len(lookup) * 0.99)] * 1e6),
                "healthz_p50_us": round(health[len(health) // 2] * 1e6),
                "healthz_p99_us": round(health[int(len(health) * 0.99)] * 1e6),
                "lookups": lookups,
            }
        ),
        flush=True,
    )


def tail_latency(workdir: Path, messages: int) -> None:
    """``tail_latency``: a tailing consumer (``Client.consumer(follow=True)``, long polls)
    while a producer sends one message every 2 ms; per message, the time from its produce
    answer (acknowledged) to the consumer holding it (received): p50 / p99."""
    import threading

    node = Node(workdir)
    try:
        producer, reader = Client(node.address), Client(node.address)
        acked: dict[str, float] = {}
        received: dict[str, float] = {}
        start = {
            p["partition"]: p["next_offset"]
            for p in producer.describe_topic("bench")["partition_offsets"]
        }
        consumer = reader.consumer("bench", offsets=start, page=1000, follow=True, wait_ms=1000)

        def consume() -> None:
            for cols in consumer:
                now = time.perf_counter()
                for key in cols.key_text():
                    received.setdefault(str(key), now)
                if len(received) >= messages:
                    return

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        time.sleep(0.5)
        for i in range(messages):
            producer.produce("bench", [{"key": f"t{i}", "value": b"x"}])
            acked[f"t{i}"] = time.perf_counter()
            time.sleep(0.002)
        thread.join(30)
        consumer.close()
        producer.close()
    finally:
        node.stop()
    lat = sorted(max(0.0, received[k] - acked[k]) for k in acked if k in received)
    print(
        json.dumps(
            {
                "bench": "tail_latency",
                "p50_ms": round(lat[len(lat) // 2] * 1e3, 2),
                "p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 2),
                "received": len(lat),
                "messages": messages,
                "wait_ms": 1000,
            }
        ),
        flush=True,
    )


def inprocess_read(workdir: Path, reads: int) -> tuple[float, float]:
    """p50 of Store.read of 10 messages (the same query without HTTP), and msgs/s of
    Store.read scanning every partition in 10,000-message pages (the peer of http_scan)."""
    data_dir = workdir / "inproc-read"
    shutil.rmtree(data_dir, ignore_errors=True)
    store = Store.open(StoreConfig(data_dir=str(data_dir), lifecycle_interval_s=0))
    try:
        store.create_topic(TopicConfig("bench", 4, "none"))
        vals, ks = values(50_000, 4), keys(50_000)
        for i in range(0, 50_000, 5000):
            chunk = zip(vals[i : i + 5000], ks[i : i + 5000], strict=True)
            store.append("bench", [MessageIn(v, k) for v, k in chunk])
        offsets = store.partition_offsets("bench")
        rng = random.Random(3)
        lat = []
        for _ in range(reads):
            p = rng.randrange(4)
            off = rng.randrange(max(1, offsets[p][1]))
            started = time.perf_counter()
            store.read("bench", p, off, max_messages=10)
            lat.append(time.perf_counter() - started)
        lat.sort()
        count = 0
        started = time.perf_counter()
        for p, (first, end) in enumerate(offsets):
            offset = first
            while offset < end:
                page = store.read("bench", p, offset, max_messages=10_000, max_bytes=64 << 20)
                count, offset = count + len(page.messages), page.next_offset
        return lat[len(lat) // 2] * 1e6, count / (time.perf_counter() - started)
    finally:
        store.close()


def _wait_in_sync(address: str, log_id: str, factor: int, timeout_s: float = 60.0) -> None:
    """Until the controller named the log's leader and every copy is in sync: measured
    appends must not race a new cluster's first leader election."""
    if factor == 1:
        return  # nothing replicated: no leader to wait for
    deadline = time.monotonic() + timeout_s
    while True:
        doc = requests.get(f"{address}/v1/replication/status", timeout=5).json()
        state = doc.get("logs", {}).get(log_id)
        if state is not None and state["role"] == "leader" and state.get("in_sync", 1) >= factor:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"log {log_id} not led and in sync after {timeout_s}s: {state}")
        time.sleep(0.05)


def _replicated_run(
    workdir: Path, factor: int, messages: int, batch: int, connections: int
) -> tuple[float, float | None, float]:
    """Ingest rate into node-0's log of a fresh local cluster and the CPU the three nodes
    spent per message; with replication, then the failover time of that log."""
    from storage_node.cli.local import LocalCluster

    cluster_dir = workdir / f"cluster-{factor}"
    cluster = LocalCluster(cluster_dir)
    cluster.up(nodes=3, replication_factor=factor)
    try:
        client = Client(cluster.addresses[0])
        client.create_topic("bench", partitions=3)  # partition 0 is node-0's log
        _wait_in_sync(cluster.addresses[0], "node-0", factor)
        vals, ks = values(messages, 2), keys(messages)
        bodies = [
            encode_batch(
                vals[i : i + batch],
                keys=ks[i : i + batch],
                partitions=[0] * len(vals[i : i + batch]),
            )
            for i in range(0, messages, batch)
        ]
        url = cluster.addresses[0] + "/v1/topics/bench/messages"

        def send(share: list[bytes]) -> None:
            session = requests.Session()
            for body in share:
                session.post(
                    url, data=body, headers={"Content-Type": CONTENT_TYPE}
                ).raise_for_status()

        shares = [bodies[i::connections] for i in range(connections)]
        pids = [n.pid for n in cluster.nodes]
        cpu = sum(map(pid_cpu_s, pids))
        started = time.perf_counter()
        with ThreadPoolExecutor(connections) as pool:
            list(pool.map(send, shares))
        rate = messages / (time.perf_counter() - started)
        cpu_us = (sum(map(pid_cpu_s, pids)) - cpu) / messages * 1e6
        failover = None
        if factor > 1:
            body = encode_batch([b"after"], partitions=[0], producer_id="bench", sequence=1)
            killed = time.perf_counter()
            cluster.kill("node-0")
            while True:
                try:
                    from storage_node.server.routing_state import read_routing_file

                    table = read_routing_file(cluster.routing_file)
                    address = table.node_address("node-0")
                    resp = requests.post(
                        f"{address}/v1/topics/bench/messages",
                        data=body,
                        headers={"Content-Type": CONTENT_TYPE},
                        timeout=5,
                    )
                    if resp.status_code == 200:
                        break
                except requests.RequestException:
                    pass
                time.sleep(0.02)
            failover = time.perf_counter() - killed
        return rate, failover, cpu_us
    finally:
        cluster.down()


def bench_replicated(
    workdir: Path, messages: int, batch: int, connections: int, repeats: int
) -> None:
    singles, copies, failovers, single_cpu, copies_cpu = [], [], [], [], []
    for r in range(repeats):
        rate, _none, cpu_us = _replicated_run(workdir / f"r{r}", 1, messages, batch, connections)
        singles.append(rate)
        single_cpu.append(cpu_us)
        rate, failover, cpu_us = _replicated_run(workdir / f"r{r}", 3, messages, batch, connections)
        copies.append(rate)
        failovers.append(failover)
        copies_cpu.append(cpu_us)
    single, copied = statistics.median(singles), statistics.median(copies)
    print(
        json.dumps(
            {
                "bench": "append_replicated",
                "msgs_per_s": round(copied),
                "single_copy_msgs_per_s": round(single),
                "ratio_vs_single_copy": round(copied / single, 3),
                # node CPU (all three) per message: the copies' work on a shared machine
                "nodes_cpu_us_per_msg": round(statistics.median(copies_cpu), 2),
                "single_copy_nodes_cpu_us_per_msg": round(statistics.median(single_cpu), 2),
                "failover_s": round(statistics.median(failovers), 2),  # type: ignore[type-var]
                "replication_factor": 3,
                "min_in_sync": 2,
                "messages": messages,
                "batch": batch,
                "connections": connections,
                "repeats": repeats,
            }
        ),
        flush=True,
    )


def metrics_scrape(workdir: Path, topics: int, per_topic: int, groups: int, every: bool) -> None:
    """GET /metrics of one node holding ``topics`` x ``per_topic`` partitions with messages
    in each and ``groups`` consumer groups, each committing (offset 1, so every series
    lags) every partition of one topic, or with ``every`` every partition of every topic:
    wall time of the first scrape (store times of the unread messages read) and the median
    of the next ten, page size and series count."""
    node = Node(workdir)
    try:
        with Client([node.address]) as client:
            for t in range(topics):
                client.create_topic(f"m{t}", per_topic)
                client.produce(f"m{t}", [{"value": "x" * 20} for _ in range(per_topic * 3)])

        def commit(args: tuple[int, int]) -> None:
            g, t = args
            with requests.Session() as session:
                for p in range(per_topic):
                    body = {"topic": f"m{t}", "partition": p, "offset": 1}
                    url = f"{node.address}/v1/consumer-groups/g{g}/offsets"
                    session.post(url, json=body).raise_for_status()

        work = [(g, t) for g in range(groups) for t in (range(topics) if every else [g % topics])]
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(commit, work))
        times = []
        for _ in range(11):
            started = time.perf_counter()
            page = requests.get(node.address + "/metrics", timeout=300).text
            times.append(time.perf_counter() - started)
        series = sum(1 for line in page.splitlines() if line and not line.startswith("#"))
        lag = sum(1 for line in page.splitlines() if line.startswith("msgstore_group_lag_seconds{"))
        print(
            json.dumps(
                {
                    "bench": "metrics_scrape",
                    "partitions": topics * per_topic,
                    "groups": groups,
                    "group_partition_series": lag,
                    "first_scrape_ms": round(times[0] * 1000, 1),
                    "scrape_p50_ms": round(statistics.median(times[1:]) * 1000, 1),
                    "scrape_max_ms": round(max(times[1:]) * 1000, 1),
                    "series": series,
                    "page_bytes": len(page),
                }
            ),
            flush=True,
        )
    finally:
        node.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--connections", type=int, default=2, help="concurrent producers")
    parser.add_argument("--scan-messages", type=int, default=None, help="http_scan size")
    parser.add_argument("--only-scan", action="store_true", help="run http_scan only")
    parser.add_argument(
        "--only-client",
        action="store_true",
        help="run client_produce, http_lookup_key and tail_latency only",
    )
    parser.add_argument("--produce-messages", type=int, default=None, help="client_produce size")
    parser.add_argument("--only-replicated", action="store_true", help="run append_replicated only")
    parser.add_argument(
        "--only-metrics",
        action="store_true",
        help="run metrics_scrape only (1,000 partitions, 100 groups on one topic each, then "
        "with --every-partition each group on every partition)",
    )
    parser.add_argument("--every-partition", action="store_true")
    args = parser.parse_args()
    if args.only_metrics:
        workdir = Path(tempfile.mkdtemp(prefix="msgstore-bench-node-"))
        try:
            metrics_scrape(workdir, 100, 10, 100, False)
            if args.every_partition:
                metrics_scrape(workdir, 100, 10, 100, True)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return
    if args.only_replicated:
        workdir = Path(tempfile.mkdtemp(prefix="msgstore-bench-node-"))
        try:
            bench_replicated(
                workdir,
                args.messages or (50_000 if args.quick else 200_000),
                args.batch,
                args.connections,
                args.repeats or (1 if args.quick else 3),
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return
    scan_messages = args.scan_messages or (200_000 if args.quick else 2_000_000)
    produce_messages = args.produce_messages or (200_000 if args.quick else 2_000_000)
    if args.only_client:
        workdir = Path(tempfile.mkdtemp(prefix="msgstore-bench-node-"))
        try:
            client_benches(workdir, args.quick, produce_messages, args.connections)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return
    if args.only_scan:
        workdir = Path(tempfile.mkdtemp(prefix="msgstore-bench-node-"))
        try:
            bench_http_scan(workdir, scan_messages, args.batch, args.connections)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return
    messages = args.messages or (50_000 if args.quick else 200_000)
    repeats = args.repeats or (1 if args.quick else 3)
    workdir = Path(tempfile.mkdtemp(prefix="msgstore-bench-node-"))
    try:
        peer = statistics.median(inprocess(messages, args.batch, workdir) for _ in range(repeats))
        print(
            json.dumps(
                {
                    "bench": "inprocess_append",
                    "msgs_per_s": round(peer),
                    "messages": messages,
                    "batch": args.batch,
                    "value_bytes": VALUE_BYTES,
                }
            ),
            flush=True,
        )
        for name, binary in (("http_ingest_binary", True), ("http_ingest_json", False)):
            rates = []
            for _ in range(repeats):
                node = Node(workdir)
                try:
                    rates.append(http_ingest(node, messages, args.batch, binary, args.connections))
                finally:
                    node.stop()
            rate = statistics.median(rates)
            print(
                json.dumps(
                    {
                        "bench": name,
                        "msgs_per_s": round(rate),
                        "ratio_vs_inprocess": round(rate / peer, 3),
                        "messages": messages,
                        "batch": args.batch,
                        "value_bytes": VALUE_BYTES,
                        "repeats": repeats,
                        "connections": args.connections,
                    }
                ),
                flush=True,
            )
        node = Node(workdir)
        try:
            http_ingest(node, min(messages, 50_000), args.batch, True)
            reads = 500 if args.quick else 2000
            p50, p99, floor = http_read(node, reads)
            bin_p50, bin_p99, _ = http_read(node, reads, binary=True)
            http_ingest(node, messages, args.batch, True)  # a bigger topic for page scans
            scans = {
                name: statistics.median(http_scan(node, binary) for _ in range(repeats))
                for name, binary in (("json", False), ("binary", True))
            }
        finally:
            node.stop()
        inproc, inproc_scan = inprocess_read(workdir, 500 if args.quick else 2000)
        print(
            json.dumps(
                {
                    "bench": "http_read",
                    "p50_us": round(p50),
                    "p99_us": round(p99),
                    "max_messages": 10,
                    "healthz_p50_us": round(floor),
                    "inprocess_read_p50_us": round(inproc),
                    "binary_p50_us": round(bin_p50),
                    "binary_p99_us": round(bin_p99),
                }
            ),
            flush=True,
        )
        print(
            json.dumps(
                {
                    "bench": "http_scan_pages",
                    "page": 10_000,
                    "json_msgs_per_s": round(scans["json"]),
                    "binary_msgs_per_s": round(scans["binary"]),
                    "ratio_binary_vs_json": round(scans["binary"] / scans["json"], 3),
                    "inprocess_scan_msgs_per_s": round(inproc_scan),
                    "ratio_binary_vs_inprocess": round(scans["binary"] / inproc_scan, 3),
                    "value_bytes": VALUE_BYTES,
                    "repeats": repeats,
                }
            ),
            flush=True,
        )
        bench_http_scan(workdir, scan_messages, args.batch, args.connections)
        client_benches(workdir, args.quick, produce_messages, args.connections)
        bench_replicated(workdir, messages, args.batch, args.connections, repeats)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def client_benches(workdir: Path, quick: bool, produce_messages: int, connections: int) -> None:
    client_produce(workdir, produce_messages, connections, 100_000)
    http_lookup_key(workdir, 1000 if quick else 5000)
    tail_latency(workdir, 200 if quick else 1000)


if __name__ == "__main__":
    main()
