"""A SparkSession for the jobs: local[*] under plain ``python``, the submitter's master under
``spark-submit``; the msgstore source registered either way."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def job_session(app_name: str, master: str | None = None) -> SparkSession:
    # spark-submit launches the driver with a gateway; its --master then rules
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
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
