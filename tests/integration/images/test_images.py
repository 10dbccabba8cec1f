"""The two container images, built by scripts/build-images.sh and run as real containers.

A fixture builds both images once per pytest run (cold: Debian bases with mmdebstrap, the
wheelhouse, two docker builds; warm: the layer cache) and every test runs containers of them
with the network switched off (`--network none`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from msgstore_operator.spark_job import JOBS_DIR, SPARK_SUBMIT

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "scripts" / "build-images.sh"
NODE_UID = 10001
SPARK_UID = 185

# A cold build (bases, wheelhouse, images) takes minutes on a 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def app_version() -> str:
    chart = (REPO / "helm" / "msgstore" / "Chart.yaml").read_text()
    return re.search(r'^appVersion:\s*"?([^"\s]+)"?', chart, re.M).group(1)


def run(args: list[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


def show(proc: subprocess.CompletedProcess[str]) -> str:
    return f"$ {' '.join(proc.args)}\nrc={proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"


def docker_run(image: str, *args: str, opts: tuple[str, ...] = (), timeout: float = 300):
    return run(["docker", "run", "--rm", "--network", "none", *opts, image, *args], timeout)


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """Builds both images once, calling the script from another directory as kind-up and
    other callers may; returns {"node": ref, "spark": ref} from its last line."""
    with tempfile.TemporaryDirectory() as elsewhere:
        proc = run(["bash", str(BUILD), "all"], timeout=2400, cwd=elsewhere)
    assert proc.returncode == 0, "scripts/build-images.sh failed\n" + show(proc)
    last = proc.stdout.strip().splitlines()[-1]
    refs = last.split()
    version = app_version()
    assert refs == [f"msgstore:{version}", f"msgstore-spark:{version}"], show(proc)
    print(proc.stderr[proc.stderr.find("---- sizes") :])
    return {"node": refs[0], "spark": refs[1]}


def inspect(image: str) -> dict:
    proc = run(["docker", "image", "inspect", image])
    assert proc.returncode == 0, show(proc)
    return json.loads(proc.stdout)[0]


# -- the build script ------------------------------------------------------------------------


def test_unknown_target_is_refused_before_anything_runs(tmp_path):
    cache = tmp_path / "cache"
    proc = run(
        ["bash", str(BUILD), "nodes"],
        env={**os.environ, "MSGSTORE_IMAGES_CACHE": str(cache)},
        cwd=tmp_path,
    )
    assert proc.returncode != 0, show(proc)
    assert "unknown target 'nodes' (expected node, spark, all or kcat)" in proc.stderr, show(proc)
    assert proc.stdout == "" and not cache.exists(), show(proc)


def test_rebuild_with_nothing_changed_runs_no_build_step(images):
    proc = run(["bash", str(BUILD), "all"], timeout=1200)
    assert proc.returncode == 0, show(proc)
    assert proc.stdout.strip().splitlines()[-1].split() == [images["node"], images["spark"]]
    # Every instruction came from the layer cache; no base or wheel was made again.
    assert "Running in" not in proc.stderr, show(proc)
    assert "Using cache" in proc.stderr, show(proc)
    for reused in (
        r"base msgstore-base:python-bookworm-[0-9a-f]{12} exists .*; not rebuilt",
        r"base msgstore-base:spark-bookworm-[0-9a-f]{12} exists .*; not rebuilt",
        r"wheelhouse \S+/wheels/[0-9a-f]{16} exists .*; not rebuilt",
        r"msgstore wheel of this source tree exists",
    ):
        assert re.search(reused, proc.stderr), (reused, show(proc))
    assert "mmdebstrap bookworm with" not in proc.stderr, show(proc)


def test_images_carry_the_build_inputs_as_labels(images):
    for ref in images.values():
        labels = inspect(ref)["Config"]["Labels"]
        assert labels["org.opencontainers.image.version"] == app_version()
        assert re.fullmatch(r"[0-9a-f]{16}", labels["org.msgstore.wheelhouse"]), labels
        assert re.fullmatch(r"[0-9a-f]{16}", labels["org.msgstore.source"]), labels


# -- node + operator image -------------------------------------------------------------------


def test_node_image_config(images):
    config = inspect(images["node"])["Config"]
    assert config["User"] == f"{NODE_UID}:{NODE_UID}"
    assert config["Cmd"] == ["msgstore", "serve"]
    assert config["Entrypoint"] == ["/usr/bin/tini", "--"]


def test_node_cli_runs_non_root_on_a_read_only_root(images):
    proc = docker_run(
        images["node"], "msgstore", "--help", opts=("--read-only", "--user", f"{NODE_UID}")
    )
    assert proc.returncode == 0, show(proc)
    assert "serve" in proc.stdout and "spark-job" in proc.stdout, show(proc)


def test_node_image_imports_node_operator_and_kopf(images):
    code = (
        "import os, sys, kopf, msgstore_operator, msgstore_operator.handlers, storage_node;"
        "print(sys.version_info[:2], os.getuid(), os.getgid())"
    )
    proc = docker_run(
        images["node"], "python3", "-c", code, opts=("--read-only", "--user", f"{NODE_UID}")
    )
    assert proc.returncode == 0, show(proc)
    assert proc.stdout.strip() == f"(3, 11) {NODE_UID} {NODE_UID}", show(proc)


def test_node_image_has_no_spark(images):
    code = (
        "import importlib.util as u;"
        "print([m for m in ('pyspark', 'pandas', 'py4j') if u.find_spec(m)])"
    )
    proc = docker_run(images["node"], "python3", "-c", code, opts=("--read-only",))
    assert proc.returncode == 0, show(proc)
    assert proc.stdout.strip() == "[]", show(proc)
    proc = docker_run(images["node"], "sh", "-c", "command -v java || echo no-java")
    assert proc.stdout.strip() == "no-java", show(proc)


def test_node_default_command_serves_and_stops_cleanly(images):
    """`msgstore serve` (the default command) on a read-only root with data on the image's
    volume; docker stop's SIGTERM reaches it through tini and the store closes cleanly."""
    proc = run(["docker", "run", "-d", "--read-only", "--network", "none", images["node"]])
    assert proc.returncode == 0, show(proc)
    cid = proc.stdout.strip()
    try:
        probe = (
            "import urllib.request as u;"
            "print(u.urlopen('http://127.0.0.1:7100/healthz', timeout=5).read().decode())"
        )
        deadline = time.monotonic() + 120
        while True:
            check = run(["docker", "exec", cid, "python3", "-c", probe])
            if check.returncode == 0:
                break
            logs = run(["docker", "logs", cid])
            assert time.monotonic() < deadline, "node never answered /healthz\n" + show(logs)
            time.sleep(1)
        assert json.loads(check.stdout)["status"] == "ok", show(check)
        stop = run(["docker", "stop", "-t", "60", cid])
        assert stop.returncode == 0, show(stop)
        state = run(["docker", "inspect", "-f", "{{.State.ExitCode}}", cid])
        logs = run(["docker", "logs", cid])
        assert state.stdout.strip() == "0", show(logs)
        assert "store closed cleanly" in logs.stdout + logs.stderr, show(logs)
    finally:
        run(["docker", "rm", "-f", "-v", cid])


