"""The MessageStore CRD on a real API server: it installs, defaults, and rejects every
invalid resource with a message a user understands, changing nothing.

No operator runs here: these are the API server's own schema and CEL checks.
"""

from __future__ import annotations

import copy
import json

import pytest
from operator_support import CRD_NAME, apply_json, install_crd, remove_crd, store_manifest

from storage_node.formats.limits import MAX_PARTITIONS


@pytest.fixture(scope="module")
def ns(k8s_cluster):
    install_crd(k8s_cluster)
    namespace = k8s_cluster.new_namespace("crd")
    yield namespace
    k8s_cluster.run_kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    remove_crd(k8s_cluster)


def rejected(cluster, namespace, obj):
    """Apply must fail; returns the error text."""
    result = apply_json(cluster, namespace, obj, check=False)
    assert result.returncode != 0, f"accepted: {json.dumps(obj)}\n{result.stdout}"
    return result.stderr


def test_crd_is_established_with_subresources_and_columns(k8s_cluster, ns):
    crd = k8s_cluster.get_json("crd", CRD_NAME)
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["names"]["shortNames"] == ["ms"]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert "status" in version["subresources"]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Replicas", "Ready", "Phase", "Age"]
    names = {c["type"]: c for c in crd["status"]["conditions"]}
    assert names["Established"]["status"] == "True"


def test_defaults_are_applied_by_the_api_server(k8s_cluster, ns):
    apply_json(k8s_cluster, ns, store_manifest("defaults", topics=[{"name": "t"}]))
    spec = k8s_cluster.get_json("ms", "defaults", "-n", ns)["spec"]
    assert spec["flush"] == {
        "mode": "sync",
        "maxAgeMs": 200,
        "maxMessages": 100000,
        "maxBytes": 16777216,
    }
    assert spec["topics"] == [{"name": "t", "partitions": 1, "compression": "lz4"}]
    assert spec["compaction"]["mode"] == "node" and spec["auth"]["enabled"] is True
    assert spec["storage"]["deleteClaim"] is False
    printed = k8s_cluster.run_kubectl("get", "ms", "defaults", "-n", ns).stdout
    assert printed.split()[:5] == ["NAME", "REPLICAS", "READY", "PHASE", "AGE"]


CREATE_CASES = {
    "duplicate topic": (
        {"topics": [{"name": "a"}, {"name": "a", "partitions": 2}]},
        "topic names must be unique",
    ),
    "spark without schedule": (
        {"compaction": {"mode": "spark"}},
        "compaction.schedule is required",
    ),
    "tiering without url": ({"tiering": {"enabled": True}}, "tiering.url is required"),
    "topic named ..": ({"topics": [{"name": ".."}]}, "a topic cannot be named '.' or '..'"),
    "topic name with a slash": ({"topics": [{"name": "a/b"}]}, "spec.topics[0].name"),
    "zero replicas": ({"replicas": 0}, "spec.replicas: Invalid value: 0"),
    "too many partitions": (
        {"topics": [{"name": "a", "partitions": MAX_PARTITIONS + 1}]},
        "spec.topics[0].partitions",
    ),
    "unknown compression": (
        {"topics": [{"name": "a", "compression": "zip"}]},
        'supported values: "none", "lz4"',
    ),
    "unknown flush mode": ({"flush": {"mode": "never"}}, 'supported values: "sync", "async"'),
    "bad storage size": ({"storage": {"size": "lots"}}, "spec.storage.size"),
    "bad tiering url": ({"tiering": {"enabled": True, "url": "ftp://x"}}, "spec.tiering.url"),
    "unknown field": ({"replica": 3}, 'unknown field "spec.replica"'),
}


@pytest.mark.parametrize("case", sorted(CREATE_CASES))
def test_invalid_resource_is_rejected_and_not_created(k8s_cluster, ns, case):
    spec, message = CREATE_CASES[case]
    name = "bad-" + str(sorted(CREATE_CASES).index(case))
    error = rejected(k8s_cluster, ns, store_manifest(name, **spec))
    assert message in error
    missing = k8s_cluster.run_kubectl("get", "ms", name, "-n", ns, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_bad_name_is_rejected(k8s_cluster, ns):
    too_long = "a" * 41
    for name in (too_long, "9lives"):
        error = rejected(k8s_cluster, ns, store_manifest(name))
        assert "metadata.name must be a DNS label of at most 40 characters" in error


UPDATE_CASES = {
    "partitions reduced": (
        lambda s: s["topics"][0].update(partitions=2),
        "a topic's partitions cannot be reduced",
    ),
    "topic removed": (lambda s: s.update(topics=[]), "a topic cannot be removed once declared"),
    "storage class changed": (
        lambda s: s["storage"].update(storageClassName="other"),
        "storage.storageClassName is immutable",
    ),
    "storage class removed": (
        lambda s: s["storage"].pop("storageClassName"),
        "storage.storageClassName is immutable",
    ),
    "storage size changed": (
        lambda s: s["storage"].update(size="2Gi"),
        "storage.size is immutable",
    ),
}


@pytest.mark.parametrize("case", sorted(UPDATE_CASES))
def test_invalid_update_is_rejected_and_changes_nothing(k8s_cluster, ns, case):
    change, message = UPDATE_CASES[case]
    name = "upd-" + str(sorted(UPDATE_CASES).index(case))
    original = store_manifest(name, topics=[{"name": "orders", "partitions": 4}])
    apply_json(k8s_cluster, ns, original)
    before = k8s_cluster.get_json("ms", name, "-n", ns)
    updated = copy.deepcopy(original)
    change(updated["spec"])
    error = rejected(k8s_cluster, ns, updated)
    assert message in error
    after = k8s_cluster.get_json("ms", name, "-n", ns)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_valid_updates_are_accepted(k8s_cluster, ns):
    original = store_manifest("grow", topics=[{"name": "orders", "partitions": 2}])
    apply_json(k8s_cluster, ns, original)
    grown = copy.deepcopy(original)
    grown["spec"]["topics"] = [{"name": "orders", "partitions": 6}, {"name": "audit"}]
    grown["spec"]["replicas"] = 5
    apply_json(k8s_cluster, ns, grown)
    spec = k8s_cluster.get_json("ms", "grow", "-n", ns)["spec"]
    assert [t["partitions"] for t in spec["topics"]] == [6, 1] and spec["replicas"] == 5
