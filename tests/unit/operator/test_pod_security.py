"""Every pod msgstore creates passes Pod Security "restricted": one checker for all of them."""

from __future__ import annotations

import copy

import pytest
import yaml
from msgstore_operator.children import Owner, build_compaction_cronjob, build_statefulset
from msgstore_operator.children.spark import build_spark_templates_config_map
from msgstore_operator.pod_security import NODE_UID, SPARK_UID, restricted_violations
from msgstore_operator.spark_job import IngestRequest, build_ingest_job, spark_templates_data
from msgstore_operator.spec import SecurityDefaults, parse_spec

OWNER = Owner(name="demo", namespace="ns1", uid="uid-123")
SPARK = {"compaction": {"mode": "spark", "schedule": "@hourly"}}


def assert_restricted(pod_spec, what):
    problems = restricted_violations(pod_spec)
    assert problems == [], f"{what} breaks Pod Security restricted: {problems}\n{pod_spec}"


def node_pod(raw=None, defaults=None):
    spec = parse_spec(raw or {}, defaults=defaults)
    return build_statefulset(OWNER, spec, 3, "h", "demo-token")["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"tls": {"enabled": False}},
        {"tls": {"issuerRef": {"name": "ca-issuer", "kind": "ClusterIssuer"}}},
        {"tiering": {"enabled": True, "url": "s3://b/p", "credentialsSecret": "s3"}},
        {"podTemplate": {"nodeSelector": {"disk": "ssd"}, "priorityClassName": "high"}},
    ],
)
def test_node_pods_are_restricted(raw):
    pod = node_pod(raw)
    assert_restricted(pod, f"node pod of {raw}")
    assert pod["securityContext"]["runAsUser"] == NODE_UID  # the node image's uid
    assert pod["securityContext"]["fsGroup"] == NODE_UID  # the volume is writable
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_spark_submitter_driver_and_executor_pods_are_restricted():
    spec = parse_spec(SPARK)
    cj = build_compaction_cronjob(OWNER, spec, "https://demo.ns1.svc:8080", "demo-token")
    submit = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert_restricted(submit, "compaction submitter")
    assert submit["securityContext"]["runAsUser"] == SPARK_UID
    ingest = build_ingest_job(IngestRequest(store="demo", namespace="ns1", topic="t", input="/x"))
    assert_restricted(ingest["spec"]["template"]["spec"], "ingest submitter")
    # The driver and executor pods spark-submit creates come from the mounted templates.
    cm = build_spark_templates_config_map(OWNER, spec)
    for key in ("driver.yaml", "executor.yaml"):
        template = yaml.safe_load(cm["data"][key])
        assert_restricted(template["spec"], f"Spark {key}")
        assert template["spec"]["securityContext"]["runAsUser"] == SPARK_UID
        (container,) = template["spec"]["containers"]
        assert container["volumeMounts"][0]["mountPath"] == "/etc/msgstore/ca"
    no_tls = yaml.safe_load(spark_templates_data(None)["driver.yaml"])
    assert_restricted(no_tls["spec"], "Spark template without TLS")
    assert "volumes" not in no_tls["spec"]


def test_the_submitter_points_spark_at_the_templates_and_the_ca():
    spec = parse_spec(SPARK)
    cj = build_compaction_cronjob(OWNER, spec, "https://demo.ns1.svc:8080", "demo-token")
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    conf = dict(a.split("=", 1) for a in args if "=" in a and a.startswith("spark."))
    assert conf["spark.kubernetes.driver.podTemplateFile"] == (
        "/opt/msgstore/pod-templates/driver.yaml"
    )
    assert conf["spark.kubernetes.executor.podTemplateFile"] == (
        "/opt/msgstore/pod-templates/executor.yaml"
    )
    assert conf["spark.kubernetes.driverEnv.MSGSTORE_CA"] == "/etc/msgstore/ca/ca.crt"
    assert conf["spark.executorEnv.MSGSTORE_CA"] == "/etc/msgstore/ca/ca.crt"
    assert conf["spark.kubernetes.driver.label.msgstore.io/client"] == "demo"
    assert conf["spark.kubernetes.executor.label.msgstore.io/client"] == "demo"
    assert pod["volumes"] == [
        {"name": "pod-templates", "configMap": {"name": "demo-spark-templates"}}
    ]


def test_the_checker_catches_each_violation():
    """The pod template before this change, as refused by a restricted namespace."""
    pod = node_pod(defaults=SecurityDefaults(restricted_pods=False))
    problems = restricted_violations(pod)
    text = "\n".join(problems)
    for expected in (
        "allowPrivilegeEscalation != false",
        'capabilities.drop does not include "ALL"',
        "runAsNonRoot != true",
        "seccompProfile.type is not RuntimeDefault",
    ):
        assert expected in text, problems
    good = node_pod()
    cases = {
        "hostNetwork=true": lambda p: p.update(hostNetwork=True),
        "restricted type ['hostPath']": lambda p: p["volumes"].append(
            {"name": "h", "hostPath": {"path": "/"}}
        ),
        "privileged=true": lambda p: p["containers"][0]["securityContext"].update(privileged=True),
        "capabilities.add ['SYS_ADMIN']": lambda p: p["containers"][0]["securityContext"][
            "capabilities"
        ].update(add=["SYS_ADMIN"]),
        "pod runAsUser=0": lambda p: p["securityContext"].update(runAsUser=0),
        "pod seccompProfile": lambda p: p["securityContext"].update(
            seccompProfile={"type": "Unconfined"}
        ),
        "hostPort 80": lambda p: p["containers"][0]["ports"][0].update(hostPort=80),
        "forbidden sysctl kernel.msgmax": lambda p: p["securityContext"].update(
            sysctls=[{"name": "kernel.msgmax", "value": "1"}]
        ),
        "initContainers[init]: allowPrivilegeEscalation": lambda p: p.update(
            initContainers=[{"name": "init", "image": "x"}]
        ),
    }
    for expected, change in cases.items():
        pod = copy.deepcopy(good)
        change(pod)
        assert any(expected in v for v in restricted_violations(pod)), (expected, pod)
    assert restricted_violations({"containers": []}) == ["the pod has no containers"]
