"""Run the Spark jobs (the scripts of spark/jobs) for the demo as child processes on local[*].

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

from storage_node.errors import InvalidArgument, MsgStoreError


def check_jobs_dir(jobs_dir: Path) -> Path:
    """``jobs_dir`` if it holds the demo's jobs, else a clear error before anything starts."""
    missing = [name for name in ("ingest.py", "compact.py") if not (jobs_dir / name).is_file()]
    if missing:
        raise InvalidArgument(
            f"no Spark jobs {', '.join(missing)} in {jobs_dir}: give --jobs-dir (the "
            "repository's spark/jobs), or MSGSTORE_DEMO_LOADER=client to run without Spark"
        )
    return jobs_dir


def run_job(jobs_dir: Path, name: str, args: list[str], echo: bool = True) -> dict[str, Any]:
    """Run ``<jobs_dir>/<name>.py`` with ``args``; returns its JSON summary line."""
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("MSGSTORE_SPARK_LOG_LEVEL", "ERROR")
    proc = subprocess.run(
        [sys.executable, str(jobs_dir / f"{name}.py"), *args],
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
