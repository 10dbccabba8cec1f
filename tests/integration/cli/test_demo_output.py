"""`make run`'s demo prints what a newcomer reads: small tables and human times, not JSON
strings of partitions and raw epoch milliseconds (run with the client loader, no Spark)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from storage_node.demo.tables import human_ms, table


def test_tables_and_times_read_as_text():
    assert human_ms(1_764_180_003_120) == "2025-11-26 18:00:03.120 UTC"
    assert human_ms(None) == "-"
    assert table(("A", "LONGER"), [[1, None], ["wide cell", "x"]]) == [
        "A          LONGER",
        "1          -",
        "wide cell  x",
    ]
    assert table(("A",), []) == ["(none)"]


def test_the_demo_prints_tables_and_human_times(tmp_path):
    env = {
        **os.environ,
        "MSGSTORE_DEMO_LOADER": "client",
        "MSGSTORE_DEMO_EXIT": "1",
        "MSGSTORE_DEMO_ROWS": "2000",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "storage_node.demo", "--sample-dir", str(tmp_path / "sample")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.search(r"^  PART +OWNER +FIRST +NEXT +MESSAGES$", out, re.M), out
    assert re.search(r"^  0 +node-0 +0 +\d+ +\d+$", out, re.M), out
    assert '"p0 ' not in out  # no partition rows as quoted JSON strings
    assert re.search(r"stored from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC to ", out), out
    assert not re.search(r"\[\d{13}, \d{13}\]", out)  # no raw epoch-ms ranges
    assert re.search(r"^  PART +OFFSET +KEY +TAG +STORED +VALUE$", out, re.M), out
    assert re.search(r"web console: http://127\.0\.0\.1:\d+$", out, re.M), out  # make run's URL
