"""Apache Kafka's own Java tools as test clients: the jars come from Maven Central through
scripts/kafka-jars.sh (bench/java/pom.xml), by bench/kafka.py's own classpath reader, so the
tests and the bench run the same jars."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.kafka import LOG4J2
from bench.kafka import ROOT as ROOT  # the repository root, for the tests that run bench
from bench.kafka import kafka_classpath as fetch_classpath


@functools.cache
def kafka_classpath() -> str:
    """The classpath of Kafka's clients and tools (bench/kafka.py's, so both run the same
    jars); fails the test with the reason when Java or Maven is missing or the jars cannot be
    fetched."""
    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.fail("java and mvn are needed: run scripts/setup-system.sh")
    try:
        return fetch_classpath()
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"scripts/kafka-jars.sh failed:\n{exc.stderr[-3000:]}")


def java_argv(workdir: Path, main: str, *args: str) -> list[str]:
    """The command running ``main`` of Kafka's tools with the shared classpath."""
    log4j = workdir / "log4j2.properties"
    if not log4j.exists():
        log4j.write_text(LOG4J2)
    return [
        "java",
        "-Xmx256m",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        kafka_classpath(),
        main,
        *args,
    ]


def run_java(workdir: Path, main: str, *args: str, timeout: float = 300) -> str:
    """Run a Kafka tool to its end; fails the test with its output when it fails."""
    result = subprocess.run(
        java_argv(workdir, main, *args), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, (
        f"{main} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result.stdout
