"""kcat-style features of `msgstore`, driven through the real command against a local cluster:
follow (a long poll on the node), start positions, time ranges, output formats, keys from a
delimiter, consumer-group administration, --version and help texts."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import threading
import time

import pytest
import requests

from storage_node.cli.main import build_parser
from tests.integration.cli.commands import CLI, run


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("cli-features") / "c")
    up = run("local", "up", "--nodes", "2", "--data-dir", data_dir)
    yield up.stdout.decode().split()[1]
    run("local", "down", "--data-dir", data_dir)


def make_topic(endpoint: str, name: str, partitions: int = 3) -> list[str]:
    run("topic", "create", name, "--partitions", str(partitions), "--endpoint", endpoint)
    return ["--endpoint", endpoint]


def produce(ep: list[str], name: str, lines: list[bytes], *extra: str) -> None:
    run("produce", name, "--quiet", *extra, *ep, stdin=b"\n".join(lines) + b"\n")


def test_long_poll_answers_when_a_message_arrives(cluster):
    make_topic(cluster, "lp", 1)
    owner = requests.get(cluster + "/v1/topics/lp").json()["partition_offsets"][0]
    url = f"{owner['owner_address']}/v1/topics/lp/partitions/0/messages"
    answer: dict = {}

    def poll() -> None:
        answer.update(requests.get(url, params={"offset": 0, "wait_ms": 30000}, timeout=60).json())

    waiter = threading.Thread(target=poll)
    waiter.start()
    # the poll may start before or after this append: either way it answers with the message
    requests.post(f"{cluster}/v1/topics/lp/messages", json={"messages": [{"value": "x"}]})
    waiter.join(60)
    assert [m["value"] for m in answer["messages"]] == ["x"]
    empty = requests.get(url, params={"offset": 1, "wait_ms": 50}).json()  # times out: empty
    assert empty["messages"] == [] and empty["next_offset"] == 1
    bad = requests.get(url, params={"offset": 1, "wait_ms": 30001})
    assert bad.status_code == 400


def test_follow_from_the_end_prints_new_messages(cluster, tmp_path):
    ep = make_topic(cluster, "tail", 2)
    produce(ep, "tail", [b'"old %d"' % i for i in range(5)])
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        proc = subprocess.Popen(
            [*CLI, "consume", "tail", "-f", "--offset", "end", "--format", "raw", *ep],
            stdout=fh,
            stderr=subprocess.PIPE,
        )
        try:
            new = [b'"new %d"' % i for i in range(4)]
            for _ in range(600):  # produce until the follower (started at the end) sees them
                produce(ep, "tail", new)
                time.sleep(0.2)
                if len(out.read_bytes().splitlines()) >= 4:
                    break
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
    got = out.read_bytes().splitlines()
    assert got and all(line.startswith(b'"new') for line in got), got
    assert proc.returncode == 130


def test_start_positions_time_ranges_formats_and_interleaving(cluster):
    ep = make_topic(cluster, "pos", 3)
    first = [b'{"batch": 1, "i": %d}' % i for i in range(30)]
    produce(ep, "pos", first)
    everything = [json.loads(x) for x in run("consume", "pos", *ep).stdout.splitlines()]
    cut = max(m["store_timestamp"] for m in everything) + 1
    while int(time.time() * 1000) <= cut:
        time.sleep(0.01)
    second = [b'{"batch": 2, "i": %d}' % i for i in range(30)]
    produce(ep, "pos", second)
    docs = [json.loads(x) for x in run("consume", "pos", *ep).stdout.splitlines()]
    assert len(docs) == 60 and len({m["partition"] for m in docs}) == 3
    times = [m["store_timestamp"] for m in docs]
    assert times == sorted(times), "partitions are interleaved by store time"
    raw = lambda *a: run("consume", "pos", "--format", "raw", *a, *ep).stdout.splitlines()  # noqa: E731
    assert sorted(raw("--from", str(cut))) == sorted(second)
    assert sorted(raw("--until", str(cut - 1))) == sorted(first)
    assert sorted(raw("--last", "7")) == sorted(m["value"].encode() for m in docs[-7:])
    assert len(raw("--offset", "-2")) == 6  # two from the end of each partition
    assert raw("--offset", "end") == []
    p0 = [m for m in docs if m["partition"] == 0]
    assert raw("--partition", "0", "--offset", "3") == [m["value"].encode() for m in p0[3:]]
    assert len(raw("--max", "5")) == 5
    tpl = run("consume", "pos", "--format", r"%p/%o\t%v", "--max", "1", *ep).stdout
    m0 = docs[0]
    assert tpl == f"{m0['partition']}/{m0['offset']}\t{m0['value']}\n".encode()


def test_key_delimiter_and_template_keys(cluster):
    ep = make_topic(cluster, "keyed", 2)
    produce(ep, "keyed", [b"user1:hello", b"user2:world:with colon"], "--input", "raw", "-K", ":")
    out = run("consume", "keyed", "--format", "%k=%v", *ep).stdout.splitlines()
    assert sorted(out) == [b"user1=hello", b"user2=world:with colon"]
    bad = run("produce", "keyed", "-K", ":", "--input", "raw", *ep, stdin=b"nokey\n", check=False)
    assert bad.returncode == 1 and "line 1: no key delimiter" in bad.stderr.decode()


def test_group_list_describe_and_reset(cluster):
    ep = make_topic(cluster, "grp", 2)
    produce(ep, "grp", [b"%d" % i for i in range(40)])
    assert (
        len(run("consume", "grp", "--group", "billing", "--max", "10", *ep).stdout.splitlines())
        == 10
    )
    assert "billing" in run("group", "list", *ep).stdout.decode().split()
    doc = json.loads(run("group", "describe", "billing", "--json", *ep).stdout)
    assert sum(r["lag"] for r in doc["partitions"]) == 30
    table = run("group", "describe", "billing", *ep).stdout.decode()
    assert "LAG" in table and "total lag: 30" in table
    run("group", "reset", "billing", "--topic", "grp", "--to-latest", *ep)
    assert run("consume", "grp", "--group", "billing", *ep).stdout == b""
    run("group", "reset", "billing", "--topic", "grp", "--shift-by", "-3", *ep)
    assert len(run("consume", "grp", "--group", "billing", *ep).stdout.splitlines()) == 6
    run("group", "reset", "billing", "--topic", "grp", "--to-earliest", "--dry-run", *ep)
    assert run("consume", "grp", "--group", "billing", *ep).stdout == b""  # dry run: unchanged
    run("group", "reset", "billing", "--topic", "grp", "--to-datetime", "0", *ep)
    assert len(run("consume", "grp", "--group", "billing", *ep).stdout.splitlines()) == 40
    two = run(
        "group",
        "reset",
        "billing",
        "--topic",
        "grp",
        "--to-earliest",
        "--to-latest",
        *ep,
        check=False,
    )
    assert two.returncode == 2 and "exactly one" in two.stderr.decode()


def test_version_and_help_on_every_command_and_flag():
    assert run("--version").stdout.decode().startswith("msgstore ")
    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for name, child in action.choices.items():
                    if path == "msgstore" and name == "spark-job":
                        continue  # renders Kubernetes objects: its own tests check it
                    if not helps.get(name):
                        missing.append(f"{path} {name}")
                    walk(child, f"{path} {name}")
                continue
            if not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(full=True), "msgstore")
    assert missing == []
    for cmd in (["produce"], ["consume"], ["local", "status"], ["group", "reset"]):
        assert run(*cmd, "--help").stdout.startswith(b"usage: msgstore")
