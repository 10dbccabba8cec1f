"""Batch reads in the JVM: ``load(spark, **options)``, the fast way to read topics in batch.

``format("msgstore")`` reads in Python workers, and Spark takes every row from them as Arrow
over a socket. On a two-core machine that hand-off alone held any Python data source near
0.6 of Parquet's read rate (``bench/spark.py``, row ``spark_read_python_floor``). ``load``
takes the same options and plans the same offset ranges on the driver, with the same client
and checks. The rows are then fetched by a DataSource V2 reader in the executors' JVM
(``jvm/msgstore/spark``). It decodes each page of the node's binary answer straight into
Spark's column vectors and reads only the columns the query uses.

The reader's jar is compiled from the Java sources shipped in this package. It needs ``javac``
(Debian's ``openjdk-17-jdk-headless``) once, and is cached by the sources' hash and Spark's
version. ``with_msgstore_settings`` puts it on a session's classpath.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from msgstore_spark.options import read_options
from msgstore_spark.ranges import OffsetRange

SOURCE_CLASS = "msgstore.spark.FetchSource"
_SOURCES = Path(__file__).parent / "jvm"


class ReaderJarMissing(RuntimeError):
    """The session cannot load the JVM reader: its jar was not built or not given to Spark."""


def _spark_jars() -> Path:
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "msgstore-spark"


def jar_path() -> str | None:
    """The reader's jar, built on first use; None where no ``javac`` can build it
    (``ReaderJarMissing`` where it fails to)."""
    sources = sorted(_SOURCES.rglob("*.java"))
    digest = hashlib.sha256()
    for src in sources:
        digest.update(src.relative_to(_SOURCES).as_posix().encode() + b"\0" + src.read_bytes())
    import pyspark

    digest.update(pyspark.__version__.encode())
    javac = shutil.which("javac")
    try:
        jar = _cache_dir() / digest.hexdigest()[:16] / "msgstore-spark-reader.jar"
        if jar.is_file():
            return str(jar)
    except (RuntimeError, OSError):  # no home directory to cache in (a bare container)
        return None
    if javac is None:
        return None  # e.g. msgstore's Spark image: the jar is among Spark's own there
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as tmp:
        classes = Path(tmp) / "classes"
        done = subprocess.run(
            [javac, "--release", "17", "-nowarn", "-encoding", "UTF-8"]
            + ["-cp", str(_spark_jars() / "*"), "-d", str(classes)]
            + [str(s) for s in sources],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise ReaderJarMissing(
                f"javac could not build the msgstore JVM reader against {_spark_jars()}: "
                + done.stderr[-2000:]
            )
        built = Path(tmp) / jar.name
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for cls in sorted(classes.rglob("*.class")):
                out.write(cls, cls.relative_to(classes).as_posix())
        os.replace(built, jar)  # atomic: a concurrent build leaves one whole jar
    return str(jar)


def slice_tasks(
    ranges: list[OffsetRange], parallelism: int, min_records: int, max_records: int
) -> list[dict[str, Any]]:
    """The JVM reader's tasks: each takes one slice of every partition of its topic, so every
    task reads from all the owning nodes at once (a fetch thread per node) and the nodes
    work side by side; tasks packed by owner left a node idle while a task of another one
    ran. As many tasks as cores (``parallelism``), fewer for a read below
    ``min_records`` per task, more where a slice would exceed ``max_records``."""
    spans: dict[str, dict[int, list[Any]]] = {}  # topic -> partition -> [start, end, owner]
    for rng in ranges:
        if rng.end <= rng.start:
            continue
        span = spans.setdefault(rng.topic, {}).setdefault(
            rng.partition, [rng.start, rng.end, rng.owner]
        )
        span[0], span[1] = min(span[0], rng.start), max(span[1], rng.end)
    tasks: list[dict[str, Any]] = []
    for topic, parts in spans.items():
        total = sum(end - start for start, end, _ in parts.values())
        longest = max(end - start for start, end, _ in parts.values())
        count = max(1, min(parallelism, -(-total // min_records)), -(-longest // max_records))
        for k in range(count):
            sliced = []
            for p, (start, end, owner) in parts.items():
                lo = start + (end - start) * k // count
                hi = start + (end - start) * (k + 1) // count
                if hi > lo:
                    sliced.append([p, lo, hi, owner])
            if sliced:
                tasks.append({"topic": topic, "ranges": sliced})
    return tasks


def load(spark: Any, **options: str) -> Any:
    """A DataFrame of the topics' messages (the ``format("msgstore")`` read schema and
    options), its offset ranges fixed now and read by the JVM reader."""
    from msgstore_spark.reader import plan_ranges

    opts = read_options(options, streaming=False)
    ranges = plan_ranges(opts)
    endpoints = opts.conn.endpoints
    tasks = slice_tasks(
        ranges,
        spark.sparkContext.defaultParallelism,
        opts.min_records_per_task,
        opts.max_records_per_partition,
    )
    for task in tasks:
        for rng in task["ranges"]:
            rng[3] = rng[3] or endpoints[0]
    plan = {
        "tasks": tasks,
        "endpoints": endpoints,
        "fetchSize": opts.fetch_size,
        "tag": opts.tag,
        "timeoutMs": int(opts.conn.timeout_s * 1000),
        "ca": opts.conn.ca,
    }
    reader = spark.read.format(SOURCE_CLASS).option("plan", json.dumps(plan))
    if opts.conn.token:
        reader = reader.option("token", opts.conn.token)  # Spark redacts it in plans
    try:
        return reader.load()
    except Exception as err:
        if "msgstore.spark.FetchSource" in str(err) and "DATA_SOURCE_NOT_FOUND" in str(err):
            raise ReaderJarMissing(
                "the msgstore JVM reader is not on this session's classpath: build the session "
                "with msgstore_spark.session.with_msgstore_settings (needs javac, Debian's "
                "openjdk-17-jdk-headless), or read with format('msgstore')"
            ) from None
        raise
