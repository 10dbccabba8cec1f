"""Apache Kafka's own Java tools as test clients: the jars come from Maven Central through
scripts/kafka-jars.sh (bench/java/pom.xml), the same classpath bench/kafka.py runs."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
QUIET_LOG4J2 = """status = warn
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = STDERR
"""


@functools.cache
def kafka_classpath() -> str:
    """The classpath of Kafka's clients and tools; fails the test with the reason when Java or
    Maven is missing or the jars cannot be fetched."""
    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.fail("java and mvn are needed: run scripts/setup-system.sh")
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "kafka-jars.sh")], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/kafka-jars.sh failed:\n{result.stderr[-3000:]}")
    return result.stdout.strip()


def java_argv(workdir: Path, main: str, *args: str) -> list[str]:
    """The command running ``main`` of Kafka's tools with the shared classpath."""
    log4j = workdir / "log4j2.properties"
    if not log4j.exists():
        log4j.write_text(QUIET_LOG4J2)
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
