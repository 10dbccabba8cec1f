"""The access file: re-read when it changes, never replaced by a bad or older document (each
refusal counted), changes counted by kind; edits under the lock bump the generation, and a
failed edit leaves the file as it was."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from storage_node.access.access_file import (
    AccessFile,
    access_file_writable,
    edit_access_file,
    read_access_file,
    write_access_file,
)
from storage_node.access.document import AccessDocument, User, parse_rule
from storage_node.errors import InvalidArgument, NotFound

ALICE = User("alice", tls_subject="CN=alice")
RULE = parse_rule({"user": "alice", "operation": "read", "resource": "topic", "name": "t"})


def test_missing_file_is_empty_and_edits_create_it_0600(tmp_path: Path) -> None:
    path = tmp_path / "access.json"
    assert read_access_file(path) == AccessDocument()
    doc = edit_access_file(path, lambda d: d.with_user(ALICE))
    assert doc.generation == 1 and read_access_file(path) == doc
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert edit_access_file(path, lambda d: d.with_rule(RULE)).generation == 2
    assert edit_access_file(path, lambda d: d.with_rule(RULE)).generation == 2  # no change


def test_a_failed_edit_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "access.json"
    edit_access_file(path, lambda d: d.with_user(ALICE))
    before = path.read_bytes()
    with pytest.raises(NotFound):
        edit_access_file(path, lambda d: d.without_user("bob"))
    with pytest.raises(InvalidArgument):
        edit_access_file(path, lambda d: d.with_user(ALICE))
    assert path.read_bytes() == before


def test_concurrent_edits_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "access.json"
    names = [f"u{i}" for i in range(20)]
    threads = [
        threading.Thread(
            target=edit_access_file,
            args=(path, lambda d, n=n: d.with_user(User(n, tls_subject=f"CN={n}"))),
        )
        for n in names
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    doc = read_access_file(path)
    assert sorted(u.name for u in doc.users) == sorted(names) and doc.generation == 20


def test_reload_keeps_the_good_document_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "access.json"
    edit_access_file(path, lambda d: d.with_user(ALICE))
    watched = AccessFile(path, check_interval_s=0)
    assert watched.current().user("alice") is not None and watched.generation == 1
    assert sum(watched.changes.values()) == 0  # the first document is no change
    edit_access_file(path, lambda d: d.with_rule(RULE))
    assert RULE in watched.current().acls
    assert watched.changes == {"acl_added": 1}
    path.write_text("{not json")
    assert watched.current().generation == 2 and watched.rejected == 1
    older = json.loads(json.dumps(read_access_file(tmp_path / "none").to_json()))
    older["generation"] = 1
    path.write_text(json.dumps(older))
    assert RULE in watched.current().acls and watched.rejected == 2
    doc = read_access_file(tmp_path / "none")
    write_access_file(path, doc.__class__(generation=5))  # everything removed
    assert watched.current().users == ()
    assert watched.changes == {"acl_added": 1, "acl_removed": 1, "user_removed": 1}


def test_a_read_only_folder_is_not_writable(tmp_path: Path) -> None:
    path = tmp_path / "ro" / "access.json"
    path.parent.mkdir()
    assert access_file_writable(path)
    if os.geteuid() == 0:  # root ignores modes: a read-only mount, as a mounted Secret is
        script = (
            f"mount --bind {path.parent} {path.parent} && "
            f"mount -o remount,bind,ro {path.parent} && "
            f"{sys.executable} -c 'import sys; from storage_node.access.access_file import "
            f"access_file_writable as w; sys.exit(3 if w(sys.argv[1]) else 0)' {path}"
        )
        proc = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, (proc.returncode, proc.stderr)
        return
    os.chmod(path.parent, 0o500)
    try:
        assert not access_file_writable(path)
    finally:
        os.chmod(path.parent, 0o700)
