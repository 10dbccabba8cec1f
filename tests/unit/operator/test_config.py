"""The operator's settings: one model, the documented names and defaults, clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from msgstore_operator.config import OperatorSettings, SettingsError, env_name, read_settings
from msgstore_operator.spec import SecurityDefaults

REPO = Path(__file__).resolve().parents[3]


def test_defaults_are_the_documented_ones():
    s = read_settings({})
    assert s.interval_s == 10.0 and s.cluster_domain == "cluster.local"
    assert s.default_images == (None, None)
    assert s.security == SecurityDefaults()
    assert s.namespace is None and s.claim_grace_s == 120.0
    assert s.failover_timeout_s == 5.0


def test_every_variable_is_read():
    env = {
        "MSGSTORE_OPERATOR_INTERVAL_S": "2.5",
        "MSGSTORE_OPERATOR_CLUSTER_DOMAIN": "k8s.example",
        "MSGSTORE_NODE_IMAGE": "node:1",
        "MSGSTORE_SPARK_IMAGE": "spark:1",
        "MSGSTORE_OPERATOR_TLS": "off",
        "MSGSTORE_OPERATOR_NETWORK_POLICY": "0",
        "MSGSTORE_OPERATOR_RESTRICTED_PODS": "no",
        "MSGSTORE_OPERATOR_SCRAPE_ANNOTATIONS": "yes",
        "MSGSTORE_OPERATOR_CERT_VALIDITY_DAYS": "30",
        "MSGSTORE_OPERATOR_NAMESPACE": "ops",
        "MSGSTORE_OPERATOR_CLAIM_GRACE_S": "3",
        "MSGSTORE_OPERATOR_FAILOVER_TIMEOUT_S": "7.5",
        "MSGSTORE_UNRELATED": "ignored",
    }
    s = read_settings(env)
    assert (s.interval_s, s.cluster_domain, s.namespace, s.claim_grace_s) == (
        2.5,
        "k8s.example",
        "ops",
        3.0,
    )
    assert s.default_images == ("node:1", "spark:1")
    assert s.failover_timeout_s == 7.5
    assert s.security == SecurityDefaults(False, False, False, 30, scrape_annotations=True)
    assert sorted(env_name(f) for f in OperatorSettings.model_fields) == sorted(
        n for n in env if n != "MSGSTORE_UNRELATED"
    )


def test_empty_values_are_unset():
    s = read_settings({"MSGSTORE_OPERATOR_NAMESPACE": "", "MSGSTORE_OPERATOR_TLS": " "})
    assert s.namespace is None and s.tls is True


@pytest.mark.parametrize(
    "name, value",
    [
        ("MSGSTORE_OPERATOR_INTERVAL_S", "fast"),
        ("MSGSTORE_OPERATOR_INTERVAL_S", "0"),
        ("MSGSTORE_OPERATOR_TLS", "maybe"),
        ("MSGSTORE_OPERATOR_CERT_VALIDITY_DAYS", "3651"),
        ("MSGSTORE_OPERATOR_CLAIM_GRACE_S", "-1"),
    ],
)
def test_a_bad_value_names_its_variable(name, value):
    with pytest.raises(SettingsError, match=f"^{name}='{re.escape(value)}': "):
        read_settings({name: value, "MSGSTORE_OPERATOR_CLUSTER_DOMAIN": "x"})


def test_every_variable_is_documented_and_the_chart_sets_only_known_ones():
    doc = (REPO / "docs" / "CONFIG.md").read_text()
    names = {env_name(f) for f in OperatorSettings.model_fields}
    for name in names:
        assert f"| `{name}` |" in doc, name
    chart = (REPO / "helm" / "msgstore" / "templates" / "deployment.yaml").read_text()
    set_by_chart = set(re.findall(r"name: (MSGSTORE_\w+)", chart))
    assert set_by_chart and set_by_chart <= names
