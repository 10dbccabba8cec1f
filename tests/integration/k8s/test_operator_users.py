"""MessageStoreUser against a real API server: the CRD's CEL rules refuse bad ACLs with a
clear message, and the operator (a real `kopf run`) issues each user's Secret and keeps the
store's access document equal to its users: a change is generation + 1, a deletion revokes.

kwok stands in for the kubelet (no node process runs), so the nodes' enforcement is tested
with real node processes elsewhere; here the document is checked with the node's own
Authorizer reading the bytes the operator wrote.
"""

from __future__ import annotations

import base64
import json

import pytest
from cluster_tools import KubectlError
from cryptography import x509
from operator_support import (
    REPO,
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

from storage_node import tls
from storage_node.access.access_file import AccessFile
from storage_node.access.authorizer import Authorizer
from storage_node.access.document import Operation, ResourceType, parse_access

STORE = "shop"


@pytest.fixture(scope="module")
def crd(k8s_cluster):
    install_crd(k8s_cluster)
    yield
    remove_crd(k8s_cluster)


@pytest.fixture(scope="module")
def ns(k8s_cluster, crd):
    namespace = k8s_cluster.new_namespace("users")
    yield namespace
    k8s_cluster.run_kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    delete_volumes(k8s_cluster, namespace)


@pytest.fixture(scope="module")
def operator(k8s_cluster, ns, tmp_path_factory):
    proc = OperatorProcess(k8s_cluster, ns, tmp_path_factory.mktemp("op-users") / "kopf.log")
    proc.start()
    yield proc
    proc.stop()
    print(f"--- operator log (tail) ---\n{proc.log_tail(150)}")


@pytest.fixture(scope="module")
def store(k8s_cluster, ns, operator):
    create_volumes(k8s_cluster, ns, STORE, 2)
    apply_json(k8s_cluster, ns, store_manifest(STORE, replicas=2))
    wait_ready(k8s_cluster, ns, STORE, 2)
    return STORE


def user_manifest(name, acls, kind="token", store=STORE, annotations=None):
    meta = {"name": name, **({"annotations": annotations} if annotations else {})}
    return {
        "apiVersion": "msgstore.io/v1alpha1",
        "kind": "MessageStoreUser",
        "metadata": meta,
        "spec": {"store": store, "authentication": {"type": kind}, "acls": acls},
    }


def rule(op, name, kind="topic", pattern="literal"):
    return {"operation": op, "resource": {"type": kind, "name": name, "patternType": pattern}}


def get(cluster, ns, *what):
    return cluster.get_json(*what, "-n", ns)


def secret_data(cluster, ns, name):
    got = cluster.run_kubectl("get", "secret", name, "-n", ns, "-o", "json", check=False)
    if got.returncode != 0:
        return None
    return {k: base64.b64decode(v) for k, v in json.loads(got.stdout)["data"].items()}


def access_doc(cluster, ns):
    data = secret_data(cluster, ns, f"{STORE}-access")
    return parse_access(json.loads(data["access.json"])) if data else None


def ready_user(cluster, ns, name):
    def check():
        msu = get(cluster, ns, "msu", name)
        ok = condition(msu, "Ready").get("status") == "True" and (
            msu["status"].get("observedGeneration") == msu["metadata"]["generation"]
        )
        return msu if ok else None

    return wait_for(check, f"MessageStoreUser {name} Ready")


def authorizer_for(cluster, ns, tmp_path):
    path = tmp_path / "access.json"
    path.write_bytes(secret_data(cluster, ns, f"{STORE}-access")["access.json"])
    return Authorizer("super-token", "", AccessFile(path, check_interval_s=0))


@pytest.mark.parametrize(
    ("acl", "message"),
    [
        (rule("read", "orders eu"), "resource.name must be 1-249 letters, digits"),
        (rule("write", "billing", "group"), "a group rule allows only read, describe or delete"),
        (rule("read", "..", "topic"), "a literal resource cannot be named '.' or '..'"),
        (rule("read", "", pattern="prefix"), "resource.name must be 1-249 letters"),
        ({"operation": "rm", "resource": {"type": "topic", "name": "a"}}, "Unsupported value"),
    ],
)
def test_the_api_server_refuses_a_bad_rule_with_a_clear_message(k8s_cluster, ns, acl, message):
    with pytest.raises(KubectlError) as err:
        apply_json(k8s_cluster, ns, user_manifest("bad", [acl]))
    assert message in str(err.value)
    got = k8s_cluster.run_kubectl("get", "msu", "bad", "-n", ns, check=False)
    assert got.returncode != 0 and "NotFound" in got.stderr  # nothing was stored


def test_the_api_server_refuses_too_many_rules_and_long_tls_names(k8s_cluster, ns):
    many = [rule("read", f"t{i}") for i in range(129)]
    with pytest.raises(KubectlError, match="must have at most 128 items"):
        apply_json(k8s_cluster, ns, user_manifest("many", many))
    with pytest.raises(KubectlError, match="a tls user's name must be at most 64 characters"):
        apply_json(k8s_cluster, ns, user_manifest("x" * 65, [], kind="tls"))


def test_the_example_users_are_accepted(k8s_cluster, ns):
    example = REPO / "examples" / "messagestoreuser.yaml"
    out = k8s_cluster.run_kubectl("apply", "--dry-run=server", "-n", ns, "-f", str(example))
    assert out.stdout.count("(server dry run)") == 3


def test_a_user_of_a_missing_store_says_so_and_gets_no_secret(k8s_cluster, ns, operator):
    apply_json(k8s_cluster, ns, user_manifest("lost", [rule("read", "a")], store="nowhere"))

    def reported():
        cond = condition(get(k8s_cluster, ns, "msu", "lost"), "Ready")
        return cond if cond.get("reason") == "StoreNotFound" else None

    cond = wait_for(reported, "status StoreNotFound")
    assert cond["status"] == "False"
    assert "MessageStore nowhere does not exist" in cond["message"]
    assert secret_data(k8s_cluster, ns, "lost") is None
    with pytest.raises(KubectlError, match="store is immutable"):
        apply_json(k8s_cluster, ns, user_manifest("lost", [], store=STORE))
    k8s_cluster.run_kubectl("delete", "msu", "lost", "-n", ns)


def test_a_user_gets_its_secret_and_its_rules_reach_the_access_document(
    k8s_cluster, ns, store, tmp_path
):
    apply_json(
        k8s_cluster,
        ns,
        user_manifest("orders-app", [rule("write", "orders-", pattern="prefix")]),
    )
    msu = ready_user(k8s_cluster, ns, "orders-app")
    assert msu["status"]["secret"] == "orders-app"
    data = secret_data(k8s_cluster, ns, "orders-app")
    ca_pem = get(k8s_cluster, ns, "configmap", f"{STORE}-ca")["data"]["ca.crt"].encode()
    assert set(data) == {"token", "ca.crt"} and data["ca.crt"] == ca_pem
    token = data["token"].decode()
    doc = access_doc(k8s_cluster, ns)
    assert doc.generation == msu["status"]["accessGeneration"]
    auth = authorizer_for(k8s_cluster, ns, tmp_path)
    who = auth.authenticate(token)
    assert who is not None and who.name == "orders-app"
    assert auth.allows(who, Operation.WRITE, ResourceType.TOPIC, "orders-eu")
    assert not auth.allows(who, Operation.WRITE, ResourceType.TOPIC, "payments")
    # printer columns
    table = k8s_cluster.run_kubectl("get", "msu", "orders-app", "-n", ns).stdout
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "STORE", "AUTHENTICATION", "READY", "SECRET", "AGE"]
    assert row.split()[:5] == ["orders-app", STORE, "token", "True", "orders-app"]
    # the node pods were told to refresh the mounted document, and mount it
    pods = get(k8s_cluster, ns, "pods", "-l", f"app.kubernetes.io/instance={STORE}")["items"]
    assert pods and all(
        int(p["metadata"]["annotations"]["msgstore.io/access-generation"]) >= doc.generation
        for p in pods
    )
    volumes = {v["name"]: v for v in pods[0]["spec"]["volumes"]}
    assert volumes["access"]["secret"]["secretName"] == f"{STORE}-access"
    config = get(k8s_cluster, ns, "configmap", f"{STORE}-config")["data"]
    assert config["MSGSTORE_ACCESS_FILE"] == "/etc/msgstore/access/access.json"
    assert config["MSGSTORE_ACCESS_MANAGED"] == "true"


