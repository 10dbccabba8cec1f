"""The chart's monitoring parts, rendered by the real helm binary: off by default; the
PodMonitor, the PrometheusRule (rendered from the plain rules file, unchanged) and the
dashboards ConfigMap (with the Grafana sidecar's label) when enabled; a clear failure without
the Prometheus Operator's API; the operator told to annotate node pods unless the PodMonitor
scrapes them."""

from __future__ import annotations

import json

import pytest
import yaml
from chart_tools import CHART, KUBE_VERSION, by_kind, one, run_helm, set_args

MONITORING_API = ("--api-versions", "monitoring.coreos.com/v1")
FILES = CHART / "files" / "monitoring"


def operator_env(objects: list[dict]) -> dict[str, str]:
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_off_by_default_but_pods_are_annotated(render):
    objects = render()
    for kind in ("PodMonitor", "PrometheusRule", "ConfigMap"):
        assert by_kind(objects, kind) == []
    assert operator_env(objects)["MSGSTORE_OPERATOR_SCRAPE_ANNOTATIONS"] == "true"
    off = render({"monitoring.scrapeAnnotations": "false"})
    assert operator_env(off)["MSGSTORE_OPERATOR_SCRAPE_ANNOTATIONS"] == "false"


def test_pod_monitor_scrapes_node_pods_over_https(render):
    objects = render(
        {"monitoring.podMonitor.enabled": "true", "monitoring.podMonitor.labels.release": "kps"},
        *MONITORING_API,
    )
    pm = one(objects, "PodMonitor")
    assert pm["metadata"]["labels"]["release"] == "kps"
    assert pm["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "msgstore",
        "app.kubernetes.io/component": "node",
    }
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == ("http", "/metrics", "https")
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    # the PodMonitor scrapes: no annotations as well (no target twice)
    assert operator_env(objects)["MSGSTORE_OPERATOR_SCRAPE_ANNOTATIONS"] == "false"
    plain = one(
        render({"monitoring.podMonitor.enabled": "true", "tls.enabled": "false"}, *MONITORING_API),
        "PodMonitor",
    )
    (endpoint,) = plain["spec"]["podMetricsEndpoints"]
    assert endpoint["scheme"] == "http" and "tlsConfig" not in endpoint


def test_prometheus_rule_is_the_plain_rules_file(render):
    rule = one(
        render({"monitoring.prometheusRule.enabled": "true"}, *MONITORING_API), "PrometheusRule"
    )
    plain = yaml.safe_load((FILES / "msgstore-rules.yaml").read_text())
    assert rule["spec"]["groups"] == plain["groups"]
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert len(alerts) == 9 and len(set(alerts)) == 9


def test_dashboards_config_map_for_the_grafana_sidecar(render):
    cm = one(
        render(
            {
                "monitoring.dashboards.enabled": "true",
                "monitoring.dashboards.namespace": "grafana",
                "monitoring.dashboards.annotations.grafana_folder": "msgstore",
            }
        ),
        "ConfigMap",
    )
    assert cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "msgstore"}
    expected = {f"msgstore-{p.name}": p for p in sorted((FILES / "dashboards").glob("*.json"))}
    assert sorted(cm["data"]) == sorted(expected) and len(expected) == 4
    for key, path in expected.items():
        assert json.loads(cm["data"][key]) == json.loads(path.read_text())


@pytest.mark.parametrize(
    "value", ["monitoring.podMonitor.enabled", "monitoring.prometheusRule.enabled"]
)
def test_operator_kinds_without_their_api_fail_clearly(helm_bin, value):
    proc = run_helm(
        helm_bin,
        "template",
        "ms",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        *set_args({value: "true"}),
        check=False,
    )
    assert proc.returncode != 0 and proc.stdout == ""
    assert "monitoring.coreos.com/v1 API" in proc.stderr, proc.stderr


def test_bad_monitoring_values_are_refused(helm_bin):
    proc = run_helm(
        helm_bin,
        "template",
        "ms",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        *set_args({"monitoring.podMonitor.enable": "true"}),
        check=False,
    )
    assert proc.returncode != 0
    assert "additional properties 'enable' not allowed" in proc.stderr, proc.stderr


def test_lint_is_clean_with_the_dashboards_on(helm_bin):
    """(`helm lint` cannot be told of the Prometheus Operator's API: its kinds are rendered
    by `helm template` above.)"""
    values = {"monitoring.dashboards.enabled": "true", "monitoring.scrapeAnnotations": "false"}
    proc = run_helm(
        helm_bin, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *set_args(values)
    )
    assert "0 chart(s) failed" in proc.stdout, proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout
