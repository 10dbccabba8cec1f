"""`msgstore local` as a developer uses it: stable ports, status, stopping and restarting
one node, topics created and topics read while a node is down, a crash that loses nothing."""

from __future__ import annotations

import json
import os
import signal

from tests.integration.cli.commands import run


def status(data_dir: str) -> dict[str, list[str]]:
    """node id -> [pid, address, health...] from `local status` (its STATE column in
    ``states``; every node's Kafka address, the KAFKA column, checked and left out)."""
    lines = run("local", "status", "--data-dir", data_dir).stdout.decode().splitlines()
    assert lines[0].split() == ["NODE", "STATE", "PID", "ADDRESS", "KAFKA", "HEALTH"], lines
    out = {}
    for line in lines[1:]:
        if not line.startswith("node-"):
            continue
        node, _state, pid, address, kafka, *health = line.split()
        assert kafka.startswith("127.0.0.1:") and kafka.split(":")[1].isdigit(), line
        out[node] = [pid, address, *health]
    return out


def states(data_dir: str) -> dict[str, str]:
    lines = run("local", "status", "--data-dir", data_dir).stdout.decode().splitlines()
    return {line.split()[0]: line.split()[1] for line in lines[1:] if line.startswith("node-")}


def test_local_cluster_survives_what_a_developer_does(tmp_path):
    data_dir = str(tmp_path / "dev")
    local = ["--data-dir", data_dir]
    run("local", "up", "--nodes", "3", *local)
    try:
        before = status(data_dir)
        assert sorted(before) == ["node-0", "node-1", "node-2"]
        assert all(v[2] == "ready" and v[0].isdigit() for v in before.values()), before
        ep = ["--endpoint", before["node-0"][1]]
        run("topic", "create", "orders", "--partitions", "6", *ep)
        lines = [b'{"order": %d}' % i for i in range(600)]
        run("produce", "orders", "--quiet", *ep, stdin=b"\n".join(lines) + b"\n")

        # ports are kept across down/up: an exported endpoint keeps working
        run("local", "down", *local)
        assert {v[2] for v in status(data_dir).values()} == {"stopped"}
        run("local", "up", "--nodes", "3", *local)
        again = status(data_dir)
        assert {k: v[1] for k, v in again.items()} == {k: v[1] for k, v in before.items()}

        # a crashed node: status says so, and a new topic avoids it (saying why)
        described = json.loads(run("topic", "describe", "orders", *ep).stdout)
        owners = described["owners"]
        held = {d["partition"]: d["messages"] for d in described["partition_offsets"]}
        assert sum(held.values()) == len(lines), held
        os.kill(int(again["node-1"][0]), signal.SIGKILL)
        assert status(data_dir)["node-1"][1] == again["node-1"][1]
        assert states(data_dir)["node-1"] == "crashed"  # not "stopped": nobody stopped it
        created = run("topic", "create", "while-down", "--partitions", "4", *ep)
        doc = json.loads(created.stdout)
        assert "node-1" not in doc["owners"] and set(doc["owners"]) == {"node-0", "node-2"}
        assert "node-1" in doc["skipped_nodes"]
        assert "no partition placed on node-1" in created.stderr.decode()

        # a consumer reads every other partition, then fails naming the unreachable ones
        read = run("consume", "orders", "--format", r"%p %o\n", *ep, check=False)
        down_parts = [p for p, o in enumerate(owners) if o == "node-1"]
        assert read.returncode == 1
        err = read.stderr.decode()
        assert "error: partitions not read" in err
        for p in down_parts:
            assert f"{p} (" in err, err
        got: dict[int, list[int]] = {}
        for row in read.stdout.decode().splitlines():
            p, o = map(int, row.split())
            got.setdefault(p, []).append(o)
        # each live partition whole and in order (the client spreads unkeyed lines, so
        # the counts are the ones describe gave, not assumed equal)
        want = {p: list(range(n)) for p, n in held.items() if p not in down_parts}
        assert got == want, (held, {p: (len(o), o[:3], o[-3:]) for p, o in got.items()})

        # restarted, the node has every acknowledged message
        run("local", "restart", "node-1", *local)
        assert status(data_dir)["node-1"][2] == "ready"
        everything = run("consume", "orders", "--format", "raw", *ep).stdout.splitlines()
        assert sorted(everything) == sorted(lines)

        # one node stopped and started again by name
        assert run("local", "stop", "node-2", *local).stdout.decode().strip() == "node-2 stopped"
        assert status(data_dir)["node-2"][0] == "-"
        assert states(data_dir)["node-2"] == "stopped"
        run("local", "restart", "node-2", *local)
        assert status(data_dir)["node-2"][2] == "ready"
        missing = run("local", "stop", "node-9", *local, check=False)
        assert missing.returncode == 1 and "no node 'node-9'" in missing.stderr.decode()
    finally:
        run("local", "down", *local)


def test_local_up_starts_the_web_console_and_down_stops_it(tmp_path):
    import re

    import requests

    data_dir = str(tmp_path / "with-console")
    local = ["--data-dir", data_dir]
    up = run("local", "up", "--nodes", "1", *local).stdout.decode()
    try:
        m = re.search(r"^console: (http://127\.0\.0\.1:\d+) pid=(\d+)", up, re.M)
        assert m, up
        url = m.group(1)
        page = requests.get(url + "/topics", timeout=30)
        assert page.status_code == 200 and "<h1>Topics</h1>" in page.text
        shown = run("local", "status", *local).stdout.decode()
        assert f"console: running {url} (pid {m.group(2)})" in shown
        down = run("local", "down", *local).stdout.decode()
        assert "stopped the console" in down
        try:
            requests.get(url + "/healthz", timeout=5)
            raise AssertionError("the console still answers after 'local down'")
        except requests.ConnectionError:
            pass
        assert "console: stopped" in run("local", "status", *local).stdout.decode()
        again = run("local", "up", "--nodes", "1", *local).stdout.decode()
        assert f"console: {url} " in again  # its port is kept, as the nodes' are
        bare = str(tmp_path / "bare")
        quiet = run("local", "up", "--nodes", "1", "--no-console", "--data-dir", bare)
        run("local", "down", "--data-dir", bare)
        assert "console:" not in quiet.stdout.decode()
    finally:
        run("local", "down", *local)


def test_a_cluster_that_does_not_come_up_is_not_left_running(tmp_path):
    """`local up` that runs out of time stops every process it started (a replicated cluster:
    nodes and the controller), so nothing is left behind to hold ports or CPU."""
    import pytest

    from storage_node.cli.local import LocalCluster
    from storage_node.errors import Unavailable

    where = str(tmp_path / "slow")

    def started_here() -> list[str]:  # processes whose command line names the cluster's folder
        found = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, ValueError):  # not a process, or it is gone
                continue
            if where in cmdline and int(entry) != os.getpid():
                found.append(f"{entry}: {cmdline}")
        return found

    cluster = LocalCluster(tmp_path / "slow")
    with pytest.raises(Unavailable, match="not ready after"):
        cluster.up(nodes=2, replication_factor=2, timeout=0.01)
    assert not started_here()
    assert not cluster.running()
    # the check can fail: the same cluster started properly is found, then stopped
    cluster.up(nodes=2, replication_factor=2)
    try:
        assert len(started_here()) == 3  # two nodes and the controller
    finally:
        cluster.down()