# -- Spark image -----------------------------------------------------------------------------


def test_spark_image_config(images):
    config = inspect(images["spark"])["Config"]
    assert config["User"] == f"{SPARK_UID}:{SPARK_UID}"
    assert config["Entrypoint"] == ["/opt/entrypoint.sh"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["SPARK_HOME"] == "/opt/spark"
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == "/opt/venv/bin/python3"


def test_spark_image_java_17(images):
    proc = docker_run(images["spark"], "java", "-version")
    assert proc.returncode == 0, show(proc)
    assert re.search(r'version "17\.', proc.stderr), show(proc)


def test_spark_image_paths_the_submission_and_kind_up_use(images):
    """spark-submit where the submit pod calls it, the jobs where spark_job.py points, the
    sample data where kind-up reads it, and the jobs import in the image's venv."""
    sample = re.search(
        r'^SAMPLE_IN_IMAGE="file://(\S+)"', (REPO / "scripts" / "kind-up.sh").read_text(), re.M
    ).group(1)
    jobs = JOBS_DIR.removeprefix("local://")
    script = (
        f"set -e; test -x {SPARK_SUBMIT}; ls {jobs}; wc -l < {sample}; id -u; "
        f"python3 {jobs}/ingest.py --help | head -n 1; python3 {jobs}/compact.py --help | head -n 1"
    )
    proc = docker_run(images["spark"], "bash", "-c", script)
    assert proc.returncode == 0, show(proc)
    out = proc.stdout.split()
    assert {"ingest.py", "compact.py", "_bootstrap.py"} <= set(out), show(proc)
    assert "100000" in out and str(SPARK_UID) in out, show(proc)
    assert proc.stdout.count("usage:") == 2, show(proc)
    # The same pyspark release as the pin, and spark-submit finds it through SPARK_HOME.
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"][
        "spark"
    ]
    pin = next(d.split("==")[1] for d in deps if d.startswith("pyspark=="))
    proc = docker_run(
        images["spark"], SPARK_SUBMIT, "--version", opts=("-e", "SPARK_LOCAL_IP=127.0.0.1")
    )
    assert proc.returncode == 0 and f"version {pin}" in proc.stdout + proc.stderr, show(proc)


