"""Run the Spark jobs (spark/jobs/*.py) for the demo as child processes on local[*].

A child process keeps the JVM and Spark's logging out of the demo's own process; the job's
last stdout line is a JSON summary, which is what the demo shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from storage_node.errors import MsgStoreError

JOBS_DIR = Path(__file__).resolve().parent.parent / "spark" / "jobs"


def run_job(name: str, args: list[str], echo: bool = True) -> dict[str, Any]:
    """Run ``spark/jobs/<name>.py`` with ``args``; returns its JSON summary line."""
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("MSGSTORE_SPARK_LOG_LEVEL", "ERROR")
    proc = subprocess.run(
        [sys.executable, str(JOBS_DIR / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stderr or "").splitlines()[-20:])
        raise MsgStoreError(f"Spark job {name}.py failed (exit {proc.returncode}):\n{tail}")
    if echo:
        for line in lines[:-1][-12:]:
            print(f"  {line}", flush=True)
    return json.loads(lines[-1])
