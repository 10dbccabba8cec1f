"""The alert rules pass `promtool check rules`, and `promtool test rules` runs one test that
fires and one that stays silent per alert (rules_test.yaml), with promtool built from the
Prometheus Go module. Every alert of the rules file has both tests and a runbook section."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.integration.observability.referenced import OPERATIONS, RULES_FILE, rules

HERE = Path(__file__).resolve().parent
RULES_TESTS = HERE / "rules_test.yaml"


def promtool(bin_dir: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_dir / "promtool"), *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_promtool_checks_the_rules_file(prometheus_bin_dir: Path) -> None:
    proc = promtool(prometheus_bin_dir, "check", "rules", str(RULES_FILE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules())} rules found" in proc.stdout, proc.stdout


def test_promtool_unit_tests_fire_and_stay_silent(prometheus_bin_dir: Path, tmp_path: Path) -> None:
    # promtool compares annotations verbatim: the unit tests run on a copy without them
    doc = yaml.safe_load(RULES_FILE.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / RULES_FILE.name).write_text(yaml.safe_dump(doc))
    (tmp_path / RULES_TESTS.name).write_text(RULES_TESTS.read_text())
    proc = promtool(prometheus_bin_dir, "test", "rules", RULES_TESTS.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout, proc.stdout


def test_a_broken_expectation_fails(prometheus_bin_dir: Path, tmp_path: Path) -> None:
    """The unit tests can fail: the same file expecting the disk alert silent at 90 % does."""
    doc = yaml.safe_load(RULES_FILE.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / RULES_FILE.name).write_text(yaml.safe_dump(doc))
    tests = yaml.safe_load(RULES_TESTS.read_text())
    fires = next(t for t in tests["tests"] if t["name"] == "disk fires above 85 %")
    fires["alert_rule_test"][0]["exp_alerts"] = []
    tests["tests"] = [fires]
    (tmp_path / RULES_TESTS.name).write_text(yaml.safe_dump(tests))
    proc = promtool(prometheus_bin_dir, "test", "rules", RULES_TESTS.name, cwd=tmp_path)
    assert proc.returncode != 0, proc.stdout


def test_every_alert_has_a_firing_and_a_silent_test_and_a_runbook() -> None:
    tests = yaml.safe_load(RULES_TESTS.read_text())["tests"]
    runbook = OPERATIONS.read_text()
    for rule in rules():
        name = rule["alert"]
        cases = [
            case["exp_alerts"]
            for test in tests
            for case in test["alert_rule_test"]
            if case["alertname"] == name
        ]
        assert any(cases), f"no test where {name} fires"
        assert any(c == [] for c in cases), f"no test where {name} stays silent"
        assert re.search(rf"^### {name}$", runbook, re.M), f"no runbook section for {name}"
        assert rule["annotations"]["runbook"] == f"docs/OPERATIONS.md#{name.lower()}"
        assert rule["labels"]["severity"] in ("warning", "critical")
