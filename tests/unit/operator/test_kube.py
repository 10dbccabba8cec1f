"""API paths and the applied-hash that lets an unchanged child go unsent."""

from msgstore_operator import naming
from msgstore_operator.kube import applied_hash, desired_hash, object_path


def test_object_paths():
    assert object_path("v1", "ConfigMap", "ns", "a") == "/api/v1/namespaces/ns/configmaps/a"
    assert object_path("apps/v1", "StatefulSet", "ns") == "/apis/apps/v1/namespaces/ns/statefulsets"
    assert (
        object_path("apps/v1", "Deployment", "ns", "c")
        == "/apis/apps/v1/namespaces/ns/deployments/c"
    )
    assert (
        object_path("msgstore.io/v1alpha1", "MessageStore", "ns", "d")
        == "/apis/msgstore.io/v1alpha1/namespaces/ns/messagestores/d"
    )


def test_hash_ignores_its_own_annotation_and_key_order():
    obj = {"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "1", "y": "2"}}
    stamped = {
        "data": {"y": "2", "x": "1"},
        "metadata": {"name": "a", "annotations": {naming.APPLIED_HASH_ANNOTATION: "old"}},
        "kind": "ConfigMap",
    }
    assert desired_hash(stamped) == desired_hash(
        {**obj, "metadata": {"name": "a", "annotations": {}}}
    )
    assert desired_hash(stamped)  # a short hex digest
    changed = {**obj, "data": {"x": "1", "y": "3"}}
    assert desired_hash(changed) != desired_hash(obj)
    assert stamped["metadata"]["annotations"] == {naming.APPLIED_HASH_ANNOTATION: "old"}


def test_applied_hash_of_live_objects():
    assert applied_hash(None) is None
    assert applied_hash({"metadata": {}}) is None
    live = {"metadata": {"annotations": {naming.APPLIED_HASH_ANNOTATION: "abc"}}}
    assert applied_hash(live) == "abc"
