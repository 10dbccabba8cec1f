"""The Kafka listener on Kubernetes as the operator renders it (docs/KAFKA.md, "Kubernetes"):
the port in the pods, both Services and the NetworkPolicy; each pod's advertised per-pod DNS
name; the external listener's container port, per-node NodePorts and routing entries; the
CRD fields that turn it off or move it."""

from __future__ import annotations

import json
from typing import Any

from msgstore_operator import naming
from msgstore_operator.children import (
    Owner,
    build_client_service,
    build_headless_service,
    build_statefulset,
    desired_children,
)
from msgstore_operator.children.network import build_network_policy
from msgstore_operator.routing import build_routing_document
from msgstore_operator.settings import node_settings
from msgstore_operator.spec import parse_spec

from storage_node.wire.routing_table import parse_routing

OWNER = Owner(name="shop", namespace="ns1", uid="uid-1")
EXTERNAL = {
    "enabled": True,
    "host": "203.0.113.7",
    "nodePortBase": 30081,
    "kafkaNodePortBase": 30092,
}


def _container(spec: Any) -> dict[str, Any]:
    sts = build_statefulset(OWNER, spec, 3, "h", None, "cluster.local")
    return sts["spec"]["template"]["spec"]["containers"][0]


def _ports(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in obj["spec"]["ports"]}


def test_the_listener_is_on_by_default_on_9092_advertising_the_per_pod_name():
    spec = parse_spec({})
    assert node_settings(spec)["MSGSTORE_KAFKA_PORT"] == "9092"
    assert "MSGSTORE_KAFKA_EXTERNAL_PORT" not in node_settings(spec)
    c = _container(spec)
    assert {"name": "kafka", "containerPort": 9092, "protocol": "TCP"} in c["ports"]
    assert all(p["name"] != "kafka-external" for p in c["ports"])
    env = {e["name"]: e.get("value") for e in c["env"]}
    # $(MSGSTORE_NODE_ID) is the pod name (the kubelet expands it): one name per pod
    assert env["MSGSTORE_KAFKA_ADVERTISE"] == (
        "$(MSGSTORE_NODE_ID).shop-nodes.ns1.svc.cluster.local:9092"
    )
    for service in (build_headless_service(OWNER, spec), build_client_service(OWNER, spec)):
        assert _ports(service)["kafka"] == {
            "name": "kafka", "port": 9092, "targetPort": "kafka", "protocol": "TCP",
        }  # fmt: skip


def test_the_routing_table_names_every_node_at_its_per_pod_kafka_address():
    spec = parse_spec({"replicas": 2})
    doc = build_routing_document("shop", "ns1", spec, 2, {}, 1, "cluster.local")
    table = parse_routing(json.loads(json.dumps(doc)))  # the nodes' own validator takes it
    assert [n.kafka_address for n in table.nodes] == [
        "shop-0.shop-nodes.ns1.svc.cluster.local:9092",
        "shop-1.shop-nodes.ns1.svc.cluster.local:9092",
    ]
    assert all(n.kafka_external_address is None for n in table.nodes)


def test_a_moved_port_moves_everywhere():
    spec = parse_spec({"kafka": {"port": 19092}, "networkPolicy": {"enabled": True}})
    assert node_settings(spec)["MSGSTORE_KAFKA_PORT"] == "19092"
    assert {"name": "kafka", "containerPort": 19092, "protocol": "TCP"} in _container(spec)["ports"]
    assert _ports(build_client_service(OWNER, spec))["kafka"]["port"] == 19092
    (rule,) = build_network_policy(OWNER, spec)["spec"]["ingress"]
    assert {"protocol": "TCP", "port": 19092} in rule["ports"]
    env = {e["name"]: e.get("value") for e in _container(spec)["env"]}
    assert env["MSGSTORE_KAFKA_ADVERTISE"].endswith(":19092")


