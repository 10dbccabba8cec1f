"""`make test` runs the tests that need no build first, while the builds run in the background
(tests/conftest.py `build_stage`): a module that needs Prometheus' Go build comes after one
that needs nothing, whatever their names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def collected(*paths: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_a_module_needing_the_prometheus_build_runs_after_those_needing_none():
    ids = collected(
        "tests/integration/observability/test_rules.py",  # prometheus_bin_dir
        "tests/integration/reliability/test_bad_input.py",  # no build
    )
    files = [i.split("::")[0] for i in ids]
    first_rules = files.index("tests/integration/observability/test_rules.py")
    assert set(files[:first_rules]) == {"tests/integration/reliability/test_bad_input.py"}
    assert set(files[first_rules:]) == {"tests/integration/observability/test_rules.py"}
