"""SIGKILL a node while clients produce to the whole cluster, restart it: every acknowledged
message is there exactly once (clients resend with the same producer id and sequence)."""

from __future__ import annotations

import collections
import signal
import threading
import time

import requests

from storage_node.cli.local import LocalCluster
from storage_node.client import Client

PRODUCERS = 4
BATCHES = 40
BATCH = 50


def test_sigkill_during_concurrent_produce(tmp_path):
    cluster = LocalCluster(tmp_path / "crash")
    cluster.up(nodes=3, env={"MSGSTORE_LIFECYCLE_INTERVAL_S": "0"})
    try:
        with Client(cluster.addresses) as admin:
            admin.create_topic("crash", 6)
        acked: list[tuple[str, dict]] = []
        lock = threading.Lock()
        errors: list[BaseException] = []
        progress = threading.Semaphore(0)

        def produce(worker: int) -> None:
            try:
                with Client(cluster.addresses, max_retries=80) as client:
                    for b in range(BATCHES):
                        values = [f"w{worker}-b{b}-m{i}" for i in range(BATCH)]
                        msgs = [
                            {"value": v, "key": f"k{(b * BATCH + i) % 97}"}
                            for i, v in enumerate(values)
                        ]
                        results = client.produce("crash", msgs)
                        with lock:
                            acked.extend(zip(values, results, strict=True))
                        progress.release()
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)

        threads = [threading.Thread(target=produce, args=(w,)) for w in range(PRODUCERS)]
        for t in threads:
            t.start()
        for _ in range(PRODUCERS * 5):  # let every producer get going
            progress.acquire(timeout=60)
        with lock:
            acked_before_kill = len(acked)
        cluster.kill("node-1", signal.SIGKILL)
        # Part of what is tested: half a second of a dead node that producers retry against.
        time.sleep(0.5)
        cluster.restart("node-1")
        for t in threads:
            t.join(timeout=240)
        assert not errors, errors
        assert acked_before_kill < PRODUCERS * BATCHES * BATCH  # the kill hit a busy cluster
        assert len(acked) == PRODUCERS * BATCHES * BATCH

        with Client(cluster.addresses) as client:
            stored: collections.Counter[str] = collections.Counter()
            where: dict[str, tuple[int, int]] = {}
            for p in range(6):
                for m in client.read_all("crash", p):
                    stored[m["value"]] += 1
                    where[m["value"]] = (m["partition"], m["offset"])
        duplicates = [v for v, n in stored.items() if n > 1]
        assert duplicates == []
        missing = [v for v, _ in acked if v not in stored]
        assert missing == []
        for value, result in acked:
            assert where[value] == (result["partition"], result["offset"])
        # the restarted node also answers ID lookups for what it held before the crash
        node1_partitions = {
            p
            for p, o in enumerate(
                requests.get(cluster.addresses[0] + "/v1/cluster").json()["topics"]["crash"][
                    "owners"
                ]
            )
            if o == "node-1"
        }
        sample = next(r for _, r in acked if r["partition"] in node1_partitions)
        got = requests.get(cluster.addresses[1] + f"/v1/messages/{sample['msg_id']}")
        assert got.status_code == 200
    finally:
        cluster.down()


def test_sigterm_shuts_down_cleanly_and_keeps_data(node_factory):
    n = node_factory("term")
    requests.post(n.url("/v1/topics"), json={"name": "t", "partitions": 1})
    requests.post(
        n.url("/v1/topics/t/messages"), json={"messages": [{"value": f"{i}"} for i in range(10)]}
    )
    assert n.stop(signal.SIGTERM) == 0
    assert "store closed cleanly" in n.log.read_text()
    n.start()
    doc = requests.get(n.url("/v1/topics/t/partitions/0/messages")).json()
    assert [m["value"] for m in doc["messages"]] == [str(i) for i in range(10)]
