"""The store's web console as the operator renders it (``spec.console``): off by default
(and then removed), a Deployment running ``msgstore console`` against the client Service
with the CA and the store's token, Pod Security "restricted", labelled as a client of the
store so its NetworkPolicy lets it in, and a ClusterIP or NodePort Service."""

from __future__ import annotations

from msgstore_operator.children import Owner
from msgstore_operator.children.console import build_console_deployment, build_console_service
from msgstore_operator.children.desired import ChildRef, desired_children
from msgstore_operator.children.network import build_network_policy
from msgstore_operator.pod_security import restricted_violations
from msgstore_operator.spec import parse_spec

OWNER = Owner(name="demo", namespace="ns1", uid="uid-123")
ENDPOINT = "https://demo.ns1.svc.cluster.local:8080"


def kinds(state) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in state.objects}


def test_the_console_is_off_by_default_and_removed_when_off():
    state = desired_children(OWNER, parse_spec({}), 3, "{}", "cluster.local")
    assert ("Deployment", "demo-console") not in kinds(state)
    assert ChildRef("apps/v1", "Deployment", "demo-console") in state.absent
    assert ChildRef("v1", "Service", "demo-console") in state.absent


def test_an_enabled_console_is_a_restricted_client_of_the_store():
    spec = parse_spec({"console": {"enabled": True}})
    objects = kinds(desired_children(OWNER, spec, 3, "{}", "cluster.local"))
    deployment = objects[("Deployment", "demo-console")]
    service = objects[("Service", "demo-console")]
    pod = deployment["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    args = container["args"]
    assert args[:3] == ["console", "--endpoint", ENDPOINT]
    assert "--ca" in args and "--admin" not in args  # TLS by default; admin is opt-in
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    token = container["env"][0]
    assert token["name"] == "MSGSTORE_CONSOLE_TOKEN"  # from the Secret, never in args
    assert token["valueFrom"]["secretKeyRef"]["name"] == "demo-token"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    policy = build_network_policy(OWNER, spec)
    allowed = [p["podSelector"]["matchLabels"] for p in policy["spec"]["ingress"][0]["from"]]
    assert any(all(labels.get(k) == v for k, v in sel.items()) for sel in allowed)
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"


def test_console_options_admin_nodeport_no_tls_no_auth():
    raw = {
        "console": {"enabled": True, "admin": True, "nodePort": 30080},
        "tls": {"enabled": False},
        "auth": {"enabled": False},
    }
    spec = parse_spec(raw)
    pod = build_console_deployment(OWNER, spec, "http://demo:8080", None)["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert "--admin" in container["args"] and "--ca" not in container["args"]
    assert container["env"] == []
    assert restricted_violations(pod["spec"]) == []
    service = build_console_service(OWNER, spec)
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["ports"][0]["nodePort"] == 30080
