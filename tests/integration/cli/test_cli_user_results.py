"""What a new user hit: results in the wrong order, gaps hidden when a node is down, an empty
key nobody can find, fields dropped silently, a follow that never ends, lines stored twice
on resume and commits of messages nobody read. Each is driven through the real command (or
client) against a real local cluster."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
import requests

from storage_node.client import Client
from storage_node.errors import InvalidArgument, InvalidBatch
from storage_node.wire.batch_codec import CONTENT_TYPE, encode_batch
from tests.integration.cli import commands
from tests.integration.cli.commands import CLI


def run(*args: str, stdin: bytes | None = None, check: bool = True, timeout: float = 180):
    proc = commands.run(*args, stdin=stdin, check=check, timeout=timeout)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    return proc


class Cluster:
    def __init__(self, data_dir: str, nodes: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.nodes = nodes  # id -> address
        self.first, self.second, self.third = sorted(nodes)  # the CLI talks to the first
        self.endpoint = nodes[self.first]
        self.ep = ["--endpoint", self.endpoint]

    def topic(self, name: str, partitions: int = 3) -> list[str]:
        run("topic", "create", name, "--partitions", str(partitions), *self.ep)
        return self.ep

    def owners(self, name: str) -> list[str]:
        doc = json.loads(run("topic", "describe", name, *self.ep).stdout)
        return [p["owner"] for p in doc["partition_offsets"]]

    def stop(self, node: str) -> None:
        run("local", "stop", node, "--data-dir", self.data_dir)

    def restart(self, node: str) -> None:
        run("local", "restart", node, "--data-dir", self.data_dir)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    data_dir = str(tmp_path_factory.mktemp("user-results") / "c")
    up = run("local", "up", "--nodes", "3", "--data-dir", data_dir)
    nodes = {}
    for line in up.stdout.decode().splitlines():
        if line.startswith("node-"):
            node_id, address = line.split()[:2]
            nodes[node_id] = address
    yield Cluster(data_dir, nodes)
    run("local", "down", "--data-dir", data_dir)


def values(ep: list[str], name: str, *extra: str, check: bool = True) -> list[bytes]:
    return run("consume", name, "--format", "raw", *extra, *ep, check=check).stdout.splitlines()


# -- 1. newest first is the store's order ---------------------------------------------------
def test_query_is_newest_first_within_one_millisecond(cluster):
    ep = cluster.topic("qo")
    lines = b"".join(b"same:v%d\n" % i for i in range(12))
    run("produce", "qo", "-K", ":", "--input", "raw", "--quiet", *ep, stdin=lines)
    out = run("query", "qo", "same", *ep).stdout.splitlines()
    docs = [json.loads(line) for line in out]
    assert len({d["store_timestamp"] for d in docs}) == 1  # one batch: one store time
    assert [d["value"] for d in docs] == [f"v{i}" for i in range(11, -1, -1)]
    top = run("query", "qo", "same", "--max", "3", *ep).stdout.splitlines()
    assert [json.loads(line)["value"] for line in top] == ["v11", "v10", "v9"]


# -- 2. a lookup that could not ask every node says so ---------------------------------------
def test_query_and_get_name_the_nodes_that_did_not_answer(cluster):
    ep = cluster.topic("orders")
    keys = [f"o-{i}" for i in range(30)]
    lines = "".join(f'{k}:{{"n": {i}}}\n' for i, k in enumerate(keys)).encode()
    run("produce", "orders", "-K", ":", "--quiet", *ep, stdin=lines)
    owners = cluster.owners("orders")
    stored = [json.loads(line) for line in run("consume", "orders", *ep).stdout.splitlines()]
    away = next(m for m in stored if owners[m["partition"]] != cluster.first)
    node = owners[away["partition"]]
    cluster.stop(node)
    try:
        query = run("query", "orders", away["key"], *ep, check=False)
        assert query.returncode != 0 and query.stdout == b""
        assert node in query.stderr.decode() and "incomplete" in query.stderr.decode()
        get = run("get", away["msg_id"], *ep, check=False)
        assert get.returncode != 0 and node in get.stderr.decode()
        assert "not_found" not in get.stderr.decode()
        answer = requests.get(f"{cluster.endpoint}/v1/messages/{away['msg_id']}", timeout=30)
        assert answer.status_code == 503
        error = answer.json()["error"]
        assert error["code"] == "incomplete" and error["unreachable_nodes"] == [node]
    finally:
        cluster.restart(node)
    assert json.loads(run("get", away["msg_id"], *ep).stdout)["value"] == away["value"]


# -- 3. one empty-key rule on every path -----------------------------------------------------
def test_an_empty_key_is_refused_on_every_path_and_nothing_is_stored(cluster):
    ep = cluster.topic("ek", 1)
    proc = run("produce", "ek", "-K", ":", "--input", "raw", *ep, stdin=b":value\n", check=False)
    assert proc.returncode == 1 and "key before ':' is empty" in proc.stderr.decode()
    doc = json.loads(run("topic", "describe", "ek", *ep).stdout)
    url = f"{doc['partition_offsets'][0]['owner_address']}/v1/topics/ek/messages"
    as_json = requests.post(url, json={"messages": [{"value": "v", "key": ""}]}, timeout=30)
    assert as_json.status_code == 400 and as_json.json()["error"]["code"] == "invalid_batch"
    assert "key must not be empty" in as_json.json()["error"]["message"]
    binary = encode_batch([b"a", b"b"], keys=["k", ""], producer_id="p", sequence=1)
    refused = requests.post(url, data=binary, headers={"Content-Type": CONTENT_TYPE}, timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["index"] == 1
    with Client(cluster.endpoint) as client:
        for batch in ([{"value": "x", "key": ""}], [{"value": "x"}, {"value": "y", "key": ""}]):
            with pytest.raises(InvalidBatch, match="key must not be empty"):
                client.produce("ek", batch)
        with pytest.raises(InvalidBatch, match="message 1"):
            client.produce_columns("ek", {"value": [b"a", b"b"], "key": ["k", ""]})
        assert client.describe_topic("ek")["partition_offsets"][0]["next_offset"] == 0


def test_the_spark_writer_refuses_an_empty_key():
    from msgstore_spark.produce import _check_keys

    _check_keys(pa.table({"value": [b"a"], "key": ["k"]}))
    with pytest.raises(InvalidArgument, match="row 1 .* key must not be empty"):
        _check_keys(pa.table({"value": [b"a", b"b"], "key": [None, ""]}))


# -- 4. the client refuses what the node would ----------------------------------------------
def test_client_produce_refuses_unknown_fields_and_bad_types(cluster):
    cluster.topic("fields", 1)
    with Client(cluster.endpoint) as client:
        for batch, named in (
            ([{"value": "x", "tga": "a"}], "'tga'"),
            ([{"value": "x", "tag": "a"}, {"value": "y", "tga": "a"}], "message 1: unknown"),
            ([{"value": "x", "timestamp": "now"}], "'timestamp'"),
            ([{"value": "x", "partition": True}], "'partition'"),
        ):
            with pytest.raises(InvalidBatch, match=named):
                client.produce("fields", batch)
        assert client.describe_topic("fields")["partition_offsets"][0]["next_offset"] == 0


# -- 5. a follow with --until ends ------------------------------------------------------------
@pytest.mark.parametrize("until", ["past", "soon"])
def test_consume_follow_until_ends_once_every_partition_is_past(cluster, until):
    name = f"fu-{until}"
    ep = cluster.topic(name)
    lines = [b'{"i": %d}' % i for i in range(9)]
    run("produce", name, "--quiet", *ep, stdin=b"\n".join(lines) + b"\n")
    stored = [json.loads(line) for line in run("consume", name, *ep).stdout.splitlines()]
    last = max(m["store_timestamp"] for m in stored)
    end = last if until == "past" else int(time.time() * 1000) + 1500
    out = run("consume", name, "-f", "--until", str(end), "--format", "raw", *ep, timeout=120)
    assert sorted(out.stdout.splitlines()) == sorted(lines)


# -- 6. unkeyed produce uses live nodes; a partial batch resumes exactly once ----------------
def test_unkeyed_lines_go_to_live_nodes_while_one_is_down(cluster):
    ep = cluster.topic("unkeyed")
    cluster.stop(cluster.third)
    try:
        lines = [b'{"u": %d}' % i for i in range(40)]
        run("produce", "unkeyed", "--batch-size", "10", "--quiet", *ep, stdin=b"\n".join(lines))
    finally:
        cluster.restart(cluster.third)
    assert sorted(values(ep, "unkeyed")) == sorted(lines)


def test_a_partly_stored_batch_resumes_exactly_once(cluster, tmp_path):
    ep = cluster.topic("partial")
    owners = cluster.owners("partial")
    data = tmp_path / "keyed.txt"
    lines = [b"k%d:v%d" % (i, i) for i in range(30)]
    data.write_bytes(b"\n".join(lines) + b"\n")
    cluster.stop(cluster.second)
    try:
        failed = run(
            "produce", "partial", "--file", str(data), "-K", ":", "--input", "raw",
            "--print-results", *ep, check=False,
        )  # fmt: skip
    finally:
        cluster.restart(cluster.second)
    assert failed.returncode == 1
    err = failed.stderr.decode()
    printed = [json.loads(line) for line in failed.stdout.splitlines()]
    assert printed and all(owners[r["partition"]] != cluster.second for r in printed)
    advice = err.split("Resume exactly once with: ")[1].split()
    assert advice[:2] == ["--skip", "30"] and "--retry" in advice, err
    resume = ["produce", "partial", "--file", str(data), "-K", ":", "--input", "raw", *advice]
    again = run(*resume, "--print-results", *ep)
    resent = {json.loads(line)["line"] for line in again.stdout.splitlines()}
    assert resent | {r["line"] for r in printed} == set(range(1, 31))
    run(*resume, *ep)  # the same resend again: the node answers it, stores nothing
    assert sorted(values(ep, "partial")) == sorted(line.split(b":", 1)[1] for line in lines)


# -- 7. a group commits only what the reader of a pipe took ------------------------------------
def test_group_into_head_commits_only_what_head_read(cluster):
    ep = cluster.topic("piped")
    lines = [b'{"i": %d}' % i for i in range(1000)]
    run("produce", "piped", "--quiet", *ep, stdin=b"\n".join(lines) + b"\n")
    cmd = " ".join([*CLI, "consume", "piped", "--group", "g", "--format", "raw", *ep])
    head = subprocess.run(
        ["bash", "-c", f"{cmd} | head -5"], capture_output=True, timeout=120, check=True
    )
    got = head.stdout.splitlines()
    assert len(got) == 5
    rest = values(ep, "piped", "--group", "g")
    assert len(rest) == 995 and sorted(got + rest) == sorted(lines)
