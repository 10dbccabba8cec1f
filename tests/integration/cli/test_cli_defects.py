"""The `msgstore` command against a real local cluster: data is never lost, changed or
silently skipped (produce/consume defects of the CLI, each driven through the command)."""

from __future__ import annotations

import array
import fcntl
import json
import signal
import socket
import subprocess
import termios
import time

import pytest
import requests

from tests.integration.cli.commands import CLI, run


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    text = proc.stderr.decode(errors="replace")
    assert "Traceback" not in text, text
    return [line for line in text.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("cli-defects") / "c")
    up = run("local", "up", "--nodes", "2", "--data-dir", data_dir)
    endpoint = up.stdout.decode().split()[1]
    yield endpoint
    run("local", "down", "--data-dir", data_dir)


def topic(endpoint: str, name: str, partitions: int = 3) -> list[str]:
    run("topic", "create", name, "--partitions", str(partitions), "--endpoint", endpoint)
    return ["--endpoint", endpoint]


def consume_values(ep: list[str], name: str, *extra: str) -> list[bytes]:
    out = run("consume", name, "--format", "raw", *extra, *ep).stdout
    return out.splitlines()


# -- 1. JSON lines are stored byte for byte ------------------------------------------------
def test_json_lines_with_value_fields_are_stored_byte_for_byte(cluster):
    ep = topic(cluster, "metrics")
    lines = [
        b'{"value": 5, "host": "a"}',
        b'{"value": true}',
        b'{"value": 2.5, "unit": "ms"}',
        b'{"value_base64": "aGk=", "other": [1, 2]}',
        b'{"value": "text",   "spaced" :  1}',
        '{"name": "caf\u00e9 \u65e5\u672c", "value": null}'.encode(),
        b"[1, 2, 3]",
        b"42",
    ]
    run("produce", "metrics", "--quiet", *ep, stdin=b"\n".join(lines) + b"\n")
    assert sorted(consume_values(ep, "metrics")) == sorted(lines)
    # JSON output keeps UTF-8 as it is (no \uXXXX escapes)
    out = run("consume", "metrics", *ep).stdout
    assert "caf\u00e9 \u65e5\u672c".encode() in out and b"\\u00e9" not in out


def test_envelope_input_is_opt_in_and_never_copies_ids_or_positions(cluster):
    ep = topic(cluster, "src", 3)
    topic(cluster, "dst", 1)
    lines = b"".join(b'{"n": %d}\n' % i for i in range(12))
    run("produce", "src", "--quiet", *ep, stdin=lines)
    exported = run("consume", "src", *ep).stdout
    src = [json.loads(line) for line in exported.splitlines()]
    assert {m["partition"] for m in src} == {0, 1, 2}
    run("produce", "dst", "--input", "envelope", "--quiet", *ep, stdin=exported)
    dst = [json.loads(line) for line in run("consume", "dst", *ep).stdout.splitlines()]
    assert sorted(m["value"] for m in dst) == sorted(m["value"] for m in src)
    assert {m["partition"] for m in dst} == {0}  # placed by dst, not copied
    assert not {m["msg_id"] for m in dst} & {m["msg_id"] for m in src}
    # without --input envelope the exported lines are data like any other
    run("produce", "dst", "--quiet", *ep, stdin=exported)
    again = consume_values(ep, "dst", "--offset", "12", "--partition", "0")
    assert sorted(again) == sorted(exported.splitlines())


# -- 2. consumer groups commit exactly what was printed -------------------------------------
def test_chunked_group_reads_cover_every_message_exactly_once(cluster):
    ep = topic(cluster, "chunks", 3)
    lines = [b'{"i": %d}' % i for i in range(257)]
    run("produce", "chunks", "--quiet", *ep, stdin=b"\n".join(lines) + b"\n")
    seen: list[bytes] = []
    for _ in range(20):
        chunk = consume_values(ep, "chunks", "--group", "g", "--max", "40")
        if not chunk:
            break
        assert len(chunk) <= 40
        seen.extend(chunk)
    assert len(seen) == len(lines), f"{len(seen)} read, {len(set(seen))} distinct"
    assert sorted(seen) == sorted(lines)


