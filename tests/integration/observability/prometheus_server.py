"""A real Prometheus (built by build.sh) on loopback, scraping a local cluster's nodes with
the chart's alert rules (the queries are prometheus_api.py's)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
import yaml

from storage_node.cli.local import free_port
from tests.integration.observability.prometheus_api import PrometheusAPI, fast_rules
from tests.integration.observability.referenced import RULES_FILE


class Prometheus(PrometheusAPI):
    """A Prometheus process on loopback (stop it with ``stop``)."""

    def __init__(self, bin_dir: Path, workdir: Path) -> None:
        self.bin = bin_dir / "prometheus"
        self.dir = workdir
        self.port = free_port()
        super().__init__(f"http://127.0.0.1:{self.port}")
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
