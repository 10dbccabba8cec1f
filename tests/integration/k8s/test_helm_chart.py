"""The Helm chart on a real control plane: install, RBAC, the operator under the chart's
ServiceAccount, Spark compaction objects, upgrade and uninstall.

kwok stands in for the kubelet (pods are reported Running without a container); everything
else — API server admission and RBAC, the controllers, Helm — is real. The operator runs as
a local `kopf run` process authenticated with a token of the chart's ServiceAccount, so
every call it makes is authorised exactly as it would be inside the cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from operator_support import (
    CRD_NAME,
    REPO,
    OperatorProcess,
    apply_json,
    create_volumes,
    delete_volumes,
    store_manifest,
    wait_ready,
)

CHART = REPO / "helm" / "msgstore"
RELEASE = "e2e-msgstore"  # names: e2e-msgstore-operator (fullname keeps the release name)
OPERATOR = f"{RELEASE}-operator"
STORE = "shop"


class ChartOperator(OperatorProcess):
    """The operator authenticated as the chart's ServiceAccount (a token kubeconfig)."""

    def __init__(self, cluster, namespace, log_path, kubeconfig) -> None:
        super().__init__(cluster, namespace, log_path)
        self.kubeconfig = kubeconfig

    def start(self) -> None:
        original = self.cluster.env
        env = dict(original)
        env["KUBECONFIG"] = str(self.kubeconfig)
        object.__setattr__(self.cluster, "env", env)  # the frozen dataclass, for this start
        try:
            super().start()
        finally:
            object.__setattr__(self.cluster, "env", original)


def service_account_kubeconfig(cluster, namespace: str, account: str, path) -> None:
    """A kubeconfig holding a short-lived token of `account`, and nothing of the admin's."""
    token = cluster.run_kubectl(
        "create", "token", account, "-n", namespace, "--duration=1h"
    ).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    ctx = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    server = next(c for c in admin["clusters"] if c["name"] == ctx["context"]["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": server["cluster"]}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "test", "user": account}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))


def can_i(cluster, account: str, verb: str, resource: str, namespace: str | None) -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={account}"]
    args += ["-n", namespace] if namespace else ["--all-namespaces"]
    proc = cluster.run_kubectl(*args, check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), proc.stdout + proc.stderr
    return answer == "yes"


@pytest.fixture(scope="module")
def installed(k8s_cluster):
    """The chart installed into its own namespace, watching a second namespace for stores."""
    chart_ns = k8s_cluster.new_namespace("chart")
    store_ns = k8s_cluster.new_namespace("stores")
    out = k8s_cluster.run_helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        chart_ns,
        "--set",
        f"operator.watchNamespaces={{{store_ns}}}",
        "--set",
        f"spark.namespaces={{{store_ns}}}",
        "--wait",
        "--timeout",
        "180s",
    ).stdout
    yield {"chart_ns": chart_ns, "store_ns": store_ns, "install_output": out}
    k8s_cluster.run_helm("uninstall", RELEASE, "-n", chart_ns, "--wait", check=False)
    # with the operator gone, nothing would remove a finalizer it may have left
    k8s_cluster.run_kubectl(
        "patch", "ms", STORE, "-n", store_ns, "--type=merge",
        "-p", '{"metadata":{"finalizers":null}}', check=False,
    )  # fmt: skip
    k8s_cluster.run_kubectl("delete", "namespace", store_ns, "--wait=false", check=False)
    k8s_cluster.run_kubectl("delete", "namespace", chart_ns, "--wait=false", check=False)
    delete_volumes(k8s_cluster, store_ns)
    # the CRDs outlive releases on purpose; remove them so later tests start clean
    for name in ("messagestoreusers.msgstore.io", CRD_NAME):
        k8s_cluster.run_kubectl("delete", "crd", name, "--ignore-not-found", timeout=180)


@pytest.fixture(scope="module")
def operator(k8s_cluster, installed, tmp_path_factory):
    work = tmp_path_factory.mktemp("chart-operator")
    kubeconfig = work / "kubeconfig"
    service_account_kubeconfig(k8s_cluster, installed["chart_ns"], OPERATOR, kubeconfig)
    proc = ChartOperator(k8s_cluster, installed["store_ns"], work / "kopf.log", kubeconfig)
    proc.start()
    yield proc
    proc.stop()
    print(f"--- operator log (tail) ---\n{proc.log_tail(200)}")