def test_group_commits_what_a_closed_pipe_received(cluster):
    ep = topic(cluster, "piped", 2)
    lines = [b'{"i": %d}' % i for i in range(50)]
    run("produce", "piped", "--quiet", *ep, stdin=b"\n".join(lines) + b"\n")
    cmd = " ".join([*CLI, "consume", "piped", "--group", "gp", "--format", "raw", *ep])
    head = subprocess.run(
        ["bash", "-c", f"{cmd} | head -3"], capture_output=True, timeout=120, check=True
    )
    got = head.stdout.splitlines()
    assert len(got) == 3
    rest = consume_values(ep, "piped", "--group", "gp")
    assert not set(got) & set(rest), "messages printed before the pipe closed were read again"


def test_ctrl_c_commits_what_was_printed(cluster, tmp_path):
    ep = topic(cluster, "follow-int", 2)
    lines = [b'{"i": %d}' % i for i in range(30)]
    run("produce", "follow-int", "--quiet", *ep, stdin=b"\n".join(lines) + b"\n")
    out_path = tmp_path / "out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [*CLI, "consume", "follow-int", "--group", "gi", "--follow", "--format", "raw", *ep],
            stdout=out,
            stderr=subprocess.PIPE,
        )
        try:
            # Wait (up to 2 minutes on a loaded machine) until all 30 lines are printed.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if len(out_path.read_bytes().splitlines()) >= 30:
                    break
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err.decode()
    assert sorted(out_path.read_bytes().splitlines()) == sorted(lines)
    assert consume_values(ep, "follow-int", "--group", "gi") == []


def test_flag_combinations_work_or_are_refused(cluster):
    ep = topic(cluster, "flags", 3)
    run("produce", "flags", "--quiet", *ep, stdin=b"".join(b"%d\n" % i for i in range(30)))
    for bad in (
        ["--group", "g", "--offset", "5", "--partition", "0"],
        ["--offset", "5"],
        ["--max", "-1"],
        ["--max", "0"],
        ["--last", "3", "--from", "0"],
        ["--partition", "7"],
        ["--format", "%x"],
        ["--from", "yesterday-ish"],
    ):
        proc = run("consume", "flags", *bad, *ep, check=False)
        assert proc.returncode != 0 and proc.stdout == b"", bad
        assert len(error_lines(proc)) == 1, (bad, proc.stderr)
    # --group with --partition reads and commits only that partition
    only0 = consume_values(ep, "flags", "--group", "gp", "--partition", "0")
    everything = consume_values(ep, "flags", "--group", "gp")
    assert len(only0) + len(everything) == 30 and not set(only0) & set(everything)


# -- 3. a partial run says so and can be resumed -------------------------------------------
def test_produce_into_a_closed_pipe_fails_and_resumes_exactly(cluster, tmp_path):
    ep = topic(cluster, "resume", 3)
    data = tmp_path / "in.jsonl"
    data.write_bytes(b"".join(b'{"i": %d}\n' % i for i in range(5000)))
    cmd = " ".join(
        [*CLI, "produce", "resume", "--file", str(data), "--print-results", "--batch-size", "100"]
        + ep
    )
    proc = subprocess.run(
        ["bash", "-c", f"{cmd} 2>{tmp_path}/err | head -1; echo ${{PIPESTATUS[0]}}"],
        capture_output=True,
        timeout=120,
    )
    status = int(proc.stdout.splitlines()[-1])
    err = (tmp_path / "err").read_text()
    assert status != 0, err
    assert "Traceback" not in err and err.count("error:") == 1, err
    skip = int(err.split("--skip ")[1].split()[0])
    assert 0 < skip < 5000
    run("produce", "resume", "--file", str(data), "--skip", str(skip), "--quiet", *ep)
    stored = consume_values(ep, "resume")
    assert len(stored) == 5000 and sorted(stored) == sorted(data.read_bytes().splitlines())


