"""Disk full: appends fail with a clear DiskFull error, acknowledged messages stay readable,
the store writes again once there is room, and crash recovery afterwards loses nothing that
was acknowledged and keeps no half batch.

Two ways to run out of space, both real system behaviour rather than a mocked write call:
* RLIMIT_FSIZE lowered in the writer process (EFBIG from the kernel): works everywhere;
* a 6 MiB tmpfs mounted in a private mount namespace (ENOSPC), when the kernel lets this user
  create one (root, or unprivileged user namespaces); skipped otherwise.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from storage_node.store import Store

from .support import (
    FILL_BATCH,
    child_env,
    config_to_json,
    fill_batch,
    ident_of,
    python_child,
    read_all,
    small_config,
)

TOPIC = "full"
LIMIT = 1 << 20


def writer_config(data_dir: Path):  # noqa: ANN201 - a StoreConfig
    # Segments larger than the limit, so the commit log is what hits it; small index files.
    return small_config(data_dir, segment_bytes=4 << 20)


def parse(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def check_outcome(lines: list[dict], data_dir: Path, stderr: str) -> dict | None:
    """Everything but "writes again once there is room"; returns that record (or None)."""
    errors = [r for r in lines if "error" in r]
    assert errors, f"the writer never reported an error: {lines[-3:]} {stderr[-2000:]}"
    error = errors[0]
    assert error["error"] == "DiskFull" and error["code"] == "disk_full", (
        f"expected DiskFull, got {error}; stderr: {stderr[-2000:]}"
    )
    readable = [r for r in lines if "readable_while_full" in r]
    assert readable and readable[0]["readable_while_full"], "acked messages unreadable when full"

    acked = {}
    for record in lines:
        key = "after" if "after" in record else "batch"
        if "results" not in record:
            continue
        for message, result in zip(fill_batch(record[key]), record["results"], strict=True):
            acked[ident_of(message.value)] = (message, result)
    failed = {ident_of(m.value) for m in fill_batch(error["batch"])}

    store = Store.open(writer_config(data_dir))
    try:
        stored = [m for ms in read_all(store, TOPIC).values() for m in ms]
        idents = [ident_of(m.value) for m in stored]
        assert len(idents) == len(set(idents)), "a message is stored twice"
        unexpected = set(idents) - set(acked) - failed
        assert not unexpected, f"stored but never sent: {sorted(unexpected)[:5]}"
        kept = failed & set(idents)
        assert kept in (set(), failed), f"half of the failed batch survived: {sorted(kept)}"
        for ident, (message, (partition, offset, msg_id)) in acked.items():
            got = store.read(TOPIC, partition, offset, max_messages=1).messages
            assert got and got[0].value == message.value, f"acknowledged {ident} lost"
            assert store.get_message(msg_id).value == message.value
        assert len(acked) >= 2 * FILL_BATCH
    finally:
        store.close()
    after = [r for r in lines if "after" in r or "after_error" in r]
    return after[0] if after else None


def assert_writes_again(after: dict | None) -> None:
    assert after is not None and "after" in after, f"no append once there was room again: {after}"


def run_rlimit_writer(tmp_path: Path) -> tuple[list[dict], Path, str]:
    data_dir = tmp_path / "data"
    config_json = config_to_json(writer_config(data_dir))
    done = subprocess.run(
        python_child("disk_full_writer.py", config_json, TOPIC, str(LIMIT)),
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )
    return parse(done.stdout), data_dir, done.stderr


def test_file_size_limit_raises_disk_full_and_loses_nothing(tmp_path: Path) -> None:
    check_outcome(*run_rlimit_writer(tmp_path))


def test_appends_resume_once_there_is_room_again(tmp_path: Path) -> None:
    assert_writes_again(check_outcome(*run_rlimit_writer(tmp_path)))


def can_mount_tmpfs(probe: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe.mkdir()
    script = f"mount -t tmpfs -o size=1m tmpfs {shlex.quote(str(probe))}"
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script], capture_output=True)
    return done.returncode == 0


def test_real_enospc_on_a_small_filesystem(tmp_path: Path) -> None:
    if not can_mount_tmpfs(tmp_path / "probe"):
        pytest.skip("this user cannot mount a tmpfs in a private mount namespace")
    mount, saved = tmp_path / "mnt", tmp_path / "saved"
    mount.mkdir()
    data_dir = mount / "data"
    writer = python_child(
        "disk_full_writer.py", config_to_json(writer_config(data_dir)), TOPIC, "0"
    )
    # The tmpfs exists only inside the namespace: copy the data folder out after the writer
    # has killed itself, then recover that copy here.
    script = " && ".join(
        [
            f"mount -t tmpfs -o size=6m tmpfs {shlex.quote(str(mount))}",
            f"head -c 1048576 /dev/zero > {shlex.quote(str(mount / 'ballast'))}",
            f"{{ {shlex.join(writer)}; true; }}",
            f"cp -a {shlex.quote(str(data_dir))} {shlex.quote(str(saved))}",
        ]
    )
    done = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )
    assert saved.exists(), f"writer output: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    check_outcome(parse(done.stdout), saved, done.stderr)
