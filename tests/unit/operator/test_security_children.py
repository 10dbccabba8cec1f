"""TLS children (own CA, node certificates, cert-manager), the NetworkPolicy, the defaults."""

from __future__ import annotations

import base64
import datetime

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store
from msgstore_operator import naming
from msgstore_operator.children import Owner, build_statefulset, desired_children
from msgstore_operator.children import tls as tls_children
from msgstore_operator.children.network import build_network_policy
from msgstore_operator.spec import SecurityDefaults, parse_spec

from storage_node import tls

OWNER = Owner(name="demo", namespace="ns1", uid="uid-123")
NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


@pytest.fixture(scope="module")
def ca():
    return tls_children.new_store_ca(OWNER, NOW - DAY)


def cert_of(data, pod):
    return base64.b64decode(data[f"{pod}.crt"])


def test_ca_secret_and_config_map(ca):
    secret = tls_children.build_ca_secret(OWNER, ca)
    assert secret["metadata"]["name"] == "demo-ca" and secret["type"] == "Opaque"
    assert tls_children.ca_from_secret(secret) == ca
    assert tls_children.ca_from_secret({"data": {"ca.crt": "eA=="}}) is None
    cm = tls_children.build_ca_config_map(OWNER, ca.cert_pem)
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "demo-ca"
    assert cm["data"] == {"ca.crt": ca.cert_pem.decode()}  # no key for clients
    assert tls.cert_info(ca.cert_pem).subject_cn == "msgstore ns1/demo CA"


def test_node_certificates_are_issued_per_node_and_verify_for_their_names(ca):
    spec = parse_spec({"tls": {"certificateValidityDays": 30}})
    plan = tls_children.plan_node_certs(OWNER, spec, 3, "cluster.local", ca, {}, NOW)
    assert [pod for pod, _ in plan.issued] == ["demo-0", "demo-1", "demo-2"]
    assert set(plan.data) == {f"demo-{i}.{ext}" for i in range(3) for ext in ("crt", "key")}
    store = Store([x509.load_pem_x509_certificate(ca.cert_pem)])
    for i in range(3):
        pem = cert_of(plan.data, f"demo-{i}")
        info = tls.cert_info(pem)
        assert info.not_after == NOW + 30 * DAY
        for name in (
            f"demo-{i}.demo-nodes.ns1.svc.cluster.local",
            "demo.ns1.svc.cluster.local",
            "demo.ns1.svc",
            "localhost",
        ):
            verifier = (
                PolicyBuilder().store(store).time(NOW).build_server_verifier(x509.DNSName(name))
            )
            verifier.verify(x509.load_pem_x509_certificate(pem), [])
        other = f"demo-{(i + 1) % 3}.demo-nodes.ns1.svc.cluster.local"
        assert other not in info.dns_names  # one node cannot pose as another
    secret = tls_children.build_node_certs_secret(OWNER, plan.data)
    assert secret["metadata"]["name"] == "demo-node-certs"


def test_good_certificates_are_kept_due_ones_renewed(ca):
    spec = parse_spec({"tls": {"certificateValidityDays": 90}})
    first = tls_children.plan_node_certs(OWNER, spec, 2, "cluster.local", ca, {}, NOW)
    again = tls_children.plan_node_certs(OWNER, spec, 2, "cluster.local", ca, first.data, NOW)
    assert not again.changed and again.data == first.data
    later = NOW + 59 * DAY
    assert not tls_children.plan_node_certs(
        OWNER, spec, 2, "cluster.local", ca, first.data, later
    ).changed
    due = NOW + 61 * DAY  # two thirds of 90 days
    renewed = tls_children.plan_node_certs(OWNER, spec, 2, "cluster.local", ca, first.data, due)
    assert [pod for pod, _ in renewed.issued] == ["demo-0", "demo-1"]
    assert all("renewal due" in why for _, why in renewed.issued)
    assert cert_of(renewed.data, "demo-0") != cert_of(first.data, "demo-0")
    tls.verify_issued_by(cert_of(renewed.data, "demo-0"), ca.cert_pem, due)


def test_scaling_adds_and_drops_entries_and_a_new_ca_reissues(ca):
    spec = parse_spec({})
    two = tls_children.plan_node_certs(OWNER, spec, 2, "cluster.local", ca, {}, NOW)
    three = tls_children.plan_node_certs(OWNER, spec, 3, "cluster.local", ca, two.data, NOW)
    assert three.issued == [("demo-2", "no certificate yet")]
    back = tls_children.plan_node_certs(OWNER, spec, 2, "cluster.local", ca, three.data, NOW)
    assert back.issued == [("demo-2", "removed")] and back.data == two.data
    new_ca = tls_children.new_store_ca(OWNER, NOW)
    moved = tls_children.plan_node_certs(OWNER, spec, 2, "cluster.local", new_ca, two.data, NOW)
    assert all("not issued by CA" in why for _, why in moved.issued) and len(moved.issued) == 2
    other_domain = tls_children.plan_node_certs(OWNER, spec, 2, "k8s.example", ca, two.data, NOW)
    assert [why for _, why in other_domain.issued] == ["its names changed"] * 2


def test_cert_manager_certificate():
    spec = parse_spec(
        {
            "tls": {
                "issuerRef": {"name": "corp", "kind": "ClusterIssuer"},
                "certificateValidityDays": 30,
            }
        }
    )
    cert = tls_children.build_certificate(OWNER, spec, 2, "cluster.local")
    assert cert["apiVersion"] == "cert-manager.io/v1" and cert["metadata"]["name"] == "demo-nodes"
    s = cert["spec"]
    assert s["secretName"] == "demo-nodes-tls"
    assert s["issuerRef"] == {"name": "corp", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert "*.demo-nodes.ns1.svc.cluster.local" in s["dnsNames"]
    assert (
        "demo-1.demo-nodes.ns1.svc.cluster.local" in s["dnsNames"] and "localhost" in s["dnsNames"]
    )
    assert len(s["dnsNames"]) == len(set(s["dnsNames"]))
    assert s["duration"] == "720h" and s["renewBefore"] == "240h"
    assert s["subject"] == {"organizationalUnits": [tls.NODE_UNIT]}  # a node's, to peers
    env = {
        e["name"]: e.get("value")
        for e in build_statefulset(OWNER, spec, 2, "h", None)["spec"]["template"]["spec"][
            "containers"
        ][0]["env"]
    }
    assert env["MSGSTORE_TLS_CERT"] == "/etc/msgstore/tls/tls.crt"
    assert env["MSGSTORE_PEER_MTLS"] == "true"
    pem = b"-----BEGIN CERTIFICATE-----\n"
    secret = {"data": {"ca.crt": base64.b64encode(pem).decode()}}
    assert tls_children.ca_from_certificate_secret(secret) == pem
    assert tls_children.ca_from_certificate_secret({"data": {}}) is None


def test_network_policy_lets_in_clients_nodes_operator_and_extra_peers():
    extra = {"namespaceSelector": {"matchLabels": {"team": "ingest"}}}
    spec = parse_spec({"port": 9000, "networkPolicy": {"ingressFrom": [extra]}})
    policy = build_network_policy(OWNER, spec, "msgstore-system")
    assert policy["metadata"]["name"] == "demo-nodes"
    s = policy["spec"]
    assert s["podSelector"]["matchLabels"] == naming.selector_labels("demo")
    assert s["policyTypes"] == ["Ingress"]
    (rule,) = s["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9000}, {"protocol": "TCP", "port": 9092}]
    peers = rule["from"]
    assert peers[0] == {"podSelector": {"matchLabels": {"msgstore.io/client": "demo"}}}
    assert peers[1] == {"podSelector": {"matchLabels": naming.selector_labels("demo")}}
    assert peers[2]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "msgstore-system"
    }
    assert peers[2]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    assert peers[3] == extra
    # No operator namespace known: no operator peer (and no namespace-wide hole).
    bare = build_network_policy(OWNER, parse_spec({}))["spec"]["ingress"][0]["from"]
    assert len(bare) == 2 and all("namespaceSelector" not in p for p in bare)


def test_operator_defaults_and_spec_overrides():
    off = SecurityDefaults(tls=False, network_policy=False, certificate_validity_days=10)
    spec = parse_spec({}, defaults=off)
    assert not spec.tls.enabled and not spec.network_policy.enabled
    assert spec.tls.certificate_validity_days == 10 and spec.scheme == "http"
    state = desired_children(OWNER, spec, 1, "{}", "cluster.local")
    assert "NetworkPolicy" not in {o["kind"] for o in state.objects}
    assert ("NetworkPolicy", "demo-nodes") in {(r.kind, r.name) for r in state.absent}
    on = parse_spec({"tls": {"enabled": True}, "networkPolicy": {"enabled": True}}, defaults=off)
    assert on.tls.enabled and on.network_policy.enabled and on.scheme == "https"
    pod = build_statefulset(OWNER, spec, 1, "h", None)["spec"]["template"]["spec"]
    probe = pod["containers"][0]["readinessProbe"]["httpGet"]
    assert probe["scheme"] == "HTTP"
    assert not any(v["name"] in ("tls", "ca") for v in pod["volumes"])


def test_the_node_accepts_the_tls_settings_the_operator_gives_it(tmp_path, ca):
    """The pod's TLS environment, expanded as the kubelet would, is accepted by the node."""
    from storage_node.server.settings import resolve_settings

    spec = parse_spec({})
    plan = tls_children.plan_node_certs(OWNER, spec, 2, "cluster.local", ca, {}, NOW)
    sts = build_statefulset(OWNER, spec, 2, "h", None)
    env = {
        e["name"]: e["value"]
        for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in e
    }
    for key, value in plan.data.items():
        (tmp_path / key).write_bytes(base64.b64decode(value))
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)

    def expand(text):
        text = text.replace("$(MSGSTORE_NODE_ID)", "demo-1")
        return text.replace(naming.TLS_DIR, str(tmp_path)).replace(naming.CA_DIR, str(tmp_path))

    settings = resolve_settings(
        env={
            "MSGSTORE_DATA_DIR": str(tmp_path / "data"),
            **{k: expand(v) for k, v in env.items() if k.startswith("MSGSTORE_")},
        }
    )
    assert settings.address == "https://demo-1.demo-nodes.ns1.svc.cluster.local:8080"
    assert settings.tls_cert.endswith("demo-1.crt") and settings.tls_key.endswith("demo-1.key")
    assert settings.mtls  # mTLS between nodes, with the CA bundle of the CA ConfigMap
    ctx = tls.ReloadingServerContext(settings.tls_cert, settings.tls_key, settings.tls_ca)
    assert ctx.serial == tls.cert_info(cert_of(plan.data, "demo-1")).serial
    assert [c.subject for c in ctx.trusted] == [ca.cert.subject]
    # every node certificate names a node (OU): the other nodes take it as a peer's
    for i in range(2):
        assert tls.cert_info(cert_of(plan.data, f"demo-{i}")).units == (tls.NODE_UNIT,)


def test_node_certificates_issued_before_mtls_are_reissued_once(ca):
    """A certificate without the node OU (issued by an older operator) is reissued, then
    kept."""
    spec = parse_spec({})
    names = naming.node_cert_names(OWNER.name, OWNER.namespace, 0, "cluster.local")
    old = tls.issue_cert(ca, "demo-0", names, now=NOW)
    current = {
        "demo-0.crt": base64.b64encode(old.cert_pem).decode(),
        "demo-0.key": base64.b64encode(old.key_pem).decode(),
    }
    plan = tls_children.plan_node_certs(OWNER, spec, 1, "cluster.local", ca, current, NOW)
    assert [(pod, why) for pod, why in plan.issued] == [
        ("demo-0", f"it does not name a {tls.NODE_UNIT} (OU)")
    ]
    again = tls_children.plan_node_certs(OWNER, spec, 1, "cluster.local", ca, plan.data, NOW)
    assert not again.changed