def test_a_changed_rule_is_a_new_generation_and_the_token_stays(k8s_cluster, ns, store):
    before = access_doc(k8s_cluster, ns)
    token = secret_data(k8s_cluster, ns, "orders-app")["token"]
    acls = [rule("write", "orders-", pattern="prefix"), rule("read", "orders-eu")]
    apply_json(k8s_cluster, ns, user_manifest("orders-app", acls))
    doc = wait_for(
        lambda: (d := access_doc(k8s_cluster, ns)) and len(d.rules_of("orders-app")) == 2 and d,
        "the new rule in the access document",
    )
    assert doc.generation == before.generation + 1
    assert secret_data(k8s_cluster, ns, "orders-app")["token"] == token
    msu = ready_user(k8s_cluster, ns, "orders-app")
    wait_for(
        lambda: (
            get(k8s_cluster, ns, "msu", "orders-app")["status"]["accessGeneration"]
            == doc.generation
        ),
        "the user's status naming the new generation",
    )
    assert msu["status"]["observedGeneration"] == msu["metadata"]["generation"]


def test_rotation_replaces_the_token_and_the_old_one_stops_working(
    k8s_cluster, ns, store, tmp_path
):
    old = secret_data(k8s_cluster, ns, "orders-app")["token"].decode()
    k8s_cluster.run_kubectl(
        "annotate", "msu", "orders-app", "-n", ns, "msgstore.io/rotate-token=1", "--overwrite"
    )
    new = wait_for(
        lambda: (t := secret_data(k8s_cluster, ns, "orders-app")["token"].decode()) != old and t,
        "a new token",
    )
    wait_for(
        lambda: authorizer_for(k8s_cluster, ns, tmp_path).authenticate(new) is not None,
        "the new token in the access document",
    )
    assert authorizer_for(k8s_cluster, ns, tmp_path).authenticate(old) is None


