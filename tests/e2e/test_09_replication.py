"""Replicated logs on real pods: a node pod and its volume claim deleted under load.

A second MessageStore, ``ledger``, keeps every node's commit log on three pods
(replicationFactor 3, minInSync 2, sync flush); the operator is its failover controller.
A producer with idempotent retries writes while one pod (the leader of a log) is deleted
together with its PersistentVolumeClaim, once gracefully and once killed with no grace:
the StatefulSet brings the pod back on an empty volume, the operator
promotes a follower for the lost log, and the new pod copies the logs it holds back from
their leaders. Afterwards every acknowledged message is stored exactly once and answers by
message ID, and the store's status shows no under-replicated log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_support import NAMESPACE, Shop, client_pod_manifest
from fixtures_kind import NODE_IMAGE, TIMINGS, KindCluster

STORE = "ledger"
CLIENT = "ledger-client"


def _manifest() -> dict[str, Any]:
    return {
        "apiVersion": "msgstore.io/v1alpha1",
        "kind": "MessageStore",
        "metadata": {"name": STORE, "namespace": NAMESPACE},
        "spec": {
            "replicas": 3,
            "replicationFactor": 3,
            "minInSync": 2,
            "image": NODE_IMAGE,
            "storage": {"size": "1Gi"},
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
            "flush": {"mode": "sync"},
            "topics": [{"name": "ledger", "partitions": 3}],
        },
    }


@pytest.fixture(scope="module")
def ledger(kind_cluster: KindCluster, shop: Shop) -> Iterator[Shop]:
    """The replicated store and its own client pod, in the sample store's namespace."""
    store = Shop(kind_cluster, NAMESPACE, STORE, client=CLIENT)
    started = time.monotonic()
    store.kubectl("apply", "-f", "-", input=json.dumps(_manifest()))
    store.wait_credentials()
    pod = client_pod_manifest(NAMESPACE, STORE, name=CLIENT)
    store.kubectl("apply", "-f", "-", input=json.dumps(pod))
    store.kubectl("wait", "--for=condition=Ready", f"pod/{CLIENT}", "--timeout=180s", timeout=200)
    store.wait_store_ready(3)
    _wait_fully_replicated(store, 240)
    TIMINGS["replicated store applied to fully in sync"] = round(time.monotonic() - started, 1)
    yield store
    store.kubectl("delete", "pod", CLIENT, "--wait=false", check=False)
    store.kubectl("delete", "messagestore", STORE, "--wait=false", check=False)


def _replication(store: Shop) -> dict[str, Any]:
    return dict(store.store_status().get("replication") or {})


def _wait_fully_replicated(store: Shop, timeout: float) -> dict[str, Any]:
    """Every log led under an epoch and copied in sync on all three pods."""

    def done() -> dict[str, Any] | None:
        rep = _replication(store)
        logs = rep.get("logs") or []
        ok = (
            len(logs) == 3
            and not rep.get("underReplicated")
            and all(row["epoch"] >= 1 and row["inSync"] == 3 for row in logs)
        )
        return rep if ok else None

    return store.cluster.wait_until(done, "every log in sync on 3 pods", timeout, interval=2)


def _uid(store: Shop, kind: str, name: str) -> str | None:
    got = store.kubectl("get", kind, name, "-o", "jsonpath={.metadata.uid}", check=False)
    return got.stdout.strip() or None if got.returncode == 0 else None


def test_the_operator_names_a_leader_for_every_log(ledger: Shop) -> None:
    rep = _wait_fully_replicated(ledger, 60)
    assert rep["factor"] == 3 and rep["minInSync"] == 2, rep
    assert sorted(row["log"] for row in rep["logs"]) == ["ledger-0", "ledger-1", "ledger-2"]
    routing = ledger.get("configmap", f"{STORE}-routing")["data"]
    table = json.loads(next(iter(routing.values())))
    assert set(table["logs"]) == {"ledger-0", "ledger-1", "ledger-2"}
    assert all(log["epoch"] >= 1 for log in table["logs"].values()), table["logs"]