def test_skip_bad_reports_line_numbers_and_keeps_a_reject_file(cluster, tmp_path):
    ep = topic(cluster, "imports", 2)
    big = b'{"blob": "' + b"x" * (4 << 20) + b'"}'  # over the node's 4 MiB message limit
    lines = [b'{"i": 1}', b'{"i": 2}', b"not json", b'{"i": 4}', b"\xff\xfe", big, b'{"i": 7}']
    stdin = b"\n".join(lines) + b"\n"
    strict = run("produce", "imports", "--quiet", *ep, stdin=stdin, check=False)
    assert strict.returncode == 1
    assert error_lines(strict) == [
        "error: line 3: not JSON (Expecting value: line 1 column 1 (char 0)); "
        "use --input raw for plain text lines"
    ]
    assert "resume with --skip 2" in strict.stderr.decode()
    assert sorted(consume_values(ep, "imports")) == [b'{"i": 1}', b'{"i": 2}']
    rejects = tmp_path / "rejects"
    lenient = run(
        "produce", "imports", "--skip", "2", "--reject-file", str(rejects), *ep, stdin=stdin
    )
    err = lenient.stderr.decode()
    assert "line 3: not JSON" in err and "line 5: not UTF-8" in err
    assert "line 6: message_too_large" in err and "skipped 3 bad line(s): 3, 5, 6" in err
    assert rejects.read_bytes() == b"not json\n\xff\xfe\n" + big + b"\n"
    got = sorted(consume_values(ep, "imports"))
    assert got == sorted([b'{"i": 1}', b'{"i": 2}', b'{"i": 4}', b'{"i": 7}'])


# -- 4. streaming input is stored as it comes ------------------------------------------------
def test_streamed_lines_are_stored_while_the_stream_stays_open_and_on_ctrl_c(cluster):
    ep = topic(cluster, "stream", 1)
    proc = subprocess.Popen(
        [*CLI, "produce", "stream", "--input", "raw", *ep],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"log line 1\nlog line 2\nlog line 3\n")
        proc.stdin.flush()
        for _ in range(600):  # the stream stays open: only the linger can send them
            if len(consume_values(ep, "stream")) == 3:
                break
            time.sleep(0.05)
        assert consume_values(ep, "stream") == [b"log line 1", b"log line 2", b"log line 3"]
    finally:
        proc.kill()
        proc.communicate()
    # Ctrl-C sends what is buffered (a linger longer than the test keeps it buffered)
    proc = subprocess.Popen(
        [*CLI, "produce", "stream", "--input", "raw", "--linger-ms", "600000", *ep],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(b"held 1\nheld 2\n")
    proc.stdin.flush()
    for _ in range(1200):  # until the command has read them from the pipe
        if unread_bytes(proc.stdin) == 0:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)  # stdin stays open: only the interrupt ends the run
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert "resume with --skip 2" in err.decode()
    assert consume_values(ep, "stream")[3:] == [b"held 1", b"held 2"]


def unread_bytes(pipe) -> int:
    """Bytes written to the pipe that its reader has not read yet (FIONREAD)."""
    buf = array.array("i", [0])
    fcntl.ioctl(pipe.fileno(), termios.FIONREAD, buf)
    return buf[0]


