"""The chart rendered by the real helm binary: lint, objects, security, RBAC, bad values."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from chart_tools import CHART, KUBE_VERSION, REPO, by_kind, one, run_helm, set_args

# Every (apiGroup, resource, verb) the operator's ClusterRole grants, and why. The test below
# fails when the chart grants anything not listed here, or stops granting something listed.
OPERATOR_GRANTS: dict[tuple[str, str, str], str] = {
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"): "kopf finds MessageStores' API",
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"): "kopf notices CRD changes",
    ("", "namespaces", "list"): "kopf resolves the namespaces it serves",
    ("", "namespaces", "watch"): "kopf notices namespaces appearing and going",
    ("msgstore.io", "messagestores", "get"): "kopf re-reads a resource before patching it",
    ("msgstore.io", "messagestores", "list"): "kopf lists MessageStores when it starts",
    ("msgstore.io", "messagestores", "watch"): "kopf watches MessageStores for changes",
    ("msgstore.io", "messagestores", "patch"): "kopf keeps handler progress in annotations",
    ("msgstore.io", "messagestores/status", "get"): "read the status it reports",
    ("msgstore.io", "messagestores/status", "patch"): "report phase, conditions, replicas",
    ("msgstore.io", "messagestoreusers", "get"): "re-read a user before each pass",
    ("msgstore.io", "messagestoreusers", "list"): "render a store's access document; kopf lists",
    ("msgstore.io", "messagestoreusers", "watch"): "kopf watches users (deletion revokes)",
    ("msgstore.io", "messagestoreusers", "patch"): "kopf keeps handler progress in annotations",
    ("msgstore.io", "messagestoreusers/status", "get"): "read the status it reports",
    ("msgstore.io", "messagestoreusers/status", "patch"): "report Ready, the Secret's name",
    ("", "configmaps", "get"): "compare the applied hash of the config and routing ConfigMaps",
    ("", "configmaps", "create"): "server-side apply creates a missing ConfigMap",
    ("", "configmaps", "patch"): "server-side apply of node settings and the routing table",
    ("", "services", "get"): "compare the applied hash of the client and headless Services",
    ("", "services", "create"): "server-side apply creates a missing Service",
    ("", "services", "patch"): "server-side apply of the Services",
    ("apps", "statefulsets", "get"): "compare the applied hash; read replicas for status",
    ("apps", "statefulsets", "create"): "server-side apply creates the node StatefulSet",
    ("apps", "statefulsets", "patch"): "apply scaling, image and config-hash changes",
    ("apps", "deployments", "get"): "compare the applied hash of the console Deployment",
    ("apps", "deployments", "create"): "server-side apply creates the console (spec.console)",
    ("apps", "deployments", "patch"): "server-side apply of the console Deployment",
    ("apps", "deployments", "delete"): "remove the console when spec.console is off",
    ("", "services", "delete"): "remove the console's Service when spec.console is off",
    ("policy", "poddisruptionbudgets", "get"): "compare the applied hash of the PDB",
    ("policy", "poddisruptionbudgets", "create"): "server-side apply creates the PDB",
    ("policy", "poddisruptionbudgets", "patch"): "server-side apply of the PDB",
    ("batch", "cronjobs", "get"): "compare the applied hash of the Spark compaction CronJob",
    ("batch", "cronjobs", "create"): "server-side apply creates the CronJob (mode spark)",
    ("batch", "cronjobs", "patch"): "apply schedule and Spark setting changes",
    ("batch", "cronjobs", "delete"): "remove the CronJob when compaction.mode leaves spark",
    ("", "serviceaccounts", "get"): "compare the applied hash of the Spark ServiceAccount",
    ("", "serviceaccounts", "create"): "server-side apply creates the Spark ServiceAccount",
    ("", "serviceaccounts", "patch"): "server-side apply of the Spark ServiceAccount",
    ("", "serviceaccounts", "delete"): "remove it when compaction.mode leaves spark",
    ("rbac.authorization.k8s.io", "roles", "get"): "compare the applied hash of the Spark Role",
    ("rbac.authorization.k8s.io", "roles", "create"): "create the Spark driver's Role",
    ("rbac.authorization.k8s.io", "roles", "patch"): "server-side apply of the Spark Role",
    ("rbac.authorization.k8s.io", "roles", "delete"): "remove it when mode leaves spark",
    ("rbac.authorization.k8s.io", "rolebindings", "get"): "compare the applied hash",
    ("rbac.authorization.k8s.io", "rolebindings", "create"): "bind the Spark Role to its account",
    ("rbac.authorization.k8s.io", "rolebindings", "patch"): "server-side apply of the binding",
    ("rbac.authorization.k8s.io", "rolebindings", "delete"): "remove it when mode leaves spark",
    ("", "secrets", "get"): "check that Secrets named in the spec exist; find the token",
    ("", "secrets", "create"): "generate the node API token and the CA once (never updated)",
    ("", "secrets", "patch"): "apply the node certificates Secret when one is issued or renewed",
    ("", "pods", "list"): "count ready node pods and find their problems for status",
    ("", "pods", "patch"): "annotate node pods so the kubelet refreshes the access document",
    ("", "persistentvolumeclaims", "list"): "status: claims stuck Pending, naming their class",
    ("batch", "jobs", "list"): "status: did the last compaction Job fail",
    ("", "events", "list"): "status: the StatefulSet's FailedCreate, the claims' events",
    ("networking.k8s.io", "networkpolicies", "get"): "compare the applied hash",
    ("networking.k8s.io", "networkpolicies", "create"): "server-side apply creates the policy",
    ("networking.k8s.io", "networkpolicies", "patch"): "server-side apply of the nodes' policy",
    ("networking.k8s.io", "networkpolicies", "delete"): "remove it when networkPolicy is off",
    ("cert-manager.io", "certificates", "get"): "compare the applied hash of the Certificate",
    ("cert-manager.io", "certificates", "create"): "node certificate from a named issuer",
    ("cert-manager.io", "certificates", "patch"): "server-side apply of the Certificate",
    ("cert-manager.io", "certificates", "delete"): "remove it when issuerRef is unset",
    ("", "events", "create"): "post Events on MessageStores",
    ("", "events", "patch"): "kopf aggregates repeated Events",
    ("events.k8s.io", "events", "create"): "post Events through the events.k8s.io API",
    ("events.k8s.io", "events", "patch"): "kopf aggregates repeated Events",
}
# Held only to be granted to the Spark driver (Kubernetes refuses to let anyone grant rights
# it does not hold); absent with rbac.sparkCompaction=false.
SPARK_GRANTABLE = {
    ("", resource, verb): "held only to grant it to the Spark driver's Role"
    for resource in ("pods", "services", "configmaps", "persistentvolumeclaims")
    for verb in ("create", "get", "list", "watch", "patch", "update", "delete", "deletecollection")
} | {
    ("networking.k8s.io", "networkpolicies", verb): "Spark 4 guards its executors with one"
    for verb in ("create", "get", "list", "watch", "patch", "update", "delete")
}


def grants(rules: list[dict]) -> set[tuple[str, str, str]]:
    out = set()
    for rule in rules:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert verb != "*" and resource != "*" and group != "*", rule
                    out.add((group, resource, verb))
    return out


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"messageStore.create": "true", "spark.namespaces": "{default}"},
        {"rbac.create": "false", "serviceAccount.create": "false", "serviceAccount.name": "ops"},
    ],
    ids=["defaults", "with-store", "no-rbac"],
)
def test_helm_lint_is_clean(helm_bin, values):
    proc = run_helm(
        helm_bin, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *set_args(values)
    )
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout


def test_default_render_has_the_crd_and_the_operator_only(render):
    objects = render()
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "CustomResourceDefinition",
        "Deployment",
        "ServiceAccount",
    ]
    import yaml

    crds = sorted(
        (o for o in objects if o["kind"] == "CustomResourceDefinition"),
        key=lambda o: o["metadata"]["name"],
    )
    assert crds == [
        yaml.safe_load((REPO / "crds" / name).read_text())
        for name in ("messagestore.yaml", "messagestoreuser.yaml")
    ]
    for obj in objects:
        if obj["kind"] != "CustomResourceDefinition":
            labels = obj["metadata"]["labels"]
            assert labels["app.kubernetes.io/instance"] == "ms"
            assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_operator_deployment(render):
    objects = render()
    dep = one(objects, "Deployment")
    assert dep["metadata"]["namespace"] == "msgstore-system"
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"]["type"] == "Recreate"
    pod = dep["spec"]["template"]["spec"]
    assert (
        dep["spec"]["selector"]["matchLabels"].items()
        <= dep["spec"]["template"]["metadata"]["labels"].items()
    )
    sa = one(objects, "ServiceAccount")
    assert pod["serviceAccountName"] == sa["metadata"]["name"] == "ms-msgstore-operator"
    binding = one(objects, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ms-msgstore-operator", "namespace": "msgstore-system"}
    ]
    assert binding["roleRef"]["name"] == one(objects, "ClusterRole")["metadata"]["name"]

    (container,) = pod["containers"]
    assert container["image"] == "msgstore:0.1.0"
    command = container["command"]
    assert command[:2] == ["kopf", "run"] and "--standalone" in command
    module = command[command.index("-m") + 1]
    assert importlib.util.find_spec(module) is not None, f"{module} is not importable"
    assert "--all-namespaces" in container["args"]
    liveness_arg = next(a for a in container["args"] if a.startswith("--liveness="))
    probe = container["livenessProbe"]["httpGet"]
    port = next(p for p in container["ports"] if p["name"] == probe["port"])
    assert liveness_arg == f"--liveness=http://0.0.0.0:{port['containerPort']}{probe['path']}"

    resources = container["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert "memory" in resources["limits"]

    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    csc = container["securityContext"]
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"] == {"drop": ["ALL"]}
    # the only writable path is an emptyDir at /tmp
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == "/tmp"
    assert next(v for v in pod["volumes"] if v["name"] == mount["name"])["emptyDir"]

    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MSGSTORE_NODE_IMAGE"] == "msgstore:0.1.0"
    assert env["MSGSTORE_SPARK_IMAGE"] == "msgstore-spark:0.1.0"
    assert env["MSGSTORE_OPERATOR_CLUSTER_DOMAIN"] == "cluster.local"


def test_operator_settings_from_values(render):
    dep = one(
        render(
            {
                "operator.watchNamespaces": "{shop,audit}",
                "operator.logLevel": "debug",
                "image.repository": "registry.example/msgstore",
                "image.tag": "1.2.3",
                "operator.resources.limits.memory": "1Gi",
            }
        ),
        "Deployment",
    )
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/msgstore:1.2.3"
    assert "--all-namespaces" not in container["args"]
    assert "--namespace=shop" in container["args"] and "--namespace=audit" in container["args"]
    assert "--debug" in container["args"]
    assert container["resources"]["limits"]["memory"] == "1Gi"


def test_cluster_role_grants_exactly_the_listed_verbs(render):
    granted = grants(one(render(), "ClusterRole")["rules"])
    expected = {**OPERATOR_GRANTS, **SPARK_GRANTABLE}
    assert granted - expected.keys() == set(), "granted without a documented reason"
    assert expected.keys() - granted == set(), "documented but no longer granted"
    without_spark = grants(one(render({"rbac.sparkCompaction": "false"}), "ClusterRole")["rules"])
    assert without_spark == set(OPERATOR_GRANTS)


def test_cluster_role_covers_what_the_operator_touches():
    """Every kind the operator's API layer addresses is granted, and the operator can grant
    its Spark Role (it must hold every rule it puts in a Role)."""
    from msgstore_operator.children.spark import SPARK_RULES
    from msgstore_operator.kube import PLURALS

    resources = {r for (_g, r, _v) in OPERATOR_GRANTS}
    grantable = set(SPARK_GRANTABLE) | set(OPERATOR_GRANTS)
    for (_api_version, _kind), plural in PLURALS.items():
        assert plural in resources | {"persistentvolumeclaims"}, plural
    for rule in SPARK_RULES:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert (group, resource, verb) in grantable, (group, resource, verb)


def test_never_granted():
    """Cluster-scoped and data-destroying rights stay out of the operator's role."""
    everything = set(OPERATOR_GRANTS) | set(SPARK_GRANTABLE)
    resources = {r for (_g, r, _v) in everything}
    assert not {"nodes", "clusterroles", "clusterrolebindings"} & resources
    cluster_scoped = {
        (g, r, v) for (g, r, v) in everything if r in ("namespaces", "customresourcedefinitions")
    }
    assert {v for (_g, _r, v) in cluster_scoped} == {"list", "watch"}
    assert ("", "secrets", "list") not in everything
    assert ("", "secrets", "delete") not in everything
    assert ("rbac.authorization.k8s.io", "roles", "escalate") not in everything
    assert ("rbac.authorization.k8s.io", "roles", "bind") not in everything


