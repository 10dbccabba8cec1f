"""A bad operator setting stops the operator at start-up, naming the variable, before it
touches anything in the cluster."""

from __future__ import annotations

import pytest
from operator_support import (
    OperatorProcess,
    apply_json,
    install_crd,
    remove_crd,
    store_manifest,
)


@pytest.fixture(scope="module")
def ns(k8s_cluster):
    install_crd(k8s_cluster)
    namespace = k8s_cluster.new_namespace("opset")
    yield namespace
    k8s_cluster.run_kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    remove_crd(k8s_cluster)


@pytest.mark.parametrize(
    "name, value",
    [("MSGSTORE_OPERATOR_INTERVAL_S", "fast"), ("MSGSTORE_OPERATOR_TLS", "maybe")],
)
def test_a_bad_setting_stops_the_operator(k8s_cluster, ns, tmp_path, name, value):
    apply_json(k8s_cluster, ns, store_manifest("idle", replicas=1))
    proc = OperatorProcess(k8s_cluster, ns, tmp_path / "kopf.log", {name: value})
    proc.launch()
    assert proc.proc is not None
    try:
        code = proc.proc.wait(timeout=90)
    finally:
        proc.stop()
    log = proc.log_text()
    assert code != 0, log
    assert f"bad operator setting: {name}={value!r}" in log, log
    body = k8s_cluster.get_json("messagestore", "idle", "-n", ns)
    assert not body.get("status"), body["status"]
    assert k8s_cluster.get_json("statefulsets", "-n", ns)["items"] == []