def test_a_tls_user_gets_a_certificate_of_the_stores_ca(k8s_cluster, ns, store, tmp_path):
    apply_json(k8s_cluster, ns, user_manifest("edge", [rule("read", "edge")], kind="tls"))
    ready_user(k8s_cluster, ns, "edge")
    data = secret_data(k8s_cluster, ns, "edge")
    assert set(data) == {"tls.crt", "tls.key", "ca.crt"}
    tls.verify_issued_by(data["tls.crt"], data["ca.crt"])
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    assert cert.subject.rfc4514_string() == "CN=edge"
    auth = authorizer_for(k8s_cluster, ns, tmp_path)
    who = auth.authenticate_subject("CN=edge")
    assert who is not None and auth.allows(who, Operation.READ, ResourceType.TOPIC, "edge")


def test_a_secret_of_someone_else_is_never_taken_over(k8s_cluster, ns, store):
    k8s_cluster.run_kubectl(
        "create", "secret", "generic", "taken", "-n", ns, "--from-literal=token=theirs"
    )
    apply_json(k8s_cluster, ns, user_manifest("taken", [rule("read", "a")]))

    def reported():
        cond = condition(get(k8s_cluster, ns, "msu", "taken"), "Ready")
        return cond if cond.get("reason") == "SecretConflict" else None

    assert "does not belong to this user" in wait_for(reported, "SecretConflict")["message"]
    assert secret_data(k8s_cluster, ns, "taken") == {"token": b"theirs"}
    assert access_doc(k8s_cluster, ns).user("taken") is None
    k8s_cluster.run_kubectl("delete", "msu", "taken", "-n", ns)


def test_deleting_a_user_revokes_it(k8s_cluster, ns, store, tmp_path):
    token = secret_data(k8s_cluster, ns, "orders-app")["token"].decode()
    before = access_doc(k8s_cluster, ns).generation
    k8s_cluster.run_kubectl("delete", "msu", "orders-app", "-n", ns)
    doc = wait_for(
        lambda: (d := access_doc(k8s_cluster, ns)) and d.user("orders-app") is None and d,
        "orders-app gone from the access document",
    )
    assert doc.generation > before and not doc.rules_of("orders-app")
    assert authorizer_for(k8s_cluster, ns, tmp_path).authenticate(token) is None
    assert doc.user("edge") is not None  # the other users stay
    # its Secret goes with it (owner reference, garbage collector)
    wait_for(lambda: secret_data(k8s_cluster, ns, "orders-app") is None, "the Secret deleted")


def test_a_user_deleted_while_the_operator_is_down_is_revoked_when_it_returns(
    k8s_cluster, ns, store, operator
):
    assert access_doc(k8s_cluster, ns).user("edge") is not None
    operator.stop()
    try:
        k8s_cluster.run_kubectl("delete", "msu", "edge", "-n", ns)  # no finalizer to wait on
        assert access_doc(k8s_cluster, ns).user("edge") is not None  # nobody revoked it yet
    finally:
        operator.start()
    wait_for(
        lambda: access_doc(k8s_cluster, ns).user("edge") is None,
        "edge gone from the access document after the operator's return",
    )
