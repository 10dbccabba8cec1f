"""What a new user hit with the `msgstore` command, each driven through the command against
real node processes: closed outputs, foreign endpoints, usage errors, the local cluster's
state file and status, a node restarted on a lost volume, endpoint fallback, input details,
`query --format`, and a `--version` that loads no client."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from storage_node.cli.ports import free_port

CLI = [sys.executable, "-m", "storage_node.cli"]


def run(
    *args: str,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
    stdout: int | None = None,
) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MSGSTORE_")}
    proc = subprocess.run(
        [*CLI, *args],
        input=stdin,
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        timeout=180,
        env={**base, **(env or {})},
    )
    if check:
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc


def wait_for(what: str, condition, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("cli-user") / "c")
    up = run("local", "up", "--nodes", "2", "--data-dir", data_dir)
    endpoint = up.stdout.decode().split()[1]
    ep = ["--endpoint", endpoint]
    run("topic", "create", "items", "--partitions", "2", *ep)
    lines = b"".join(b'k%d:{"n": %d}\n' % (i % 5, i) for i in range(3000))
    produced = run("produce", "items", "-K", ":", "--print-results", *ep, stdin=lines)
    first_id = json.loads(produced.stdout.splitlines()[0])["msg_id"]
    run("consume", "items", "--group", "g1", "--max", "10", *ep)
    yield {"endpoint": endpoint, "ep": ep, "dir": data_dir, "msg_id": first_id}
    run("local", "down", "--data-dir", data_dir)


# -- 9. a closed output ends the command quietly with status 0 ---------------------------
CLOSED_OUTPUT_COMMANDS = {
    "cluster": ["cluster"],
    "files": ["files"],
    "topic list": ["topic", "list"],
    "topic describe": ["topic", "describe", "items"],
    "get": ["get", "MSG_ID"],
    "query": ["query", "items", "k1", "--max", "500"],
    "consume": ["consume", "items"],
    "group list": ["group", "list"],
    "group describe": ["group", "describe", "g1"],
}


@pytest.mark.parametrize("name", sorted(CLOSED_OUTPUT_COMMANDS))
def test_a_closed_output_ends_every_command_quietly_with_status_0(cluster, name):
    args = [cluster["msg_id"] if a == "MSG_ID" else a for a in CLOSED_OUTPUT_COMMANDS[name]]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte (as `| head -0`)
    try:
        proc = run(*args, *cluster["ep"], stdout=write_end, check=False)
    finally:
        os.close(write_end)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr == b""


# -- 10. a foreign endpoint, a missing data directory --------------------------------------
def test_an_endpoint_that_is_not_msgstore_is_named_in_one_line(tmp_path):
    port = free_port()
    (tmp_path / "index.html").write_text("<!DOCTYPE html><html><body>hello</body></html>\n")
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"http://127.0.0.1:{port}"
    try:
        wait_for("the web server", lambda: _answers(address))
        for args in (["topic", "list"], ["get", "app-7f000001-1-1"], ["cluster"]):
            proc = run(*args, "--endpoint", address, check=False)
            err = proc.stderr.decode()
            assert proc.returncode == 1, err
            assert err.count("\n") == 1 and "DOCTYPE" not in err, err
            assert err.startswith(f"error: not_msgstore: {address} is not a msgstore node"), err
    finally:
        server.terminate()
        server.wait(10)


def _answers(address: str) -> bool:
    try:
        requests.get(address, timeout=1)
    except requests.RequestException:
        return False
    return True


def test_usage_errors_exit_2_with_one_error_line(tmp_path, cluster):
    ep = cluster["ep"]
    for args in (
        ["local", "status", "--data-dir", str(tmp_path / "nonexistent")],
        ["consume", "items", "--from", "2026-11-25T10:00", "--until", "2026-11-24T10:00", *ep],
        ["group", "reset", "g1", "--topic", "items", "--to-earliest", "--to-latest", *ep],
        ["topic", "create"],  # argparse's own check
        ["consume", "items", "--nope", *ep],
    ):
        proc = run(*args, check=False)
        err = proc.stderr.decode()
        assert proc.returncode == 2, (args, err)
        assert err.startswith("error: usage: ") and err.count("\n") == 1, (args, err)
        assert "Traceback" not in err


# -- 12, 14, 15 and the lost volume: a local cluster's state, status and restarts ----------
def status_rows(data_dir: str, env: dict[str, str] | None = None) -> dict[str, list[str]]:
    out = run("local", "status", "--data-dir", data_dir, env=env).stdout.decode()
    return {line.split()[0]: line.split() for line in out.splitlines()[1:] if line.strip()}


def test_local_cluster_state_status_restart_on_an_empty_directory_and_fallback(tmp_path):
    data_dir = str(tmp_path / "c")
    env = {"MSGSTORE_TOKEN": "s3cret-token"}
    up = run("local", "up", "--nodes", "2", "--token", "s3cret-token", "--data-dir", data_dir)
    addresses = [line.split()[1] for line in up.stdout.decode().splitlines()[:2]]
    try:
        state = Path(data_dir) / "cluster.json"
        assert "s3cret-token" in state.read_text()  # the nodes restart with it
        assert stat.S_IMODE(state.stat().st_mode) == 0o600
        run("topic", "create", "t", "--partitions", "4", "--endpoint", addresses[0], env=env)
        run("produce", "t", "--endpoint", addresses[0], env=env, stdin=b'{"a": 1}\n' * 20)

        # crashed (SIGKILL) and stopped are told apart; no controller without replication
        pid = json.loads(state.read_text())["nodes"][1]["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_for("node-1 gone", lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid))
        run("local", "stop", "node-0", "--data-dir", data_dir)
        rows = status_rows(data_dir)
        assert rows["node-0"][1] == "stopped" and rows["node-1"][1] == "crashed", rows
        assert stat.S_IMODE(state.stat().st_mode) == 0o600  # rewritten: still owner-only
        out = run("local", "status", "--data-dir", data_dir).stdout.decode()
        assert "controller: none" in out

        # a lost volume: the node starts again on an empty directory
        shutil.rmtree(Path(data_dir) / "node-1")
        run("local", "restart", "node-1", "--data-dir", data_dir)
        assert status_rows(data_dir)["node-1"][1] == "running"

        # the given endpoint is dead (node-0 stopped): the cluster's other nodes are tried
        local = {**env, "MSGSTORE_LOCAL_DIR": data_dir}
        listed = run("topic", "list", "--endpoint", addresses[0], env=local)
        assert listed.stdout.startswith(b"t\t")
        both = {**env, "MSGSTORE_ENDPOINT": ",".join(addresses)}
        assert run("topic", "list", env=both).stdout.startswith(b"t\t")
        alone = run("topic", "list", "--endpoint", addresses[0], env=env, check=False)
        assert alone.returncode == 1 and b"error: unavailable" in alone.stderr
    finally:
        run("local", "down", "--data-dir", data_dir)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_replicated_node_restarted_on_a_lost_volume_copies_its_logs_back(tmp_path):
    data_dir = str(tmp_path / "r")
    up = run("local", "up", "--nodes", "3", "--replication-factor", "3", "--data-dir", data_dir)
    addresses = [line.split()[1] for line in up.stdout.decode().splitlines()[:3]]
    ep = ["--endpoint", addresses[0]]
    try:
        out = run("local", "status", "--data-dir", data_dir).stdout.decode()
        assert "controller: running" in out
        leaders = [line.split() for line in out.splitlines() if line.startswith("node-")][3:]
        assert [row[0] for row in leaders] == ["node-0", "node-1", "node-2"], out
        assert all(int(row[2]) >= 1 and row[1].startswith("node-") for row in leaders), out

        run("topic", "create", "r", "--partitions", "6", *ep)
        run("produce", "r", *ep, stdin=b"".join(b'{"i": %d}\n' % i for i in range(600)))
        state = json.loads((Path(data_dir) / "cluster.json").read_text())
        os.kill(state["nodes"][2]["pid"], signal.SIGKILL)
        shutil.rmtree(Path(data_dir) / "node-2")
        run("local", "restart", "node-2", "--data-dir", data_dir)

        def caught_up() -> bool:
            mine = requests.get(addresses[2] + "/v1/replication/status", timeout=5).json()
            for log_id, doc in mine["logs"].items():
                leader = wait_leader_status(addresses, log_id)
                if leader is None or doc["role"] != "follower":
                    return False
                if doc["log_end"] != leader["log_end"] or leader["log_end"] == 0:
                    return False
            return len(mine["logs"]) == 3

        wait_for("node-2 to copy every log back", caught_up, timeout=300)  # a loaded machine
        values = run("consume", "r", "--format", "raw", *ep).stdout.splitlines()
        assert sorted(values) == sorted(b'{"i": %d}' % i for i in range(600))
    finally:
        run("local", "down", "--data-dir", data_dir)


def wait_leader_status(addresses: list[str], log_id: str) -> dict | None:
    for address in addresses:
        try:
            doc = requests.get(address + "/v1/replication/status", timeout=5).json()
        except requests.RequestException:
            continue
        log_doc = doc["logs"].get(log_id)
        if log_doc and log_doc["role"] == "leader":
            return log_doc
    return None


# -- 17. input details ----------------------------------------------------------------------
def test_envelope_with_two_values_is_refused_and_a_bom_is_skipped(cluster):
    ep = cluster["ep"]
    run("topic", "create", "inputs", "--partitions", "1", *ep)
    both = b'{"value": "a", "value_base64": "Yg=="}\n'
    proc = run("produce", "inputs", "--input", "envelope", *ep, stdin=both, check=False)
    assert proc.returncode == 1 and b"both 'value' and 'value_base64'" in proc.stderr
    run("produce", "inputs", *ep, stdin=b'\xef\xbb\xbf{"first": 1}\n{"second": 2}\n')
    values = run("consume", "inputs", "--format", "raw", *ep).stdout.splitlines()
    assert values == [b'{"first": 1}', b'{"second": 2}']


def test_creating_an_existing_topic_with_other_settings_says_what_differs(cluster):
    ep = cluster["ep"]
    proc = run("topic", "create", "items", "--partitions", "5", *ep, check=False)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "partitions 2 (asked 5)" in err and "msgstore topic alter items --partitions 5" in err
    other = run(
        "topic", "create", "items", "--partitions", "2", "--compression", "none", *ep, check=False
    )
    assert "compression 'lz4' (asked 'none')" in other.stderr.decode()
    assert json.loads(run("topic", "describe", "items", *ep).stdout)["partitions"] == 2


# -- 18. query --format, the AsyncClient's operations, a light --version ---------------------
def test_query_prints_in_the_formats_of_consume(cluster):
    ep = cluster["ep"]
    raw = run("query", "items", "k3", "--max", "3", "--format", "raw", *ep).stdout.splitlines()
    assert len(raw) == 3 and all(v.startswith(b'{"n": ') for v in raw)
    tpl = run("query", "items", "k3", "--max", "2", "--format", "%k %t\\n", *ep).stdout
    assert tpl == b"k3 items\nk3 items\n"


def test_both_clients_offer_the_same_operations(cluster):
    import asyncio

    from storage_node.client import AsyncClient, Client

    def public(cls: type) -> set[str]:
        return {n for n in dir(cls) if not n.startswith("_")}

    assert public(Client) == public(AsyncClient)

    async def use() -> dict:
        async with AsyncClient(cluster["endpoint"]) as client:
            results, failures = await client.produce_partial("items", [b"x1", b"x2"])
            assert failures == [] and len(results) == 2
            return {
                "groups": await client.list_groups(),
                "group_list": await client.get("/v1/consumer-groups"),
                "files": await client.files(),
                "compact": await client.compact(),
                "all": [m async for m in client.read_all("items", 0)],
                "consumed": [m async for m in client.consume("items")],
            }

    got = asyncio.run(use())
    with Client(cluster["endpoint"]) as client:
        assert got["groups"] == client.list_groups() == ["g1"]
        assert got["group_list"] == client.get("/v1/consumer-groups")
        assert set(got["files"]) == set(client.files()) == {"node-0", "node-1"}
        assert set(got["compact"]) == {"node-0", "node-1"}
        assert got["all"] == list(client.read_all("items", 0))
        assert len(got["consumed"]) == len(list(client.consume("items"))) == 3002


def test_version_and_help_load_no_client_libraries():
    for args in (["--version"], ["--help"], ["topic", "--help"]):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "storage_node.cli", *args],
            capture_output=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        loaded = {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines()}
        heavy = {m for m in loaded if m.split(".")[0] in ("numpy", "aiohttp", "pyarrow")}
        assert heavy == set(), (args, sorted(heavy)[:5])


# -- 11. TLS errors say what to do ------------------------------------------------------------
def test_tls_errors_give_a_hint(tmp_path):
    data_dir = tmp_path / "tls"
    up = run("local", "up", "--nodes", "1", "--tls", "--data-dir", str(data_dir))
    address = up.stdout.decode().split()[1]
    ca = data_dir / "tls" / "ca.crt"
    try:
        assert address.startswith("https://")
        assert run("topic", "list", "--endpoint", address, "--ca", str(ca)).returncode == 0

        unverified = run("topic", "list", "--endpoint", address, check=False)
        err = unverified.stderr.decode()
        assert unverified.returncode == 1 and err.count("\n") == 1, err
        assert "--ca FILE or MSGSTORE_CA" in err and "DIR/tls/ca.crt" in err, err
        local = {"MSGSTORE_LOCAL_DIR": str(data_dir)}
        named = run("topic", "list", "--endpoint", address, env=local, check=False)
        assert (
            f"--ca FILE or MSGSTORE_CA (a 'msgstore local up --tls' cluster's is {ca.resolve()})"
            in named.stderr.decode()
        )

        not_a_cert = tmp_path / "ca.txt"
        not_a_cert.write_text("this is not a certificate\n")
        bad = run("topic", "list", "--endpoint", address, "--ca", str(not_a_cert), check=False)
        err = bad.stderr.decode()
        assert bad.returncode == 1 and f"CA file {not_a_cert} holds no PEM certificate" in err

        plain = "http://" + address.removeprefix("https://")
        cleartext = run("topic", "list", "--endpoint", plain, check=False)
        err = cleartext.stderr.decode()
        assert cleartext.returncode == 1 and "this node serves HTTPS" in err, err
    finally:
        run("local", "down", "--data-dir", str(data_dir))


def test_restart_after_the_node_directory_was_removed_starts_it_empty(tmp_path):
    data_dir = str(tmp_path / "lost")
    up = run("local", "up", "--nodes", "1", "--data-dir", data_dir)
    address = up.stdout.decode().split()[1]
    try:
        run("local", "stop", "node-0", "--data-dir", data_dir)
        shutil.rmtree(Path(data_dir) / "node-0")  # a lost volume
        restarted = run("local", "restart", "node-0", "--data-dir", data_dir)
        assert restarted.stdout.startswith(b"node-0 " + address.encode())
        assert requests.get(address + "/readyz", timeout=5).status_code == 200
        assert (Path(data_dir) / "node-0" / "node.log").exists()
    finally:
        run("local", "down", "--data-dir", data_dir)