# -- 5. message IDs are unique ---------------------------------------------------------------
def test_duplicate_message_ids_are_refused(cluster):
    ep = topic(cluster, "ids-a", 1)
    topic(cluster, "ids-b", 1)
    owner = requests.get(cluster + "/v1/topics/ids-a").json()["owners"][0]
    mid = "shop-0a000001-400000-7"
    line = json.dumps({"value": "first", "msg_id": mid}).encode() + b"\n"
    run("produce", "ids-a", "--input", "envelope", "--keep", "msg_id", *ep, stdin=line)
    again = run(
        "produce", "ids-a", "--input", "envelope", "--keep", "msg_id", *ep, stdin=line, check=False
    )
    assert again.returncode == 1
    assert "line 1: duplicate_msg_id" in again.stderr.decode()
    b_owner = requests.get(cluster + "/v1/topics/ids-b").json()["owners"][0]
    other = json.dumps({"value": "second", "msg_id": mid}).encode() + b"\n"
    dup = run(
        "produce", "ids-b", "--input", "envelope", "--keep", "msg_id", *ep, stdin=other, check=False
    )
    if b_owner == owner:  # same node: refused, never stored beside the first
        assert dup.returncode == 1 and "duplicate_msg_id" in dup.stderr.decode()
    got = json.loads(run("get", mid, *ep).stdout)
    assert got["msg_id"] == mid and got["value"] in ("first", "second")
    assert got["topic"] == ("ids-a" if got["value"] == "first" else "ids-b")
    # another spelling of the same ID is never answered with that record
    odd = run("get", "shop-0A000001-400000-7", *ep, check=False)
    assert odd.returncode == 1 and "not_found" in odd.stderr.decode()


# -- 6. bad input: one error line, non-zero exit, no traceback ------------------------------
def test_bad_inputs_end_with_one_error_line(cluster, tmp_path):
    ep = topic(cluster, "bad", 2)
    env_cases = {
        "bad unicode key": b'{"value": "x", "key": "\\ud800"}',
        "non-string key": b'{"value": "x", "key": 5}',
        "bad base64": b'{"value_base64": "!!!"}',
        "float value": b'{"value": 2.5}',
        "no value": b'{"key": "k"}',
    }
    for name, line in env_cases.items():
        proc = run("produce", "bad", "--input", "envelope", *ep, stdin=line + b"\n", check=False)
        assert proc.returncode == 1, name
        assert len(error_lines(proc)) == 1 and "line 1" in error_lines(proc)[0], name
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cases = [
            ["produce", "bad", "--file", str(tmp_path / "missing.jsonl"), *ep],
            ["produce", "nosuchtopic", *ep],
            ["produce", "bad", "--key-field", "k", "--input", "raw", *ep],
            ["consume", "nosuchtopic", *ep],
            ["get", "not-an-id", *ep],
            ["topic", "create", "bad/name", *ep],
            ["consume", "bad", "--endpoint", "http://127.0.0.1:9"],
            ["serve", "--data-dir", str(tmp_path / "n"), "--port", str(port)],
        ]
        for args in cases:
            stdin = b'{"a": 1}\n' if args[0] == "produce" else None
            proc = run(*args, stdin=stdin, check=False)
            assert proc.returncode != 0, args
            assert len(error_lines(proc)) == 1, (args, proc.stderr)
    non_utf8 = run("produce", "bad", *ep, stdin=b'{"a": "\xff"}\n', check=False)
    assert non_utf8.returncode == 1 and "line 1: not UTF-8" in error_lines(non_utf8)[0]


def test_oversized_batches_are_split_by_bytes(tmp_path):
    data_dir = str(tmp_path / "small-body")
    env = {"MSGSTORE_MAX_BODY_BYTES": str(256 * 1024)}
    up = run("local", "up", "--nodes", "1", "--data-dir", data_dir, env=env)
    try:
        ep = topic(up.stdout.decode().split()[1], "big", 2)
        lines = [b'{"i": %d, "pad": "%s"}' % (i, b"p" * 2000) for i in range(600)]
        proc = run(
            "produce", "big", "--batch-bytes", str(64 << 20), *ep, stdin=b"\n".join(lines) + b"\n"
        )
        assert "produced 600" in proc.stderr.decode()
        assert sorted(consume_values(ep, "big")) == sorted(lines)
    finally:
        run("local", "down", "--data-dir", data_dir)


# -- 7. progress output only on a terminal ---------------------------------------------------
def test_no_progress_output_in_a_pipe(cluster):
    ep = topic(cluster, "quiet", 1)
    proc = run("produce", "quiet", *ep, stdin=b"".join(b"%d\n" % i for i in range(3000)))
    assert b"\r" not in proc.stderr and proc.stderr.decode().splitlines() == [
        "produced 3000 message(s) to quiet"
    ]
