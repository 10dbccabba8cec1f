"""The Kafka listener against Apache Kafka: the same Java tools against a real Apache Kafka 4
broker and a msgstore node, both started by this run on 127.0.0.1.

The broker is `kafka_2.13` from Maven Central (bench/java/pom.xml, classpath from
scripts/kafka-jars.sh), single-node KRaft (broker and controller in one JVM, -Xmx1G), its log
directory formatted with `kafka-storage format` in a temporary directory. The msgstore node is
`msgstore serve --kafka-port` with its defaults but one, the acknowledgement's durability,
set alike on both (--durability):
  page-cache  (the default) an acknowledged batch is in the server's memory and the page
              cache, fsynced later: Apache Kafka's own default (no log.flush.interval.*),
              msgstore's `async` flush mode (MSGSTORE_FLUSH_MODE=async; its fsync follows
              within async_fsync_interval_ms)
  fsync       an acknowledged batch is fsynced: msgstore's default `sync` flush mode (one
              group-committed fsync per batch of appends), Kafka with
              log.flush.interval.messages=1 (an fsync of the partition at every append)
Each round makes a fresh topic on both with
Apache Kafka's TopicCommand, runs ProducerPerformance (100-byte records, acks=1,
linger.ms=5, batch.size=65536, no throughput cap) and then ConsumerPerformance over it, on
Kafka and msgstore in turns (the order flips each round), and deletes the topic. A warm-up
(--warmup-messages, default 200,000: produced and consumed on both, not counted) comes first,
so neither server is measured cold (the broker's JIT, the node's caches).

Prints JSON lines:
  kafka_produce        ProducerPerformance msgs/s on each (medians of the rounds),
                       ratio_produce_vs_kafka (target >= 1.0), server CPU seconds per
                       million messages of each server process (/proc/PID/stat, user+system)
  kafka_consume        ConsumerPerformance msgs/s (its fetch.nMsg.sec: from the first record
                       to the last, so the group join is not counted on either side),
                       ratio_consume_vs_kafka (target >= 0.8), server CPU per million
  kafka_profile        (--profile DIR) where the node's time went in the last round's produce
                       and consume: the functions py-spy most often found running, over all
                       the node's threads, as shares of its samples; each run's samples are
                       in DIR/{produce,consume}-ROUND.txt (py-spy's collapsed stacks)
  kafka_produce_curve  (--partitions-curve P1,P2,...) the produce row for a topic of each
                       partition count, one round each; a count over msgstore's limit of
                       partitions per topic is reported as refused on msgstore's side

Usage: python bench/kafka.py [--quick] [--rounds 3] [--messages 2000000] [--partitions 6]
       [--partitions-curve 6,600,6000] [--skip-main] [--warmup-messages N] [--profile DIR]
       [--durability page-cache|fsync]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from storage_node.cli.ports import free_port  # noqa: E402
from storage_node.formats.limits import MAX_PARTITIONS  # noqa: E402

RECORD_BYTES = 100
PRODUCER_PROPS = ["acks=1", "linger.ms=5", "batch.size=65536"]
TOOLS_HEAP = "-Xmx512m"
LOG4J2 = """status = warn
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = STDERR
"""


def kafka_classpath() -> str:
    """The broker's and tools' classpath (scripts/kafka-jars.sh fetches the jars once)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "kafka-jars.sh")],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} never opened:\n{log.read_text()[-4000:]}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process by its PID, SIGKILL it after 60 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


