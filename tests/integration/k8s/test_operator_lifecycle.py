"""The operator against a real API server, controllers and garbage collector.

One `kopf run` process watches a namespace of its own. kwok reports the node pods Running
and Ready (the only simulated part: no container runs); everything else is real.
"""

from __future__ import annotations

import copy
import json

import pytest
from operator_support import (
    OperatorProcess,
    apply_json,
    condition,
    create_volumes,
    delete_volumes,
    install_crd,
    remove_crd,
    routing_table,
    store_manifest,
    wait_for,
    wait_ready,
)


@pytest.fixture(scope="module")
def ns(k8s_cluster):
    install_crd(k8s_cluster)
    namespace = k8s_cluster.new_namespace("op")
    yield namespace
    k8s_cluster.run_kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    delete_volumes(k8s_cluster, namespace)
    remove_crd(k8s_cluster)


@pytest.fixture(scope="module")
def operator(k8s_cluster, ns, tmp_path_factory):
    proc = OperatorProcess(k8s_cluster, ns, tmp_path_factory.mktemp("operator") / "kopf.log")
    proc.start()
    yield proc
    proc.stop()
    print(f"--- operator log (tail) ---\n{proc.log_tail(200)}")


def new_store(cluster, ns, name, nodes_for_volumes=5, **spec):
    create_volumes(cluster, ns, name, nodes_for_volumes)
    manifest = store_manifest(name, **spec)
    apply_json(cluster, ns, manifest)
    return manifest


def get(cluster, ns, *what):
    return cluster.get_json(*what, "-n", ns)


def events(cluster, ns, name):
    items = cluster.get_json("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")[
        "items"
    ]
    return [(e["reason"], e["message"]) for e in items]


def test_operator_liveness_endpoint(operator):
    assert operator.alive()
    assert isinstance(operator.liveness(), dict)


