"""A real Prometheus (built by build.sh) on loopback, scraping a local cluster's nodes with
the chart's alert rules, and the queries the tests ask it through its HTTP API."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
import yaml

from storage_node.cli.local import free_port
from tests.integration.observability.referenced import RULES_FILE

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


class Prometheus:
    def __init__(self, bin_dir: Path, workdir: Path) -> None:
        self.bin = bin_dir / "prometheus"
        self.dir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, addresses: list[str], ca_file: str | None) -> Prometheus:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "rules.yaml").write_text(yaml.safe_dump(fast_rules(RULES_FILE)))
        scheme = urlsplit(addresses[0]).scheme
        job: dict[str, Any] = {
            "job_name": "msgstore",
            "scheme": scheme,
            "scrape_interval": "1s",
            "static_configs": [{"targets": [urlsplit(a).netloc for a in addresses]}],
        }
        if ca_file:
            job["tls_config"] = {"ca_file": ca_file}
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(self.dir / "rules.yaml")],
            "scrape_configs": [job],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = open(self.dir / "prometheus.log", "ab")  # noqa: SIM115 - the process holds it
        self.proc = subprocess.Popen(
            [
                str(self.bin),
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.wait_for(lambda: self._ready(), "Prometheus ready", 120)
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited:\n{(self.dir / 'prometheus.log').read_text()}")
        try:
            return requests.get(self.url + "/-/ready", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def query(self, expr: str) -> list[dict[str, Any]]:
        resp = requests.get(self.url + "/api/v1/query", params={"query": expr}, timeout=30)
        doc = resp.json()
        assert resp.status_code == 200 and doc["status"] == "success", (expr, doc)
        return list(doc["data"]["result"])

    def firing(self) -> list[dict[str, str]]:
        """Labels of the alerts firing now."""
        doc = requests.get(self.url + "/api/v1/alerts", timeout=30).json()
        return [a["labels"] for a in doc["data"]["alerts"] if a["state"] == "firing"]

    def wait_for(self, check: Callable[[], Any], what: str, timeout: float = 120) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not seen within {timeout}s")
            time.sleep(0.5)