def test_install_is_accepted_and_the_operator_deployment_runs(k8s_cluster, installed):
    ns = installed["chart_ns"]
    assert "msgstore 0.1.0 is installed" in installed["install_output"]
    crd = k8s_cluster.get_json("crd", CRD_NAME)
    established = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert established["Established"] == "True"
    dep = k8s_cluster.get_json("deployment", OPERATOR, "-n", ns)
    assert dep["status"].get("availableReplicas") == 1
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == OPERATOR
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    pods = k8s_cluster.get_json("pods", "-n", ns, "-l", "app.kubernetes.io/component=operator")
    assert [p["status"]["phase"] for p in pods["items"]] == ["Running"]
    k8s_cluster.get_json("clusterrole", OPERATOR)
    binding = k8s_cluster.get_json("clusterrolebinding", OPERATOR)
    assert binding["subjects"][0] == {"kind": "ServiceAccount", "name": OPERATOR, "namespace": ns}
    status = k8s_cluster.run_helm("status", RELEASE, "-n", ns, "-o", "json").stdout
    assert json.loads(status)["info"]["status"] == "deployed"


def test_rbac_grants_what_the_operator_needs_and_nothing_more(k8s_cluster, installed):
    account = f"system:serviceaccount:{installed['chart_ns']}:{OPERATOR}"
    store_ns = installed["store_ns"]
    for verb, resource in [
        ("watch", "messagestores.msgstore.io"),
        ("patch", "messagestores.msgstore.io/status"),
        ("patch", "statefulsets.apps"),
        ("create", "configmaps"),
        ("create", "secrets"),
        ("list", "pods"),
        ("delete", "cronjobs.batch"),
        ("create", "roles.rbac.authorization.k8s.io"),
        ("create", "events"),
    ]:
        assert can_i(k8s_cluster, account, verb, resource, store_ns), (verb, resource)
    for verb, resource, namespace in [
        ("list", "secrets", store_ns),
        ("delete", "secrets", store_ns),
        ("delete", "statefulsets.apps", store_ns),
        ("delete", "messagestores.msgstore.io", store_ns),
        ("create", "clusterroles.rbac.authorization.k8s.io", None),
        ("escalate", "roles.rbac.authorization.k8s.io", store_ns),
        ("list", "nodes", None),
        ("delete", "namespaces", None),
    ]:
        assert not can_i(k8s_cluster, account, verb, resource, namespace), (verb, resource)


def test_operator_does_its_job_under_the_chart_identity(k8s_cluster, installed, operator):
    ns = installed["store_ns"]
    create_volumes(k8s_cluster, ns, STORE, 3)
    manifest = store_manifest(
        STORE,
        compaction={"mode": "spark", "schedule": "*/30 * * * *"},
    )
    apply_json(k8s_cluster, ns, manifest)
    wait_ready(k8s_cluster, ns, STORE, 3, timeout=180)
    for kind, name in [
        ("statefulset", STORE),
        ("service", STORE),
        ("service", f"{STORE}-nodes"),
        ("configmap", f"{STORE}-routing"),
        ("poddisruptionbudget", STORE),
        ("secret", f"{STORE}-token"),
        ("cronjob", f"{STORE}-compact"),
        ("serviceaccount", f"{STORE}-spark"),
        ("role", f"{STORE}-spark"),
        ("rolebinding", f"{STORE}-spark"),
    ]:
        k8s_cluster.get_json(kind, name, "-n", ns)
    log = operator.log_text()
    assert "Forbidden" not in log and "status=403" not in log, operator.log_tail(80)
    assert "Not enough permissions" not in log, operator.log_tail(80)


def test_spark_compaction_job_and_driver_rbac_are_accepted(k8s_cluster, installed, operator):
    ns = installed["store_ns"]
    wait_ready(k8s_cluster, ns, STORE, 3, timeout=180)
    cron = k8s_cluster.get_json("cronjob", f"{STORE}-compact", "-n", ns)
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert "k8s://https://kubernetes.default.svc:443" in container["args"]
    assert "cluster" in container["args"]
    k8s_cluster.run_kubectl(
        "create", "job", "compact-now", f"--from=cronjob/{STORE}-compact", "-n", ns
    )
    job = k8s_cluster.get_json("job", "compact-now", "-n", ns)
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == f"{STORE}-spark"
    k8s_cluster.wait_until(
        lambda: k8s_cluster.get_json("pods", "-n", ns, "-l", "job-name=compact-now")["items"],
        "a pod of the compaction Job",
    )
    # what spark-submit and the driver do with the store's Spark identity, and only there
    driver = f"system:serviceaccount:{ns}:{STORE}-spark"
    for verb, resource in [
        ("create", "pods"),
        ("watch", "pods"),
        ("deletecollection", "pods"),
        ("create", "services"),
        ("create", "configmaps"),
        ("list", "persistentvolumeclaims"),
        ("patch", "networkpolicies.networking.k8s.io"),
    ]:
        assert can_i(k8s_cluster, driver, verb, resource, ns), (verb, resource)
    assert not can_i(k8s_cluster, driver, "create", "pods", installed["chart_ns"])
    assert not can_i(k8s_cluster, driver, "get", "secrets", ns)