def test_no_rbac_objects_when_rbac_is_off(render):
    objects = render(
        {
            "rbac.create": "false",
            "serviceAccount.create": "false",
            "serviceAccount.name": "ops",
            "spark.namespaces": "{shop}",
        }
    )
    assert not by_kind(objects, "ClusterRole") and not by_kind(objects, "Role")
    assert not by_kind(objects, "ClusterRoleBinding") and not by_kind(objects, "RoleBinding")
    dep = one(objects, "Deployment")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "ops"
    # the shared Spark account itself is still created where asked
    (spark_sa,) = by_kind(objects, "ServiceAccount")
    assert spark_sa["metadata"] == {
        **spark_sa["metadata"],
        "name": "msgstore-spark",
        "namespace": "shop",
    }


def test_shared_spark_identity_per_listed_namespace(render):
    objects = render({"spark.namespaces": "{shop,etl}"})
    roles = by_kind(objects, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["etl", "shop"]
    for binding in by_kind(objects, "RoleBinding"):
        ns = binding["metadata"]["namespace"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "msgstore-spark", "namespace": ns}
        ]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "msgstore-spark",
        }
    # the shared Role grants no more than the operator's own Spark Role
    from msgstore_operator.children.spark import SPARK_RULES

    assert grants(roles[0]["rules"]) <= grants(SPARK_RULES)


