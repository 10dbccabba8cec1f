"""The Python defaults agree with the CRD's, so builders see what the API server stores."""

from pathlib import Path

import yaml
from msgstore_operator.spec import StoreSpec, parse_spec

CRD = Path(__file__).resolve().parents[3] / "crds" / "messagestore.yaml"


def crd_spec_schema():
    crd = yaml.safe_load(CRD.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def apply_defaults(schema, value):
    """Structural defaulting as the API server does it (objects and arrays only)."""
    if schema.get("type") == "object" and isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = sub["default"]
            if key in value:
                value[key] = apply_defaults(sub, value[key])
    if schema.get("type") == "array" and isinstance(value, list):
        return [apply_defaults(schema["items"], v) for v in value]
    return value


def test_empty_spec_gets_the_crd_defaults():
    server_defaulted = apply_defaults(crd_spec_schema(), {"topics": [{"name": "t"}]})
    assert parse_spec(server_defaulted) == parse_spec({"topics": [{"name": "t"}]})


def test_dataclass_defaults_are_the_crd_defaults():
    assert parse_spec(apply_defaults(crd_spec_schema(), {})) == StoreSpec()


def test_parse_reads_every_section():
    spec = parse_spec(
        {
            "replicas": 5,
            "image": "reg/msgstore:1",
            "storage": {"size": "1Gi", "storageClassName": "fast", "deleteClaim": True},
            "flush": {"mode": "async", "maxAgeMs": 50, "maxMessages": 10, "maxBytes": 2048},
            "index": {"slots": 100, "items": 400},
            "topics": [{"name": "a", "partitions": 4, "compression": "none", "retentionHours": 2}],
            "tiering": {"enabled": True, "url": "s3://b/p", "credentialsSecret": "s3"},
            "compaction": {"mode": "spark", "schedule": "0 * * * *", "spark": {"executors": 4}},
            "auth": {"enabled": True, "tokenSecret": "tok", "tokenKey": "k"},
            "podTemplate": {"labels": {"team": "x"}, "tolerations": [{"key": "k"}]},
        }
    )
    assert spec.replicas == 5 and spec.storage.storage_class_name == "fast"
    assert spec.flush.mode == "async" and spec.index_items == 400
    assert spec.topics[0].partitions == 4 and spec.topic_retention_hours(spec.topics[0]) == 2
    assert spec.tiering.url == "s3://b/p" and spec.compaction.spark.executors == 4
    assert spec.auth.token_secret == "tok" and spec.pod_template.labels == {"team": "x"}


def test_replication_fields_are_read_and_checked():
    from msgstore_operator.spec import replication_problem

    spec = parse_spec({"replicas": 3, "replicationFactor": 3, "minInSync": 2})
    assert (spec.replication_factor, spec.min_in_sync) == (3, 2)
    assert replication_problem(spec) is None
    assert replication_problem(parse_spec({})) is None
    assert "at least 3" in replication_problem(parse_spec({"replicas": 2, "replicationFactor": 3}))
    assert "minInSync" in replication_problem(parse_spec({"replicationFactor": 2, "minInSync": 3}))
    assert "1, 2 or 3" in replication_problem(parse_spec({"replicationFactor": 4}))


def test_the_crds_bound_a_topics_partitions_as_the_nodes_do():
    """Both CRD copies (crds/ and the chart's) take what a node takes: 1..MAX_PARTITIONS."""
    from storage_node.formats.limits import MAX_PARTITIONS

    for path in (CRD, CRD.parents[1] / "helm" / "msgstore" / "crds" / "messagestore.yaml"):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        partitions = spec["properties"]["topics"]["items"]["properties"]["partitions"]
        assert (partitions["minimum"], partitions["maximum"]) == (1, MAX_PARTITIONS), path
