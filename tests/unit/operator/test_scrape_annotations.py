"""The prometheus.io/* annotations on node pods: set when the operator is told to (the chart's
monitoring.scrapeAnnotations), with the node's port and scheme; a spec's own annotations win."""

from __future__ import annotations

from msgstore_operator.children import Owner, build_statefulset
from msgstore_operator.config import read_settings
from msgstore_operator.spec import SecurityDefaults, parse_spec

OWNER = Owner(name="demo", namespace="ns1", uid="uid-123")


def pod_annotations(spec_doc: dict, scrape: bool) -> dict[str, str]:
    spec = parse_spec(spec_doc, defaults=SecurityDefaults(scrape_annotations=scrape))
    sts = build_statefulset(OWNER, spec, 3, "hash", None)
    return sts["spec"]["template"]["metadata"]["annotations"]


def test_annotations_follow_port_and_scheme() -> None:
    on = pod_annotations({"port": 9000}, True)
    assert on["prometheus.io/scrape"] == "true"
    assert on["prometheus.io/port"] == "9000"
    assert on["prometheus.io/path"] == "/metrics"
    assert on["prometheus.io/scheme"] == "https"  # TLS is on by default
    plain = pod_annotations({"tls": {"enabled": False}}, True)
    assert plain["prometheus.io/scheme"] == "http"


def test_off_by_default_and_a_spec_annotation_wins() -> None:
    assert not any(k.startswith("prometheus.io/") for k in pod_annotations({}, False))
    own = {"podTemplate": {"annotations": {"prometheus.io/scrape": "false"}}}
    assert pod_annotations(own, True)["prometheus.io/scrape"] == "false"


def test_the_operator_reads_the_setting() -> None:
    assert read_settings({}).security.scrape_annotations is False
    on = read_settings({"MSGSTORE_OPERATOR_SCRAPE_ANNOTATIONS": "true"})
    assert on.security.scrape_annotations is True
