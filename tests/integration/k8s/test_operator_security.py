"""Secure by default against a real API server: Pod Security admission at "restricted", TLS
material issued by the operator, the NetworkPolicy, and a status that names failures the
StatefulSet controller and the volume binder report (FailedCreate from admission and from a
ResourceQuota, a claim Pending on a missing StorageClass).

kwok stands in for the kubelet (no container runs), so HTTPS itself is tested with real node
processes in tests/integration/node/test_tls.py; here the admission plugin, controllers and the operator
are real.
"""

from __future__ import annotations

import base64
import datetime
import json

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store
from operator_support import (
    OperatorProcess,
    apply_json,
    condition,
    create_volumes,
    delete_volumes,
    install_crd,
    remove_crd,
    store_manifest,
    wait_for,
    wait_ready,
)

RESTRICTED = "pod-security.kubernetes.io/enforce=restricted"


def restricted_namespace(cluster, prefix):
    ns = cluster.new_namespace(prefix)
    cluster.run_kubectl("label", "namespace", ns, RESTRICTED, "--overwrite")
    return ns


@pytest.fixture(scope="module")
def crd(k8s_cluster):
    install_crd(k8s_cluster)
    yield
    remove_crd(k8s_cluster)


@pytest.fixture(scope="module")
def ns(k8s_cluster, crd):
    namespace = restricted_namespace(k8s_cluster, "sec")
    yield namespace
    k8s_cluster.run_kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    delete_volumes(k8s_cluster, namespace)


@pytest.fixture(scope="module")
def operator(k8s_cluster, ns, tmp_path_factory):
    proc = OperatorProcess(k8s_cluster, ns, tmp_path_factory.mktemp("op-sec") / "kopf.log")
    proc.start()
    yield proc
    proc.stop()
    print(f"--- operator log (tail) ---\n{proc.log_tail(150)}")


def get(cluster, ns, *what):
    return cluster.get_json(*what, "-n", ns)


def store_events(cluster, ns, name):
    items = cluster.get_json(
        "events",
        "-n",
        ns,
        "--field-selector",
        f"involvedObject.kind=MessageStore,involvedObject.name={name}",
    )["items"]
    return [(e["type"], e["reason"], e["message"]) for e in items]


def degraded_with(cluster, ns, name, reason):
    def check():
        ms = get(cluster, ns, "ms", name)
        cond = condition(ms, "Degraded")
        return ms if cond.get("status") == "True" and cond.get("reason") == reason else None

    return check


def test_default_store_runs_in_a_restricted_namespace_with_tls_and_a_policy(
    k8s_cluster, ns, operator
):
    create_volumes(k8s_cluster, ns, "safe", 3)
    apply_json(k8s_cluster, ns, store_manifest("safe"))
    ms = wait_ready(k8s_cluster, ns, "safe", 3)
    status = ms["status"]
    assert status["endpoints"]["service"].startswith("https://")
    assert all(a.startswith("https://") for a in status["endpoints"]["nodes"])
    assert status["security"] == {
        "tls": True,
        "caConfigMap": "safe-ca",
        "networkPolicy": True,
        "clientLabel": "msgstore.io/client=safe",
    }
    pods = get(k8s_cluster, ns, "pods", "-l", "app.kubernetes.io/instance=safe")["items"]
    assert len(pods) == 3  # admitted by PodSecurity "restricted"

    ca_pem = get(k8s_cluster, ns, "configmap", "safe-ca")["data"]["ca.crt"].encode()
    ca_secret = get(k8s_cluster, ns, "secret", "safe-ca")
    assert base64.b64decode(ca_secret["data"]["ca.crt"]) == ca_pem
    certs = get(k8s_cluster, ns, "secret", "safe-node-certs")["data"]
    assert set(certs) == {f"safe-{i}.{ext}" for i in range(3) for ext in ("crt", "key")}
    store = Store([x509.load_pem_x509_certificate(ca_pem)])
    now = datetime.datetime.now(datetime.UTC)
    for i in range(3):
        name = f"safe-{i}.safe-nodes.{ns}.svc.cluster.local"
        verifier = PolicyBuilder().store(store).time(now).build_server_verifier(x509.DNSName(name))
        verifier.verify(
            x509.load_pem_x509_certificate(base64.b64decode(certs[f"safe-{i}.crt"])), []
        )

    policy = get(k8s_cluster, ns, "networkpolicy", "safe-nodes")
    peers = policy["spec"]["ingress"][0]["from"]
    assert {"podSelector": {"matchLabels": {"msgstore.io/client": "safe"}}} in peers
    reasons = {reason for _, reason, _ in store_events(k8s_cluster, ns, "safe")}
    assert {"CACreated", "CertificatesIssued"} <= reasons

    # Certificates are renewed only when due: a repeated pass changes nothing.
    before = get(k8s_cluster, ns, "secret", "safe-node-certs")["metadata"]["resourceVersion"]
    wait_for(lambda: operator.count(r"status refreshed") >= 3, "a few status passes")
    after = get(k8s_cluster, ns, "secret", "safe-node-certs")["metadata"]["resourceVersion"]
    assert before == after


def test_pods_refused_by_a_resource_quota_turn_the_store_degraded(k8s_cluster, ns, operator):
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-more-pods"},
        "spec": {"hard": {"pods": "3"}},  # the 3 pods of "safe" use it up
    }
    apply_json(k8s_cluster, ns, quota)
    create_volumes(k8s_cluster, ns, "capped", 2)
    apply_json(k8s_cluster, ns, store_manifest("capped", replicas=2))
    ms = wait_for(
        degraded_with(k8s_cluster, ns, "capped", "FailedCreate"), "Degraded FailedCreate (quota)"
    )
    message = condition(ms, "Degraded")["message"]
    assert "StatefulSet capped: FailedCreate" in message and "exceeded quota" in message, message
    assert ms["status"]["phase"] == "Degraded"
    warnings = [e for e in store_events(k8s_cluster, ns, "capped") if e[1] == "FailedCreate"]
    assert warnings and warnings[0][0] == "Warning" and "exceeded quota" in warnings[0][2]
    # The cause goes away: pods are created and the store recovers.
    k8s_cluster.run_kubectl("delete", "resourcequota", "no-more-pods", "-n", ns)
    ms = wait_ready(k8s_cluster, ns, "capped", 2, timeout=300)
    assert condition(ms, "Degraded")["status"] == "False"


@pytest.fixture(scope="module")
def lax_ns(k8s_cluster, crd):
    namespace = restricted_namespace(k8s_cluster, "lax")
    yield namespace
    k8s_cluster.run_kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    delete_volumes(k8s_cluster, namespace)


@pytest.fixture(scope="module")
def lax_operator(k8s_cluster, lax_ns, tmp_path_factory):
    """An operator told not to make node pods restricted (the chart's podSecurity.restricted
    false), with a short grace for pending claims."""
    proc = OperatorProcess(
        k8s_cluster,
        lax_ns,
        tmp_path_factory.mktemp("op-lax") / "kopf.log",
        {"MSGSTORE_OPERATOR_RESTRICTED_PODS": "false", "MSGSTORE_OPERATOR_CLAIM_GRACE_S": "3"},
    )
    proc.start()
    yield proc
    proc.stop()
    print(f"--- operator log (tail) ---\n{proc.log_tail(150)}")


def test_pods_refused_by_pod_security_are_named(k8s_cluster, lax_ns, lax_operator):
    """The failure of the first real run: no longer hidden behind Progressing."""
    create_volumes(k8s_cluster, lax_ns, "rooty", 1)
    apply_json(k8s_cluster, lax_ns, store_manifest("rooty", replicas=1))
    ms = wait_for(
        degraded_with(k8s_cluster, lax_ns, "rooty", "FailedCreate"),
        "Degraded FailedCreate (PodSecurity)",
    )
    message = condition(ms, "Degraded")["message"]
    assert "violates PodSecurity" in message and "restricted" in message, message
    assert "allowPrivilegeEscalation != false" in message, message


def test_claim_pending_on_a_missing_storage_class_is_named(k8s_cluster, lax_ns, lax_operator):
    # Pod Security is not the point here: let the pods in, the claim is what fails.
    k8s_cluster.run_kubectl(
        "label", "namespace", lax_ns, "pod-security.kubernetes.io/enforce=privileged", "--overwrite"
    )
    manifest = store_manifest(
        "nostorage", replicas=1, storage={"size": "1Gi", "storageClassName": "does-not-exist"}
    )
    apply_json(k8s_cluster, lax_ns, manifest)

    def claim_named():
        ms = get(k8s_cluster, lax_ns, "ms", "nostorage")
        message = condition(ms, "Degraded").get("message", "")
        return ms if "PersistentVolumeClaim data-nostorage-0: ClaimPending" in message else None

    ms = wait_for(claim_named, "Degraded naming the pending claim", timeout=120)
    message = condition(ms, "Degraded")["message"]
    assert "StorageClass 'does-not-exist'" in message, message
    print(json.dumps(ms["status"], indent=1))
