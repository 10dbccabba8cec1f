"""Members of a Kafka consumer group for the group tests: confluent-kafka consumers that
commit synchronously after every message, and the ``msgstore`` commands that look at them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import requests
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")


def produce(endpoint: str, topic: str, values: list[bytes]) -> None:
    """Over the HTTP API, spread over the partitions (no keys)."""
    body = {"messages": [{"value": v.decode()} for v in values]}
    r = requests.post(f"{endpoint}/v1/topics/{topic}/messages", json=body, timeout=30)
    assert r.status_code == 200, r.text


def msgstore(endpoint: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "storage_node.cli", *args, "--endpoint", endpoint],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


def describe(endpoint: str, group: str) -> dict[int, dict[str, Any]]:
    """``msgstore group describe --json``: one row per partition."""
    doc = json.loads(msgstore(endpoint, "group", "describe", group, "--json"))
    return {row["partition"]: row for row in doc["partitions"]}


class Member:
    """One confluent-kafka consumer of the group: what it was assigned and what it read."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, name: str, instance_id: str | None = None
    ) -> None:
        self.name = name
        self.assigned: set[int] = set()
        self.revoked = 0
        self.read: list[bytes] = []
        static = {"group.instance.id": instance_id} if instance_id else {}
        self.consumer = Consumer(
            {
                **static,
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300,
                "partition.assignment.strategy": "range",
            }
        )
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        self.assigned = {p.partition for p in parts}

    def _on_revoke(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        self.assigned = set()
        self.revoked += 1

    def poll(self) -> None:
        """One poll; a message read is committed (synchronously) before the next poll, the
        only place a rebalance can happen."""
        msg: Message | None = self.consumer.poll(0.1)
        if msg is None:
            return
        error = msg.error()
        if error is not None:
            assert error.code() == KafkaError._PARTITION_EOF, error
            return
        deadline = time.monotonic() + 60
        while True:  # a coordinator moving or restarting: commit again until it takes it
            try:
                self.consumer.commit(message=msg, asynchronous=False)
                break
            except KafkaException as exc:
                if exc.args[0].code() in GENERATION_GONE:
                    # a coordinator that restarted knows no generation (membership is kept in
                    # memory, docs/KAFKA.md): the member rejoins and, its commit refused, reads
                    # this message again from the last committed offset; it counts then
                    return
                code = exc.args[0].code()
                waiting = code in COORDINATOR_AWAY or exc.args[0].retriable()
                if time.monotonic() > deadline or not waiting:
                    raise
                time.sleep(0.1)
        self.read.append(msg.value() or b"")  # read = consumed and committed, once each


# commit refusals that end the member's generation: it must rejoin before committing again
GENERATION_GONE = (
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError._ASSIGNMENT_LOST,  # librdkafka's own word for it after a session timed out
)


# commit failures while the coordinator restarts or moves: librdkafka raises them from a
# synchronous commit without the retriable flag, though the next commit may well succeed
COORDINATOR_AWAY = (
    KafkaError._WAIT_COORD,
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
)


def poll_until(members: list[Member], what: str, cond: Callable[[], bool]) -> None:
    def step() -> bool:
        for m in members:
            m.poll()
        return cond()

    wait_for(what, step, timeout=90)