SPARK_SUBMIT_NETWORK_POLICY = {
    ("networking.k8s.io", "networkpolicies", verb)
    for verb in ("get", "list", "watch", "create", "update", "patch", "delete")
}


def test_spark_roles_allow_the_executor_network_policy(render):
    """Spark 4.3's submit server-side-applies `<app>-policy` (a NetworkPolicy for the
    executors): the chart's shared Spark Role and the operator's per-store Role both allow it,
    and the operator holds it so it may grant it."""
    from msgstore_operator.children.spark import SPARK_RULES

    objects = render({"spark.namespaces": "{shop}"})
    (role,) = by_kind(objects, "Role")
    assert SPARK_SUBMIT_NETWORK_POLICY <= grants(role["rules"]), role["rules"]
    assert SPARK_SUBMIT_NETWORK_POLICY <= grants(SPARK_RULES), SPARK_RULES
    cluster_role = one(objects, "ClusterRole")
    assert SPARK_SUBMIT_NETWORK_POLICY <= grants(cluster_role["rules"])
    without_spark = one(render({"rbac.sparkCompaction": "false"}), "ClusterRole")
    # Without Spark the operator keeps only what its nodes' own NetworkPolicy needs.
    assert not SPARK_SUBMIT_NETWORK_POLICY <= grants(without_spark["rules"])