def test_rendered_ingest_job_is_accepted(k8s_cluster, installed, operator):
    ns = installed["store_ns"]
    rendered = subprocess.run(
        [sys.executable, "-m", "storage_node.cli", "spark-job", "ingest", "--store", STORE,
         "-n", ns, "--topic", "orders", "--input", "file:///opt/msgstore/data/orders-sample.jsonl",
         "--key-field", "order_id", "-o", "yaml"],
        capture_output=True, text=True, check=True, cwd=str(REPO),
    ).stdout  # fmt: skip
    k8s_cluster.run_kubectl("apply", "-f", "-", input=rendered)
    job = k8s_cluster.get_json("job", f"{STORE}-ingest-orders", "-n", ns)
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == f"{STORE}-spark"
    # the chart's shared Spark identity in this namespace works for the same Job too
    shared = f"system:serviceaccount:{ns}:msgstore-spark"
    assert can_i(k8s_cluster, shared, "create", "pods", ns)


def test_kind_examples_are_accepted_by_the_api_server(k8s_cluster, installed):
    """The sample objects `make kind-up` applies pass the real schema, CEL rules and
    admission (server-side dry run: nothing is created)."""
    ns = installed["store_ns"]
    for example in ("messagestore.yaml", "client-nodeport.yaml"):
        out = k8s_cluster.run_kubectl(
            "apply", "--dry-run=server", "-n", ns, "-f", str(REPO / "examples" / example)
        ).stdout
        assert "(server dry run)" in out
    assert k8s_cluster.run_kubectl("get", "ms", "orders", "-n", ns, check=False).returncode != 0


def test_upgrade_changes_the_operator_and_bad_values_change_nothing(k8s_cluster, installed):
    ns = installed["chart_ns"]
    k8s_cluster.run_helm(
        "upgrade", RELEASE, str(CHART), "-n", ns, "--reuse-values",
        "--set", "operator.logLevel=verbose",
        "--set", "operator.resources.limits.memory=384Mi",
        "--wait", "--timeout", "180s",
    )  # fmt: skip
    dep = k8s_cluster.get_json("deployment", OPERATOR, "-n", ns)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--verbose" in container["args"]
    assert container["resources"]["limits"]["memory"] == "384Mi"
    history = json.loads(k8s_cluster.run_helm("history", RELEASE, "-n", ns, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2]

    bad = k8s_cluster.run_helm(
        "upgrade", RELEASE, str(CHART), "-n", ns, "--reuse-values",
        "--set", "operator.replicas=3", check=False,
    )  # fmt: skip
    assert bad.returncode != 0 and "/operator/replicas" in bad.stderr
    history = json.loads(k8s_cluster.run_helm("history", RELEASE, "-n", ns, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2]
    after = k8s_cluster.get_json("deployment", OPERATOR, "-n", ns)
    assert after["metadata"]["generation"] == dep["metadata"]["generation"]


def test_uninstall_removes_the_release_and_keeps_the_data(k8s_cluster, installed, operator):
    operator.stop()
    ns = installed["chart_ns"]
    k8s_cluster.run_helm("uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "120s")
    for args in (
        ("deployment", OPERATOR, "-n", ns),
        ("serviceaccount", OPERATOR, "-n", ns),
        ("clusterrole", OPERATOR),
        ("clusterrolebinding", OPERATOR),
        ("role", "msgstore-spark", "-n", installed["store_ns"]),
    ):
        got = k8s_cluster.run_kubectl("get", *args, check=False)
        assert got.returncode != 0 and "NotFound" in got.stderr, args
    # the CRD and the stores (and so their volumes and data) stay until deleted explicitly
    k8s_cluster.get_json("crd", CRD_NAME)
    k8s_cluster.get_json("ms", STORE, "-n", installed["store_ns"])
    k8s_cluster.get_json("statefulset", STORE, "-n", installed["store_ns"])
