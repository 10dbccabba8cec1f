"""build.sh refuses bad requests clearly and without touching its cache.

These run the real script; only the `go` found on PATH is replaced, by a one-line program that
reports an old version, to prove the version check (no old Go toolchain exists here).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"


def run_build(*args: str, cache: Path, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, MSGSTORE_CP_CACHE=str(cache))
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        ["bash", str(BUILD_SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_print_bin_dir_names_every_pinned_version_and_creates_nothing(tmp_path):
    cache = tmp_path / "cache"
    done = run_build("--print-bin-dir", cache=cache)
    assert done.returncode == 0
    bin_dir = Path(done.stdout.strip())
    assert bin_dir.parent.parent == cache and bin_dir.name == "bin"
    for pin in ("k8s-v1.", "etcd-v3.", "kwok-v0.", "helm-v3.", "minio-"):
        assert pin in bin_dir.parent.name
    assert not cache.exists()


def test_unknown_component_is_refused_and_nothing_is_built(tmp_path):
    cache = tmp_path / "cache"
    done = run_build("minio", "kubelet", cache=cache)
    assert done.returncode == 1
    assert "unknown component 'kubelet'" in done.stderr
    assert "known: kubernetes etcd kwok helm minio" in done.stderr
    assert not cache.exists()


def test_missing_or_old_go_is_reported_before_anything_is_built(tmp_path):
    cache = tmp_path / "cache"
    no_go = run_build("minio", cache=cache, path="/usr/bin:/bin")
    assert no_go.returncode == 1
    assert "Go is not installed" in no_go.stderr

    fake_bin = tmp_path / "old-go"
    fake_bin.mkdir()
    (fake_bin / "go").write_text("#!/bin/sh\necho go1.21.0\n")
    (fake_bin / "go").chmod(0o755)
    old_go = run_build("minio", cache=cache, path=f"{fake_bin}:/usr/bin:/bin")
    assert old_go.returncode == 1
    assert "need Go >= 1.26, found go1.21.0" in old_go.stderr
    assert not cache.exists()
