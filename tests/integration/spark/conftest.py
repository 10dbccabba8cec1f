"""Spark tests: one local[2] SparkSession (task retries on) and one real local 3-node cluster
for the whole folder, because Spark and node start-up dominate the run time."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

JOBS = Path(__file__).resolve().parents[3] / "spark" / "jobs"

# The nodes leave sealed files to the Spark compact job (no background compaction during
# the run), and roll segments at 4 MiB so a few hundred thousand rows make several files.
NODE_ENV = {
    "MSGSTORE_COMPACT_AFTER_S": "86400",
    "MSGSTORE_UPLOAD_AFTER_S": "86400",
    "MSGSTORE_SEGMENT_BYTES": str(4 * 1024 * 1024),
}


def load_job(name: str):
    """Import spark/jobs/<name>.py as a module (the jobs are scripts, not a package)."""
    if str(JOBS) not in sys.path:
        sys.path.insert(0, str(JOBS))
    spec = importlib.util.spec_from_file_location(f"msgstore_job_{name}", JOBS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def ingest_job():
    return load_job("ingest")


@pytest.fixture(scope="session")
def compact_job():
    return load_job("compact")


@pytest.fixture(scope="session")
def spark():
    import msgstore_spark
    from msgstore_spark.session import with_msgstore_settings
    from pyspark.sql import SparkSession

    session = (
        with_msgstore_settings(SparkSession.builder)
        .master("local[2,4]")  # 2 threads; a task may fail 3 times
        .appName("msgstore-spark-tests")
        .config("spark.task.maxFailures", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    msgstore_spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    from storage_node.cli.local import LocalCluster

    local = LocalCluster(tmp_path_factory.mktemp("spark-cluster"))
    local.up(nodes=3, env=NODE_ENV)
    yield local
    local.down()


@pytest.fixture(scope="session")
def endpoints(cluster) -> str:
    return ",".join(cluster.addresses)


@pytest.fixture(scope="session")
def client(cluster):
    from storage_node.client import Client

    with Client(cluster.addresses) as c:
        yield c
