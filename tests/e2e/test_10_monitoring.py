"""The chart's alert rules and dashboards against a real Prometheus pod on kind.

A replicated store, ``metered`` (3 node pods, replicationFactor 3), in its own namespace with
a Prometheus pod that discovers the node pods by their prometheus.io/* annotations
(prometheus_pod.py). While a client pod produces and two consumer groups commit (one caught
up, one that stays at offset 1), every expression of every dashboard panel and every selector
of every rule returns a series through Prometheus' HTTP API, and the lag alert fires for the
lagging group. Then a node pod is killed and kept from coming back (its worker cordoned: its
volume lives there): the under-replicated alert fires; once the worker takes pods again the
pod returns, catches up, and the alert resolves. The rules are the chart's file with the
loopback test's short `for:` and windows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Shop, client_pod_manifest
from fixtures_kind import NODE_IMAGE, TIMINGS, KindCluster
from prometheus_pod import network_peer, prometheus_pod

from tests.integration.observability.load import (
    CAUGHT_UP_GROUP,
    LAGGING_GROUP,
    PARTITIONS,
    TOPIC,
)

STORE = "metered"
CLIENT = "metered-client"
STOP_FILE = "/tmp/monitoring-load-stop"
UNDER_REPLICATED = "MsgstoreUnderReplicatedLogs"


def _manifest(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "msgstore.io/v1alpha1",
        "kind": "MessageStore",
        "metadata": {"name": STORE, "namespace": namespace},
        "spec": {
            "replicas": 3,
            "replicationFactor": 3,
            "minInSync": 2,
            "image": NODE_IMAGE,
            "storage": {"size": "1Gi"},
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
            "flush": {"mode": "sync"},
            "topics": [{"name": TOPIC, "partitions": PARTITIONS}],
            "networkPolicy": {"ingressFrom": [network_peer(namespace)]},
        },
    }


@pytest.fixture(scope="module")
def metered(kind_cluster: KindCluster, operator_release: str) -> Iterator[Shop]:
    """The replicated store and a client pod in a namespace of their own (Pod Security
    `restricted` enforced, as in the sample store's)."""
    namespace = kind_cluster.new_namespace("metered")
    kind_cluster.run_kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    store = Shop(kind_cluster, namespace, STORE, client=CLIENT)
    started = time.monotonic()
    store.kubectl("apply", "-f", "-", input=json.dumps(_manifest(namespace)))
    store.wait_credentials()
    pod = client_pod_manifest(namespace, STORE, name=CLIENT)
    store.kubectl("apply", "-f", "-", input=json.dumps(pod))
    store.kubectl("wait", "--for=condition=Ready", f"pod/{CLIENT}", "--timeout=180s", timeout=200)
    store.wait_store_ready(3)
    TIMINGS["monitored store applied to Ready"] = round(time.monotonic() - started, 1)
    yield store
    kind_cluster.run_kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _cordoned_kill(store: Shop) -> tuple[str, str]:
    """Kills a node pod (no grace) on a worker that takes no new pods: the StatefulSet's
    replacement stays Pending, since the pod's volume is on that worker. Returns the pod's
    name and its worker."""
    pod = store.node_pods()[-1]
    name, worker = pod["metadata"]["name"], pod["spec"]["nodeName"]
    store.cluster.run_kubectl("cordon", worker)
    store.kubectl("delete", "pod", name, "--grace-period=0", "--force", "--wait=false")
    return name, worker


def test_prometheus_on_kind_answers_every_panel_and_rule_and_fires_the_alerts(
    kind_cluster: KindCluster, metered: Shop, prometheus_bin_dir: Path
) -> None:
    load = ["--topic", TOPIC, "--seconds", "1200", "--stop-file", STOP_FILE]
    producer = metered.start_workload(
        "produce", *load, "--run", "metered", "--batch", "5", "--pause-ms", "200"
    )
    groups = metered.start_workload(
        "groups", *load, "--caught-up", CAUGHT_UP_GROUP, "--lagging", LAGGING_GROUP
    )
    worker = ""
    try:
        with prometheus_pod(kind_cluster, metered.namespace, prometheus_bin_dir) as prom:
            started = time.monotonic()
            prom.wait_for(
                lambda: len(prom.query('up{job="msgstore"} == 1')) == 3,
                "the 3 node pods discovered and scraped",
                180,
                interval=2,
            )
            prom.wait_every_query_answers()
            TIMINGS["prometheus pod: every panel and rule answered"] = round(
                time.monotonic() - started, 1
            )

            lag = prom.wait_for(
                lambda: prom.firing("MsgstoreConsumerLagGrowing"), "lag alert firing", 180, 2
            )
            assert LAGGING_GROUP in {a["group"] for a in lag}
            # every copy in sync before the kill (a follower slow on a loaded machine may
            # fall out of sync for a moment)
            prom.wait_for(
                lambda: not prom.firing(UNDER_REPLICATED), "all logs fully replicated", 180, 2
            )

            started = time.monotonic()
            victim, worker = _cordoned_kill(metered)
            under = prom.wait_for(
                lambda: prom.firing(UNDER_REPLICATED), f"{UNDER_REPLICATED} firing", 240, 2
            )
            assert under
            TIMINGS["node pod killed to under-replicated alert firing"] = round(
                time.monotonic() - started, 1
            )

            kind_cluster.run_kubectl("uncordon", worker)
            worker = ""
            started = time.monotonic()
            prom.wait_for(
                lambda: (
                    not prom.firing(UNDER_REPLICATED)
                    and len(prom.query('up{job="msgstore"} == 1')) == 3
                ),
                f"{UNDER_REPLICATED} resolved once {victim} is back and scraped",
                420,
                2,
            )
            TIMINGS["worker uncordoned to under-replicated alert resolved"] = round(
                time.monotonic() - started, 1
            )
    finally:
        if worker:
            kind_cluster.run_kubectl("uncordon", worker, check=False)
        metered.kubectl("exec", CLIENT, "--", "touch", STOP_FILE, check=False)
        # read after the test's own outcome: a failed load does not hide it
        answers = [proc.communicate(timeout=600) for proc in (producer, groups)]
    for proc, (out, err) in zip((producer, groups), answers, strict=True):
        assert proc.returncode == 0, f"workload failed ({proc.returncode}):\n{out}\n{err}"
    produced, consumed = (json.loads(out.strip().splitlines()[-1]) for out, _ in answers)
    assert produced["acked"], produced["errors"]
    assert consumed["rounds"] > 0 and consumed["lagging_partitions"] == list(range(PARTITIONS))