class Java:
    """Runs Apache Kafka's classes with the shared classpath and a quiet log4j2 setup."""

    def __init__(self, classpath: str, workdir: Path) -> None:
        self.classpath = classpath
        self.log4j = workdir / "log4j2.properties"
        self.log4j.write_text(LOG4J2)

    def argv(self, main: str, *args: str, heap: str = TOOLS_HEAP) -> list[str]:
        return [
            "java",
            heap,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.log4j}",
            "-cp",
            self.classpath,
            main,
            *args,
        ]

    def run(self, main: str, *args: str, timeout: float = 3600) -> str:
        result = subprocess.run(
            self.argv(main, *args), capture_output=True, text=True, timeout=timeout
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{main} {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        return result.stdout


@dataclass
class Server:
    name: str
    proc: subprocess.Popen
    bootstrap: str
    log: Path


DURABILITY = {  # --durability: (Kafka's extra settings, msgstore's flush mode)
    "page-cache": ([], "async"),
    "fsync": (["log.flush.interval.messages=1"], "sync"),
}


def start_kafka(java: Java, workdir: Path, durability: str) -> Server:
    """A single-node KRaft broker+controller on 127.0.0.1, its log dir formatted first."""
    port = free_port()
    controller = free_port(taken={port})
    data = workdir / "kafka-data"
    config = workdir / "server.properties"
    config.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{controller}",
                f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={data}",
                "num.partitions=1",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "delete.topic.enable=true",
                *DURABILITY[durability][0],
                "",
            ]
        )
    )
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    # one argument (``--cluster-id=ID``): an ID that starts with "-" is not read as an option
    java.run("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(config))
    log = workdir / "kafka.log"
    argv = java.argv("kafka.Kafka", str(config), heap="-Xmx1G")
    argv[2:2] = ["-Xms1G", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    wait_port(port, proc, log)
    return Server("kafka", proc, f"127.0.0.1:{port}", log)


def start_msgstore(workdir: Path, durability: str, code: Path = ROOT) -> Server:
    """``msgstore serve --kafka-port`` with the node's defaults (lifecycle tasks off) and the
    flush mode of ``durability``."""
    port = free_port()
    kafka_port = free_port(taken={port})
    log = workdir / "msgstore.log"
    env = {
        **os.environ,
        "MSGSTORE_LIFECYCLE_INTERVAL_S": "0",
        "MSGSTORE_FLUSH_MODE": DURABILITY[durability][1],
        "PYTHONPATH": str(code),  # the node runs this checkout's code (bench/kafka_ab.py: two)
    }
    argv = [
        sys.executable,
        "-m",
        "storage_node.cli",
        "serve",
        "--data-dir",
        str(workdir / "msgstore-data"),
        "--port",
        str(port),
        "--kafka-port",
        str(kafka_port),
        "--set",
        "log_level=WARNING",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, cwd=code, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"the msgstore node did not start:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)
    wait_port(kafka_port, proc, log)
    return Server("msgstore", proc, f"127.0.0.1:{kafka_port}", log)


def create_topic(java: Java, server: Server, topic: str, partitions: int) -> None:
    java.run(
        "org.apache.kafka.tools.TopicCommand",
        "--bootstrap-server",
        server.bootstrap,
        "--create",
        "--topic",
        topic,
        "--partitions",
        str(partitions),
        "--replication-factor",
        "1",
    )


def delete_topic(java: Java, server: Server, topic: str) -> None:
    java.run(
        "org.apache.kafka.tools.TopicCommand",
        "--bootstrap-server",
        server.bootstrap,
        "--delete",
        "--topic",
        topic,
    )


def produce(java: Java, server: Server, topic: str, messages: int) -> float:
    """ProducerPerformance's records/sec: its summary line after the last acknowledgement."""
    out = java.run(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        str(messages),
        "--record-size",
        str(RECORD_BYTES),
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={server.bootstrap}",
        *PRODUCER_PROPS,
    )
    match = re.search(rf"^{messages} records sent, ([\d.]+) records/sec", out, re.M)
    if match is None:
        raise RuntimeError(f"no summary line from ProducerPerformance:\n{out[-3000:]}")
    return float(match.group(1))


def consume(java: Java, server: Server, topic: str, messages: int) -> float:
    """ConsumerPerformance's fetch.nMsg.sec (the group join is left out on both sides)."""
    out = java.run(
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        server.bootstrap,
        "--topic",
        topic,
        "--messages",
        str(messages),
        "--timeout",
        "60000",
        "--group",
        f"bench-{uuid.uuid4().hex[:12]}",
    )
    lines = [line for line in out.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
    names = [n.strip() for n in lines[header].split(",")]
    row = dict(zip(names, (v.strip() for v in lines[header + 1].split(",")), strict=True))
    if int(row["data.consumed.in.nMsg"]) < messages:
        raise RuntimeError(f"ConsumerPerformance read {row['data.consumed.in.nMsg']} of {messages}")
    return float(row["fetch.nMsg.sec"])


def measured(
    server: Server, messages: int, run: Callable[[], float], profile: Path | None = None
) -> tuple[float, float]:
    """(msgs/s, server CPU seconds per million messages) of one tool run; with ``profile``,
    py-spy samples the server's threads meanwhile (100 Hz, without stopping it) into that
    file."""
    spy = None
    if profile is not None:
        argv = ["record", "-p", str(server.proc.pid), "-f", "raw", "-r", "100", "--nonblocking"]
        spy = subprocess.Popen(
            [str(Path(sys.executable).parent / "py-spy"), *argv, "-o", str(profile)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1)  # attached
    before = cpu_s(server.proc.pid)
    try:
        rate = run()
    finally:
        after = cpu_s(server.proc.pid)
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file and exits
            spy.wait(120)
    return rate, (after - before) / messages * 1e6


def top_frames(profile: Path, count: int = 12) -> list[tuple[float, str]]:
    """The frames py-spy found running most often (the leaf of each sample), as shares."""
    leaves: dict[str, int] = {}
    total = 0
    for line in profile.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        leaf = stack.rsplit(";", 1)[-1]
        leaves[leaf] = leaves.get(leaf, 0) + int(samples)
        total += int(samples)
    ranked = sorted(leaves.items(), key=lambda kv: -kv[1])[:count]
    return [(round(n / max(1, total), 3), frame) for frame, n in ranked]


def row(bench: str, ratio_name: str, results: dict[str, list[tuple[float, float]]], **extra):
    med = {
        name: (
            statistics.median(r for r, _ in runs),
            statistics.median(c for _, c in runs),
        )
        for name, runs in results.items()
    }
    return {
        "bench": bench,
        **extra,
        "kafka_msgs_per_s": round(med["kafka"][0]),
        "msgstore_msgs_per_s": round(med["msgstore"][0]),
        ratio_name: round(med["msgstore"][0] / med["kafka"][0], 3),
        "kafka_cpu_s_per_million": round(med["kafka"][1], 2),
        "msgstore_cpu_s_per_million": round(med["msgstore"][1], 2),
        "kafka_rounds": [round(r) for r, _ in results["kafka"]],
        "msgstore_rounds": [round(r) for r, _ in results["msgstore"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="50,000 messages, one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument(
        "--partitions-curve", default="", help="comma-separated partition counts, e.g. 6,600,6000"
    )
    parser.add_argument("--skip-main", action="store_true", help="only the partitions curve")
    parser.add_argument(
        "--warmup-messages",
        type=int,
        default=200_000,
        help="produced and consumed on both before the rounds, not counted (JIT, caches)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the msgstore node's threads with py-spy during its runs and write the "
        "samples to this directory (py-spy's overhead is in msgstore's figures then)",
    )
    parser.add_argument(
        "--durability",
        choices=sorted(DURABILITY),
        default="page-cache",
        help="what an acknowledgement promises, alike on both (see the module docstring)",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds = 1
        if args.messages == parser.get_default("messages"):
            args.messages = 50_000
        if args.warmup_messages == parser.get_default("warmup_messages"):
            args.warmup_messages = 0
    curve = [int(p) for p in args.partitions_curve.split(",") if p.strip()]

    classpath = kafka_classpath()
    workdir = Path(tempfile.mkdtemp(prefix="kafka-bench-"))
    java = Java(classpath, workdir)
    servers: list[Server] = []
    try:
        servers.append(start_kafka(java, workdir, args.durability))
        servers.append(start_msgstore(workdir, args.durability))
        if args.profile is not None:
            args.profile.mkdir(parents=True, exist_ok=True)
        by_name = {s.name: s for s in servers}
        common = {
            "messages": args.messages,
            "record_bytes": RECORD_BYTES,
            "durability": args.durability,
        }
        if args.warmup_messages:
            for server in servers:
                create_topic(java, server, "warmup", args.partitions)
                produce(java, server, "warmup", args.warmup_messages)
                consume(java, server, "warmup", args.warmup_messages)
                delete_topic(java, server, "warmup")
        if not args.skip_main:
            produced: dict[str, list[tuple[float, float]]] = {"kafka": [], "msgstore": []}
            consumed: dict[str, list[tuple[float, float]]] = {"kafka": [], "msgstore": []}
            for rnd in range(args.rounds):
                order = ["kafka", "msgstore"] if rnd % 2 == 0 else ["msgstore", "kafka"]
                for name in order:
                    server = by_name[name]
                    topic = f"bench-{rnd}"
                    create_topic(java, server, topic, args.partitions)
                    spied = args.profile if name == "msgstore" else None
                    produced[name].append(
                        measured(
                            server,
                            args.messages,
                            lambda s=server, t=topic: produce(java, s, t, args.messages),
                            spied / f"produce-{rnd}.txt" if spied else None,
                        )
                    )
                    consumed[name].append(
                        measured(
                            server,
                            args.messages,
                            lambda s=server, t=topic: consume(java, s, t, args.messages),
                            spied / f"consume-{rnd}.txt" if spied else None,
                        )
                    )
                    delete_topic(java, server, topic)
            extra = {**common, "partitions": args.partitions, "rounds": args.rounds}
            print(json.dumps(row("kafka_produce", "ratio_produce_vs_kafka", produced, **extra)))
            print(json.dumps(row("kafka_consume", "ratio_consume_vs_kafka", consumed, **extra)))
            if args.profile is not None:
                last = args.rounds - 1
                print(
                    json.dumps(
                        {
                            "bench": "kafka_profile",
                            "samples": str(args.profile),
                            **{
                                phase: top_frames(args.profile / f"{phase}-{last}.txt")
                                for phase in ("produce", "consume")
                            },
                        }
                    )
                )
            sys.stdout.flush()
        for partitions in curve:
            topic = f"curve-{partitions}"
            results: dict[str, list[tuple[float, float]]] = {}
            refused = None
            for name in ("kafka", "msgstore"):
                server = by_name[name]
                if name == "msgstore" and partitions > MAX_PARTITIONS:
                    refused = f"msgstore takes at most {MAX_PARTITIONS} partitions per topic"
                    continue
                create_topic(java, server, topic, partitions)
                results[name] = [
                    measured(
                        server,
                        args.messages,
                        lambda s=server, t=topic: produce(java, s, t, args.messages),
                    )
                ]
                delete_topic(java, server, topic)
            if refused is None:
                line = row("kafka_produce_curve", "ratio_produce_vs_kafka", results, **common)
                line["partitions"] = partitions
            else:
                rate, cpu = results["kafka"][0]
                line = {
                    "bench": "kafka_produce_curve",
                    **common,
                    "partitions": partitions,
                    "kafka_msgs_per_s": round(rate),
                    "kafka_cpu_s_per_million": round(cpu, 2),
                    "msgstore_msgs_per_s": None,
                    "msgstore_refused": refused,
                }
            print(json.dumps(line))
            sys.stdout.flush()
    finally:
        for server in servers:
            stop(server.proc)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