def test_a_node_pod_deleted_with_its_volume_claim_loses_no_acknowledged_message(
    ledger: Shop,
) -> None:
    _vanish_under_load(ledger, force=False, run="vanish")


def test_a_node_pod_killed_with_no_grace_and_its_claim_loses_no_acknowledged_message(
    ledger: Shop,
) -> None:
    """The same with ``--force --grace-period=0``: the container is killed at once, in the
    middle of writes, shipping and acknowledgements."""
    _vanish_under_load(ledger, force=True, run="killed")


def _vanish_under_load(ledger: Shop, force: bool, run: str) -> None:
    _wait_fully_replicated(ledger, 120)
    before = {row["log"]: row for row in _replication(ledger)["logs"]}
    # the pod leading ledger-1's log (a log may be led by another pod than its namesake)
    victim = before[f"{STORE}-1"]["leader"]
    claim = f"data-{victim}"
    led = sorted(log for log, row in before.items() if row["leader"] == victim)
    old_pod, old_claim = _uid(ledger, "pod", victim), _uid(ledger, "pvc", claim)
    assert old_pod and old_claim
    base = ledger.stored("ledger")
    load = ledger.start_workload(
        "produce", "--topic", "ledger", "--run", run, "--seconds", "60", "--batch", "20",
        "--pause-ms", "10",
    )  # fmt: skip
    ledger.wait_stored("ledger", base + 1000, "the load stored before the pod goes")
    started = time.monotonic()
    # The volume goes with the pod: the claim is deleted first (it waits for the pod),
    # then the pod.
    ledger.kubectl("delete", "pvc", claim, "--wait=false")
    if force:
        ledger.kubectl(
            "delete", "pod", victim, "--force", "--grace-period=0", "--timeout=120s", timeout=150
        )
    else:
        ledger.kubectl("delete", "pod", victim, "--timeout=120s", timeout=150)

    def replaced() -> bool:
        pod, new_claim = _uid(ledger, "pod", victim), _uid(ledger, "pvc", claim)
        if pod is None or pod == old_pod:
            return False
        if new_claim is None or new_claim == old_claim:
            # the StatefulSet recreated the pod before the old claim was gone: that pod
            # waits on a claim being deleted, so it is deleted again (as a person would)
            phase = ledger.kubectl(
                "get", "pod", victim, "-o", "jsonpath={.status.phase}", check=False
            ).stdout
            if phase == "Pending":
                ledger.kubectl("delete", "pod", victim, "--wait=false", check=False)
            return False
        return True

    ledger.cluster.wait_until(replaced, f"a new {victim} pod on a new volume claim", 240, 2)
    ledger.wait_store_ready(3)
    produced = ledger.finish(load)
    rep = _wait_fully_replicated(ledger, 300)
    how = "killed with no grace" if force else "deleted"
    TIMINGS[f"pod {how} with its claim to fully re-replicated"] = round(
        time.monotonic() - started, 1
    )
    after = {row["log"]: row for row in rep["logs"]}
    # every log the lost pod led has another leader under a newer epoch
    for log in led:
        assert after[log]["epoch"] > before[log]["epoch"], (victim, before, after)
        assert after[log]["leader"] != victim, (victim, before, after)
    counts = ledger.check_acked(produced, f"{run}:", topic="ledger")
    print(f"pod {how} with its claim:", json.dumps({**counts, "victim": victim, "after": after}))
    assert counts["acked"] > 200, counts
    # reads by message ID find acknowledged messages where they were acknowledged
    sample = produced["acked"][:: max(1, len(produced["acked"]) // 20)]
    found = ledger.workload(
        "lookups", "--topic", "ledger", "--msg-ids", ",".join(a[3] for a in sample)
    )["by_id"]
    for value, partition, offset, msg_id in sample:
        got = found[msg_id]
        assert (got["value"], got["partition"], got["offset"]) == (value, partition, offset)
