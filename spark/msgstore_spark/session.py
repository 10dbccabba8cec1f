"""SparkSession settings for msgstore's jobs, tests and benchmark, in one place.

``job_session`` gives a job its session: local[*] under plain ``python``, the submitter's
master under ``spark-submit``; the msgstore source registered either way.
"""

from __future__ import annotations

import os
import sys
import warnings

from pyspark.sql import SparkSession

from msgstore_spark.jvm_reader import ReaderJarMissing, jar_path

# Spark hands every task of a Python data source to a Python worker over a socket. Over
# loopback TCP a short query on a quiet 2-core machine waited about 30 ms in that hand-off
# (a 6-row read of the msgstore source: 0.14 s per query, 0.105 s with Unix domain sockets;
# a Python source that yields 6 rows from memory: 0.121 s against 0.075 s); a 200,000-row
# read did not change measurably. Workers then listen on a socket file in the JVM's
# temporary directory, which must be writable (it is in msgstore's Spark pods).
WORKER_SOCKETS = {"spark.python.unix.domain.socket.enabled": "true"}


def with_msgstore_settings(builder: SparkSession.Builder) -> SparkSession.Builder:
    """``builder`` with the settings above and the JVM reader's jar (``jvm_reader.load``)
    added to ``spark.jars`` where it can be built (before the session is created: they are
    static)."""
    for key, value in WORKER_SOCKETS.items():
        builder = builder.config(key, value)
    try:
        jar = jar_path()
    except ReaderJarMissing as err:  # the session still serves format("msgstore")
        warnings.warn(f"{err}; msgstore_spark.load is not available", stacklevel=2)
        jar = None
    if jar is not None:
        given = builder._options.get("spark.jars")
        builder = builder.config("spark.jars", f"{given},{jar}" if given else jar)
    return builder


def job_session(app_name: str, master: str | None = None) -> SparkSession:
    # spark-submit launches the driver with a gateway; its --master then rules
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = with_msgstore_settings(SparkSession.builder.appName(app_name))
    if master or not submitted:
        builder = builder.master(master or "local[*]")
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    if not submitted:
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("MSGSTORE_SPARK_LOG_LEVEL", "WARN"))
    from msgstore_spark import register

    register(spark)
    return spark