def test_optional_messagestore_from_values(render):
    objects = render(
        {
            "messageStore.create": "true",
            "messageStore.name": "orders",
            "messageStore.spec.replicas": "5",
            "messageStore.spec.compaction.mode": "spark",
            "messageStore.spec.compaction.schedule": "0 3 * * *",
        }
    )
    store = one(objects, "MessageStore")
    assert store["apiVersion"] == "msgstore.io/v1alpha1"
    assert store["metadata"]["name"] == "orders"
    assert store["metadata"]["namespace"] == "msgstore-system"
    spec = store["spec"]
    assert spec["replicas"] == 5
    assert "image" not in spec  # the operator's default: this chart's image
    assert spec["topics"] == [{"name": "orders", "partitions": 6}]
    assert spec["compaction"] == {"mode": "spark", "schedule": "0 3 * * *"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"operator.replica": "2"}, "additional properties 'replica' not allowed"),
        ({"operator.replicas": "2"}, "maximum"),
        ({"operator.logLevel": "loud"}, "/operator/logLevel"),
        ({"image.pullPolicy": "Sometimes"}, "/image/pullPolicy"),
        ({"messageStore.name": "Bad_Name"}, "/messageStore/name"),
        ({"operator.watchNamespaces": "{Bad_NS}"}, "/operator/watchNamespaces"),
        ({"operator.livenessPort": "80"}, "/operator/livenessPort"),
        ({"spark.namespaces": "{a,a}"}, "/spark/namespaces"),
        ({"serviceAccount.create": "false"}, "serviceAccount.name is required"),
        ({"tls.enabled": "maybe"}, "/tls/enabled"),
        ({"tls.certificateValidityDays": "0"}, "/tls/certificateValidityDays"),
        ({"networkPolicy.enable": "false"}, "additional properties 'enable' not allowed"),
        ({"podSecurity.restricted": "no"}, "/podSecurity/restricted"),
    ],
)
def test_bad_values_fail_with_a_clear_message(helm_bin, values, message):
    proc = run_helm(
        helm_bin,
        "template",
        "ms",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        *set_args(values),
        check=False,
    )
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert message in proc.stderr, proc.stderr


