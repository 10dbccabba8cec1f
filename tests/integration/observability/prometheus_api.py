"""What the tests ask a real Prometheus through its HTTP API, wherever it runs (a process on
loopback, a pod on kind): the chart's rules with short windows, queries, firing alerts, and
the check that every dashboard panel and every rule selector returns a series."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.integration.observability.referenced import dashboards, panel_expressions, rules

# Grafana's variables, as the tests give them to Prometheus
PANEL_VARIABLES = {"$__rate_interval": "30s", "$job": "msgstore", "$topic": ".+", "$group": ".+"}
SELECTOR = re.compile(r"\b(msgstore_[a-z0-9_]+|up)(\{[^}]*\})?")


def fast_rules(rules_file: Path, window: str = "20s", hold: str = "2s") -> dict[str, Any]:
    """The rules with short ``for:`` and range windows, so a test sees them fire in seconds."""
    doc = yaml.safe_load(rules_file.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = hold
            rule["expr"] = re.sub(r"\[(10|15)m\]", f"[{window}]", rule["expr"])
    return doc


def selectors(expr: str) -> list[str]:
    """The vector selectors of a PromQL expression (metric name and matchers)."""
    return [m.group(0) for m in SELECTOR.finditer(expr)]


def panel_query(expr: str) -> str:
    for name, value in PANEL_VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def named(alerts: list[dict[str, str]], alertname: str) -> list[dict[str, str]]:
    return [a for a in alerts if a["alertname"] == alertname]


class PrometheusAPI:
    """Prometheus' HTTP API at ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        resp = requests.get(self.url + "/api/v1/query", params={"query": expr}, timeout=30)
        doc = resp.json()
        assert resp.status_code == 200 and doc["status"] == "success", (expr, doc)
        return list(doc["data"]["result"])

    def firing(self, alertname: str | None = None) -> list[dict[str, str]]:
        """Labels of the alerts firing now (of one name, when given)."""
        doc = requests.get(self.url + "/api/v1/alerts", timeout=30).json()
        alerts = [a["labels"] for a in doc["data"]["alerts"] if a["state"] == "firing"]
        return named(alerts, alertname) if alertname else alerts

    def wait_for(
        self, check: Callable[[], Any], what: str, timeout: float = 120, interval: float = 0.5
    ) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not seen within {timeout}s")
            time.sleep(interval)

    def wait_every_query_answers(self, panel_timeout: float = 90, rule_timeout: float = 30) -> None:
        """Every expression of every dashboard panel, and every selector of every rule,
        returns at least one series (each waited for: series appear as scrapes come in)."""
        for name, board in dashboards().items():
            for expr in panel_expressions(board):
                query = panel_query(expr)
                self.wait_for(lambda q=query: self.query(q), f"{name} panel {query}", panel_timeout)
        for rule in rules():
            for selector in selectors(rule["expr"]):
                self.wait_for(
                    lambda s=selector: self.query(s), f"{rule['alert']}: {selector}", rule_timeout
                )