def test_turned_off_there_is_no_kafka_port_anywhere():
    spec = parse_spec({"kafka": {"enabled": False}, "external": EXTERNAL})
    assert not any(k.startswith("MSGSTORE_KAFKA") for k in node_settings(spec))
    c = _container(spec)
    assert [p["name"] for p in c["ports"]] == ["http"]
    assert not any(e["name"].startswith("MSGSTORE_KAFKA") for e in c["env"])
    assert list(_ports(build_client_service(OWNER, spec))) == ["http"]
    (rule,) = build_network_policy(OWNER, spec)["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8080}]
    doc = build_routing_document("shop", "ns1", spec, 1, {}, 1, "cluster.local")
    assert "kafka_address" not in doc["nodes"][0]
    assert "kafka_external_address" not in doc["nodes"][0]
    # the external block still gives the HTTP NodePorts, and no Kafka one
    state = desired_children(OWNER, spec, 1, "{}", "cluster.local")
    (svc,) = [o for o in state.objects if o["metadata"]["name"] == "shop-0-external"]
    assert list(_ports(svc)) == ["http"]


def test_the_external_listener_gets_a_nodeport_per_node_and_advertises_it():
    spec = parse_spec({"replicas": 3, "external": EXTERNAL})
    settings = node_settings(spec)
    assert settings["MSGSTORE_KAFKA_EXTERNAL_PORT"] == "9094"
    assert {"name": "kafka-external", "containerPort": 9094, "protocol": "TCP"} in _container(spec)[
        "ports"
    ]
    state = desired_children(OWNER, spec, 3, "{}", "cluster.local")
    services = {o["metadata"]["name"]: o for o in state.objects if o["kind"] == "Service"}
    for i in range(3):
        svc = services[f"shop-{i}-external"]
        assert svc["spec"]["type"] == "NodePort"
        assert svc["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] == f"shop-{i}"
        assert _ports(svc)["kafka-external"] == {
            "name": "kafka-external", "port": 9094, "targetPort": "kafka-external",
            "protocol": "TCP", "nodePort": 30092 + i,
        }  # fmt: skip
        assert _ports(svc)["http"]["nodePort"] == 30081 + i
    doc = build_routing_document("shop", "ns1", spec, 3, {}, 1, "cluster.local")
    table = parse_routing(json.loads(json.dumps(doc)))
    assert [n.kafka_external_address for n in table.nodes] == [
        "203.0.113.7:30092",
        "203.0.113.7:30093",
        "203.0.113.7:30094",
    ]
    # in the headless and client Services only the in-cluster listener
    assert "kafka-external" not in _ports(build_client_service(OWNER, spec))


def test_the_external_kafka_listener_alone_and_an_ipv6_host():
    spec = parse_spec(
        {"external": {"enabled": True, "host": "2001:db8::5", "kafkaNodePortBase": 31000}}
    )
    state = desired_children(OWNER, spec, 1, "{}", "cluster.local")
    (svc,) = [o for o in state.objects if o["metadata"]["name"] == "shop-0-external"]
    assert list(_ports(svc)) == ["kafka-external"]
    doc = build_routing_document("shop", "ns1", spec, 1, {}, 1, "cluster.local")
    assert doc["nodes"][0]["kafka_external_address"] == "[2001:db8::5]:31000"
    assert "external_address" not in doc["nodes"][0]


def test_the_network_policy_admits_kafka_from_clients_and_the_external_port_from_anywhere():
    inside = build_network_policy(OWNER, parse_spec({}), "msgstore-system")["spec"]["ingress"]
    (rule,) = inside
    assert rule["ports"] == [{"protocol": "TCP", "port": 8080}, {"protocol": "TCP", "port": 9092}]
    assert {"podSelector": {"matchLabels": {naming.CLIENT_LABEL: "shop"}}} in rule["from"]
    outside = build_network_policy(OWNER, parse_spec({"external": EXTERNAL}))["spec"]["ingress"]
    assert outside[0] == {**rule, "from": outside[0]["from"]}
    # the NodePort clients come from any node's address: the external port has no "from"
    assert outside[1] == {"ports": [{"protocol": "TCP", "port": 9094}]}
