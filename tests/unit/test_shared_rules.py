"""The rules every layer shares (formats/names, formats/partitioning) and the demo's paths."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from storage_node.errors import InvalidName
from storage_node.formats.names import check_name, is_valid_name
from storage_node.formats.partitioning import RoundRobin


@pytest.mark.parametrize("name", ["orders", "a", "A.b_c-9", "x" * 200, "..a", "a.."])
def test_names_that_follow_the_rule(name):
    assert is_valid_name(name)
    assert check_name("topic", name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a b", "ü", "x" * 201, None, 7])
def test_names_that_break_the_rule(name):
    assert not is_valid_name(name)
    with pytest.raises(InvalidName, match="invalid group name"):
        check_name("group", name)


def test_round_robin_is_per_topic_and_shared_by_single_and_run_calls():
    rr = RoundRobin()
    assert [rr.next("a", [4, 5, 6]) for _ in range(4)] == [4, 5, 6, 4]
    assert rr.next("b", range(3)) == 0  # another topic starts at its own beginning
    assert rr.run("a", [4, 5, 6], 4).tolist() == [5, 6, 4, 5]
    assert rr.run("a", [4, 5, 6], 1).dtype == np.int64
    assert rr.next("b", [7, 8]) == 8


def test_demo_without_its_spark_jobs_says_so_and_starts_nothing(tmp_path):
    jobs, sample = tmp_path / "jobs", tmp_path / "sample"
    jobs.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "storage_node.demo", "--jobs-dir", str(jobs)]
        + ["--sample-dir", str(sample)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "MSGSTORE_DEMO_LOADER": "spark"},
    )
    assert proc.returncode == 2, proc.stderr
    assert f"no Spark jobs ingest.py, compact.py in {jobs}" in proc.stderr
    assert not sample.exists()