def test_chart_package_contains_the_crd(helm_bin, tmp_path: Path):
    run_helm(helm_bin, "package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("msgstore-*.tgz")
    import tarfile

    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "msgstore/crds/messagestore.yaml" in names
    assert "msgstore/crds/messagestoreuser.yaml" in names
    assert "msgstore/values.schema.json" in names
    assert "msgstore/templates/NOTES.txt" in names


def test_operator_pod_is_restricted_and_gets_the_security_defaults(render):
    from msgstore_operator.pod_security import restricted_violations

    dep = one(render(), "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["MSGSTORE_OPERATOR_TLS"]["value"] == "true"
    assert env["MSGSTORE_OPERATOR_NETWORK_POLICY"]["value"] == "true"
    assert env["MSGSTORE_OPERATOR_RESTRICTED_PODS"]["value"] == "true"
    assert env["MSGSTORE_OPERATOR_CERT_VALIDITY_DAYS"]["value"] == "90"
    assert env["MSGSTORE_OPERATOR_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.namespace"
    )
    off = one(
        render(
            {
                "tls.enabled": "false",
                "networkPolicy.enabled": "false",
                "podSecurity.restricted": "false",
                "tls.certificateValidityDays": "30",
            }
        ),
        "Deployment",
    )
    env = {
        e["name"]: e.get("value") for e in off["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["MSGSTORE_OPERATOR_TLS"] == "false"
    assert env["MSGSTORE_OPERATOR_NETWORK_POLICY"] == "false"
    assert env["MSGSTORE_OPERATOR_RESTRICTED_PODS"] == "false"
    assert env["MSGSTORE_OPERATOR_CERT_VALIDITY_DAYS"] == "30"


def test_operator_reads_the_values_it_is_given():
    """The env names the chart sets are the ones the operator reads."""
    from msgstore_operator.config import SettingsError, read_settings

    d = read_settings(
        {
            "MSGSTORE_OPERATOR_TLS": "false",
            "MSGSTORE_OPERATOR_NETWORK_POLICY": "false",
            "MSGSTORE_OPERATOR_RESTRICTED_PODS": "false",
            "MSGSTORE_OPERATOR_CERT_VALIDITY_DAYS": "30",
        }
    ).security
    assert (d.tls, d.network_policy, d.restricted_pods) == (False, False, False)
    assert d.certificate_validity_days == 30
    assert read_settings({}).security.tls is True
    with pytest.raises(SettingsError, match="MSGSTORE_OPERATOR_TLS"):
        read_settings({"MSGSTORE_OPERATOR_TLS": "maybe"})
    with pytest.raises(SettingsError, match="VALIDITY_DAYS"):
        read_settings({"MSGSTORE_OPERATOR_CERT_VALIDITY_DAYS": "0"})