def test_store_yields_children_and_turns_ready(k8s_cluster, ns, operator):
    new_store(k8s_cluster, ns, "demo", flush={"mode": "async"})
    ms = wait_ready(k8s_cluster, ns, "demo", 3)
    status = ms["status"]
    assert status["replicas"] == 3 and status["routingConfigMap"] == "demo-routing"
    assert status["labelSelector"] == (
        "app.kubernetes.io/component=node,app.kubernetes.io/instance=demo,"
        "app.kubernetes.io/name=msgstore"
    )
    assert status["endpoints"]["service"] == f"https://demo.{ns}.svc.cluster.local:8080"
    assert len(status["endpoints"]["nodes"]) == 3
    uid = ms["metadata"]["uid"]

    sts = get(k8s_cluster, ns, "statefulset", "demo")
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] == "demo-nodes"
    pod_spec = sts["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    assert container["command"] == ["msgstore", "serve"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["storageClassName"] == "msgstore-test"
    assert sts["metadata"]["ownerReferences"][0]["uid"] == uid

    config = get(k8s_cluster, ns, "configmap", "demo-config")["data"]
    assert config["MSGSTORE_FLUSH_MODE"] == "async"
    assert container["envFrom"][0]["configMapRef"]["name"] == "demo-config"
    table = routing_table(k8s_cluster, ns, "demo")
    assert table["managed_by"] == "operator" and table["generation"] == 1
    assert [n["id"] for n in table["nodes"]] == ["demo-0", "demo-1", "demo-2"]
    assert table["topics"]["orders"]["owners"] == ["demo-0", "demo-1", "demo-2"]

    headless = get(k8s_cluster, ns, "service", "demo-nodes")
    assert headless["spec"]["clusterIP"] == "None"
    assert get(k8s_cluster, ns, "service", "demo")["spec"]["ports"][0]["port"] == 8080
    assert get(k8s_cluster, ns, "pdb", "demo")["spec"]["maxUnavailable"] == 1
    token = get(k8s_cluster, ns, "secret", "demo-token")
    assert token["metadata"]["ownerReferences"][0]["uid"] == uid and token["data"]["token"]

    pods = get(k8s_cluster, ns, "pods", "-l", "app.kubernetes.io/instance=demo")["items"]
    assert sorted(p["metadata"]["name"] for p in pods) == ["demo-0", "demo-1", "demo-2"]
    assert all(p["status"]["phase"] == "Running" for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} <= {"kwok-node-0", "kwok-node-1", "kwok-node-2"}
    reasons = {reason for reason, _ in events(k8s_cluster, ns, "demo")}
    assert {"Applied", "RoutingPublished", "TokenCreated"} <= reasons
    printed = k8s_cluster.run_kubectl("get", "ms", "demo", "-n", ns, "--no-headers").stdout
    assert printed.split()[:4] == ["demo", "3", "3", "Ready"]


def test_kubectl_scale_up_adds_nodes_and_keeps_owners(k8s_cluster, ns, operator):
    new_store(k8s_cluster, ns, "grow")
    wait_ready(k8s_cluster, ns, "grow", 3)
    before = routing_table(k8s_cluster, ns, "grow")
    k8s_cluster.run_kubectl("scale", "ms/grow", "--replicas=5", "-n", ns)
    ms = wait_ready(k8s_cluster, ns, "grow", 5)
    assert ms["status"]["replicas"] == 5
    assert get(k8s_cluster, ns, "statefulset", "grow")["spec"]["replicas"] == 5
    after = routing_table(k8s_cluster, ns, "grow")
    assert len(after["nodes"]) == 5 and after["generation"] == before["generation"] + 1
    assert after["topics"] == before["topics"]
    scale = json.loads(
        k8s_cluster.run_kubectl(
            "get", "--raw", f"/apis/msgstore.io/v1alpha1/namespaces/{ns}/messagestores/grow/scale"
        ).stdout
    )
    assert scale["spec"]["replicas"] == 5 and scale["status"]["replicas"] == 5


def test_new_topic_updates_routing_and_blocks_scale_down(k8s_cluster, ns, operator):
    manifest = new_store(k8s_cluster, ns, "busy", replicas=5)
    wait_ready(k8s_cluster, ns, "busy", 5)
    updated = copy.deepcopy(manifest)
    updated["spec"]["topics"].append({"name": "events", "partitions": 5})
    apply_json(k8s_cluster, ns, updated)

    def has_events_topic():
        table = routing_table(k8s_cluster, ns, "busy")
        return table if "events" in table["topics"] else None

    table = wait_for(has_events_topic, "topic events in the routing table")
    assert table["topics"]["orders"]["owners"] == ["busy-0", "busy-1", "busy-2"]
    assert sorted(table["topics"]["events"]["owners"]) == [f"busy-{i}" for i in range(5)]
    wait_ready(k8s_cluster, ns, "busy", 5)

    k8s_cluster.run_kubectl("scale", "ms/busy", "--replicas=3", "-n", ns)

    def blocked():
        ms = get(k8s_cluster, ns, "ms", "busy")
        cond = condition(ms, "ScaleDownBlocked")
        gen_seen = ms["status"].get("observedGeneration") == ms["metadata"]["generation"]
        return ms if cond.get("status") == "True" and gen_seen else None

    ms = wait_for(blocked, "condition ScaleDownBlocked")
    cond = condition(ms, "ScaleDownBlocked")
    assert cond["reason"] == "PartitionsOwned"
    assert "node busy-3 owns 1 partition" in cond["message"]
    assert "node busy-4 owns 1 partition" in cond["message"]
    assert ms["spec"]["replicas"] == 3 and ms["status"]["replicas"] == 5
    assert get(k8s_cluster, ns, "statefulset", "busy")["spec"]["replicas"] == 5
    assert len(routing_table(k8s_cluster, ns, "busy")["nodes"]) == 5
    assert ("ScaleDownBlocked", cond["message"]) in events(k8s_cluster, ns, "busy")

    # Scaling back to the current size clears the condition.
    k8s_cluster.run_kubectl("scale", "ms/busy", "--replicas=5", "-n", ns)
    wait_for(
        lambda: (
            condition(get(k8s_cluster, ns, "ms", "busy"), "ScaleDownBlocked").get("status")
            == "False"
        ),
        "ScaleDownBlocked to clear",
    )


def test_scale_down_of_empty_nodes_is_applied(k8s_cluster, ns, operator):
    new_store(k8s_cluster, ns, "shrink", replicas=5)
    wait_ready(k8s_cluster, ns, "shrink", 5)
    k8s_cluster.run_kubectl("scale", "ms/shrink", "--replicas=3", "-n", ns)
    ms = wait_ready(k8s_cluster, ns, "shrink", 3)
    assert condition(ms, "ScaleDownBlocked")["status"] == "False"
    assert len(routing_table(k8s_cluster, ns, "shrink")["nodes"]) == 3
    assert get(k8s_cluster, ns, "statefulset", "shrink")["spec"]["replicas"] == 3


def test_changed_setting_rolls_the_statefulset(k8s_cluster, ns, operator):
    manifest = new_store(k8s_cluster, ns, "roll")
    wait_ready(k8s_cluster, ns, "roll", 3)
    sts = get(k8s_cluster, ns, "statefulset", "roll")
    old_hash = sts["spec"]["template"]["metadata"]["annotations"]["msgstore.io/config-hash"]
    old_revision = sts["status"]["updateRevision"]
    updated = copy.deepcopy(manifest)
    updated["spec"]["segmentBytes"] = 8388608
    apply_json(k8s_cluster, ns, updated)

    def rolled():
        live = get(k8s_cluster, ns, "statefulset", "roll")
        status = live.get("status") or {}
        done = (
            status.get("updateRevision") != old_revision
            and status.get("currentRevision") == status.get("updateRevision")
            and status.get("updatedReplicas") == 3
        )
        return live if done else None

    sts = wait_for(rolled, "the StatefulSet to roll all pods to the new revision", timeout=180)
    new_hash = sts["spec"]["template"]["metadata"]["annotations"]["msgstore.io/config-hash"]
    assert new_hash != old_hash
    assert (
        get(k8s_cluster, ns, "configmap", "roll-config")["data"]["MSGSTORE_SEGMENT_BYTES"]
        == "8388608"
    )
    ms = wait_ready(k8s_cluster, ns, "roll", 3)
    assert ms["status"]["configHash"] == new_hash
    pods = get(k8s_cluster, ns, "pods", "-l", "app.kubernetes.io/instance=roll")["items"]
    assert {p["metadata"]["labels"]["controller-revision-hash"] for p in pods} == {
        sts["status"]["updateRevision"]
    }


def test_spark_compaction_cronjob_comes_and_goes(k8s_cluster, ns, operator):
    manifest = new_store(
        k8s_cluster,
        ns,
        "sparky",
        compaction={"mode": "spark", "schedule": "*/15 * * * *", "spark": {"image": "sp:1"}},
    )
    wait_ready(k8s_cluster, ns, "sparky", 3)
    cronjob = get(k8s_cluster, ns, "cronjob", "sparky-compact")
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert cronjob["spec"]["schedule"] == "*/15 * * * *"
    assert pod["serviceAccountName"] == "sparky-spark"
    args = pod["containers"][0]["args"]
    assert "k8s://https://kubernetes.default.svc:443" in args and "cluster" in args
    for kind in ("serviceaccount", "role", "rolebinding"):
        assert get(k8s_cluster, ns, kind, "sparky-spark")["metadata"]["name"] == "sparky-spark"
    updated = copy.deepcopy(manifest)
    updated["spec"]["compaction"] = {"mode": "node"}
    apply_json(k8s_cluster, ns, updated)
    wait_for(
        lambda: (
            k8s_cluster.run_kubectl(
                "get", "cronjob", "sparky-compact", "-n", ns, check=False
            ).returncode
            != 0
        ),
        "the CronJob to be removed in node mode",
    )


def test_operator_restart_resumes_without_redoing_work(k8s_cluster, ns, operator):
    new_store(k8s_cluster, ns, "steady")
    wait_ready(k8s_cluster, ns, "steady", 3)
    kinds = [
        ("statefulset", "steady"),
        ("configmap", "steady-config"),
        ("configmap", "steady-routing"),
        ("service", "steady"),
        ("service", "steady-nodes"),
        ("pdb", "steady"),
        ("secret", "steady-token"),
    ]

    def versions():
        """What the operator writes: the object itself (its generation where controllers
        also write status, else its resourceVersion) and the time of its last apply."""
        result = {}
        for k in kinds:
            meta = get(k8s_cluster, ns, *k)["metadata"]
            ours = [
                f.get("time")
                for f in meta.get("managedFields") or []
                if f.get("manager") == "msgstore-operator"
            ]
            result[k] = (meta.get("generation") or meta["resourceVersion"], ours)
        return result

    before = versions()
    token_before = get(k8s_cluster, ns, "secret", "steady-token")["data"]["token"]
    events_before = len(events(k8s_cluster, ns, "steady"))
    operator.stop()
    resumed = operator.count(r"\[[^/\]]+/steady\] Handler 'reconcile_handler' succeeded")
    refreshed = operator.count(r"status refreshed for \d+ MessageStores")
    operator.start()
    # Wait for the resume handler and two status-loop passes of the new process.
    wait_for(
        lambda: (
            operator.count(r"\[[^/\]]+/steady\] Handler 'reconcile_handler' succeeded") > resumed
            and operator.count(r"status refreshed for \d+ MessageStores") >= refreshed + 2
        ),
        "the restarted operator to resume and refresh",
        timeout=120,
    )
    assert versions() == before
    assert get(k8s_cluster, ns, "secret", "steady-token")["data"]["token"] == token_before
    assert len(events(k8s_cluster, ns, "steady")) == events_before
    assert get(k8s_cluster, ns, "ms", "steady")["status"]["phase"] == "Ready"


def test_deleted_child_is_recreated(k8s_cluster, ns, operator):
    new_store(k8s_cluster, ns, "heal")
    wait_ready(k8s_cluster, ns, "heal", 3)
    k8s_cluster.run_kubectl("delete", "service", "heal", "-n", ns)
    wait_for(
        lambda: (
            k8s_cluster.run_kubectl("get", "service", "heal", "-n", ns, check=False).returncode == 0
        ),
        "the client Service to be recreated",
    )


def test_deleting_the_store_removes_its_children(k8s_cluster, ns, operator):
    new_store(
        k8s_cluster,
        ns,
        "gone",
        storage={"size": "1Gi", "storageClassName": "msgstore-test", "deleteClaim": True},
    )
    wait_ready(k8s_cluster, ns, "gone", 3)
    assert get(k8s_cluster, ns, "pvc", "-l", "app.kubernetes.io/instance=gone")["items"]
    k8s_cluster.run_kubectl("delete", "ms", "gone", "-n", ns, "--wait=true", timeout=120)

    def all_gone():
        left = []
        for kind in ("statefulset", "service", "configmap", "secret", "pdb", "pods", "pvc"):
            items = get(k8s_cluster, ns, kind, "-l", "app.kubernetes.io/instance=gone")["items"]
            left += [f"{kind}/{i['metadata']['name']}" for i in items]
        return not left or None

    wait_for(all_gone, "the garbage collector to remove every child", timeout=180)


def test_unschedulable_pods_show_degraded(k8s_cluster, ns, operator):
    """The real scheduler cannot place pods that select no node: status says so."""
    new_store(k8s_cluster, ns, "stuck", podTemplate={"nodeSelector": {"disk": "none-such"}})

    def degraded():
        ms = get(k8s_cluster, ns, "ms", "stuck")
        cond = condition(ms, "Degraded")
        return ms if cond.get("status") == "True" else None

    ms = wait_for(degraded, "condition Degraded on unschedulable pods")
    assert ms["status"]["phase"] == "Degraded" and ms["status"]["readyReplicas"] == 0
    assert "cannot be scheduled" in condition(ms, "Degraded")["message"]
    assert condition(ms, "Ready")["status"] == "False"


def test_corrupt_routing_table_is_reported_and_nothing_changes(k8s_cluster, ns, operator):
    """The operator never guesses owners of existing data: it stops and says why."""
    manifest = new_store(k8s_cluster, ns, "broken")
    wait_ready(k8s_cluster, ns, "broken", 3)
    k8s_cluster.run_kubectl(
        "patch",
        "configmap",
        "broken-routing",
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"data": {"routing.json": '{"format": 1, "generation": "x"}'}}),
    )
    sts_before = get(k8s_cluster, ns, "statefulset", "broken")
    updated = copy.deepcopy(manifest)
    updated["spec"]["replicas"] = 4
    apply_json(k8s_cluster, ns, updated)

    def degraded():
        ms = get(k8s_cluster, ns, "ms", "broken")
        return ms if condition(ms, "Degraded").get("reason") == "InvalidSpec" else None

    ms = wait_for(degraded, "condition Degraded with reason InvalidSpec")
    message = condition(ms, "Degraded")["message"]
    assert "routing table in ConfigMap broken-routing is invalid" in message
    assert ms["status"]["phase"] == "Degraded"
    warnings = [m for reason, m in events(k8s_cluster, ns, "broken") if reason == "InvalidSpec"]
    assert warnings == [message]  # reported once, not on every pass
    sts_after = get(k8s_cluster, ns, "statefulset", "broken")
    assert sts_after["spec"]["replicas"] == 3
    assert sts_after["metadata"]["generation"] == sts_before["metadata"]["generation"]