TINY_JOB = """
import json
import msgstore_spark
import pandas as pd
from pyspark.sql import SparkSession, functions as F
from pyspark.sql.functions import pandas_udf

spark = SparkSession.builder.appName("image-test").getOrCreate()

@pandas_udf("long")
def plus_one(s: pd.Series) -> pd.Series:
    return s + 1

df = spark.range(0, 1000).withColumn("k", F.col("id") % 10)
rows = df.groupBy("k").agg(F.sum(plus_one("id")).alias("s")).collect()
# the JVM reader (msgstore_spark.load) is on the image's classpath: an empty plan reads nothing
plan = {"tasks": [], "endpoints": [], "fetchSize": 10, "timeoutMs": 1000}
empty = spark.read.format("msgstore.spark.FetchSource").option("plan", json.dumps(plan)).load()
print("RESULT " + json.dumps({
    "groups": len(rows), "total": sum(r.s for r in rows), "spark": spark.version,
    "msgstore_spark": msgstore_spark.__file__, "jvm_reader": [empty.count(), len(empty.columns)],
}))
spark.stop()
"""


@pytest.fixture
def job_dir() -> Iterator[Path]:
    # Under /tmp itself: the container's uid 185 must traverse it (pytest's tmp_path is 0700).
    path = Path(tempfile.mkdtemp(prefix="msgstore-image-job-"))
    try:
        path.chmod(0o755)
        (path / "tiny.py").write_text(TINY_JOB)
        (path / "tiny.py").chmod(0o644)
        yield path
    finally:
        shutil.rmtree(path)


def test_spark_driver_role_runs_a_local_pyspark_job(images, job_dir):
    """The entrypoint's driver role (spark-submit in client mode) runs a PySpark job that
    imports msgstore_spark, runs a pandas UDF in the Python workers (pyarrow, pandas) and
    finds the JVM reader's class in the image's Spark jars."""
    proc = docker_run(
        images["spark"],
        "driver",
        "--master",
        "local[2]",
        "/job/tiny.py",
        opts=("-e", "SPARK_DRIVER_BIND_ADDRESS=127.0.0.1", "-e", "SPARK_LOCAL_IP=127.0.0.1",
              "-v", f"{job_dir}:/job:ro"),
    )  # fmt: skip
    assert proc.returncode == 0, show(proc)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, show(proc)
    result = json.loads(line.removeprefix("RESULT "))
    assert result["groups"] == 10 and result["total"] == sum(range(1, 1001)), result
    assert result["jvm_reader"] == [0, 8], result
    assert result["msgstore_spark"].startswith("/opt/venv/lib/python3.11/site-packages/"), result
    assert "spark-entrypoint: driver:" in proc.stderr and "--deploy-mode client" in proc.stderr


@pytest.mark.parametrize(
    "role, missing",
    [
        ("driver", ["SPARK_DRIVER_BIND_ADDRESS"]),
        (
            "executor",
            [
                "SPARK_DRIVER_URL",
                "SPARK_EXECUTOR_ID",
                "SPARK_EXECUTOR_CORES",
                "SPARK_EXECUTOR_MEMORY",
                "SPARK_APPLICATION_ID",
                "SPARK_EXECUTOR_POD_IP",
            ],
        ),  # fmt: skip
    ],
)
def test_spark_role_without_its_environment_fails_clearly(images, role, missing):
    proc = docker_run(images["spark"], role)
    assert proc.returncode == 64, show(proc)
    assert f"the '{role}' role needs environment variables" in proc.stderr, show(proc)
    assert f"missing: {' '.join(missing)}" in proc.stderr, show(proc)
    # nothing was started
    assert f"spark-entrypoint: {role}:" not in proc.stderr, show(proc)


def test_spark_executor_role_starts_the_executor_backend(images):
    """With Spark's executor environment the role starts KubernetesExecutorBackend with the
    JVM options in numeric order; with no driver listening it fails connecting to it."""
    env = {
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:7078",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_EXECUTOR_MEMORY": "512m",
        "SPARK_APPLICATION_ID": "spark-app-test",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_POD_NAME": "exec-1",
        "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
        "SPARK_JAVA_OPT_1": "-Dspark.rpc.numRetries=1",
        "SPARK_JAVA_OPT_2": "-Dspark.network.timeout=10s",
        "SPARK_JAVA_OPT_10": "-Dspark.rpc.askTimeout=10s",
    }
    opts = ["--hostname", "localhost"]
    for key, value in env.items():
        opts += ["-e", f"{key}={value}"]
    proc = docker_run(images["spark"], "executor", opts=tuple(opts))
    assert proc.returncode != 0, show(proc)
    assert (
        "-Dspark.driver.port=7078 -Dspark.rpc.numRetries=1 -Dspark.network.timeout=10s "
        "-Dspark.rpc.askTimeout=10s -Xms512m -Xmx512m" in proc.stderr
    ), show(proc)
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in proc.stderr
    assert "--podName exec-1" in proc.stderr, show(proc)
    assert "Failed to connect to /127.0.0.1:7078" in proc.stderr, show(proc)


def test_spark_image_gives_an_unknown_uid_a_user_name(images):
    """A uid picked by the cluster (no passwd entry) still gets a name, which Hadoop's user
    lookup in the driver and executors needs."""
    proc = docker_run(images["spark"], "bash", "-c", "id -u; whoami", opts=("--user", "4242:0"))
    assert proc.returncode == 0, show(proc)
    assert proc.stdout.split() == ["4242", "spark"], show(proc)
