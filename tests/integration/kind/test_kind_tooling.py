"""The kind tooling under scripts/kind/: argument checks, host-settings record and restore, and
the docker shim against the real container engine.

The cluster itself (scripts/kind/kind.sh create cluster with the node image of
scripts/kind/node-image.sh) is exercised by the Kubernetes end-to-end tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
KIND_DIR = REPO / "scripts" / "kind"
HOST_SETTINGS = KIND_DIR / "host-settings.sh"


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def explain(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


def lacks_sys_resource() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return (int(line.split()[1], 16) >> 24) & 1 == 0
    return False


def test_build_binaries_rejects_an_unknown_component(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    proc = run(
        "bash",
        KIND_DIR / "build-binaries.sh",
        "kubelet-typo",
        env={"MSGSTORE_KIND_CACHE": str(cache)},
    )
    assert proc.returncode != 0, explain(proc)
    assert "unknown component 'kubelet-typo'" in proc.stderr, explain(proc)
    assert "k8snode" in proc.stderr, explain(proc)
    assert not cache.exists(), "a rejected call must not create the cache"


def test_print_bin_dir_names_the_versioned_bundle(tmp_path: Path) -> None:
    proc = run(
        "bash",
        KIND_DIR / "build-binaries.sh",
        "--print-bin-dir",
        env={"MSGSTORE_KIND_CACHE": str(tmp_path)},
    )
    assert proc.returncode == 0, explain(proc)
    bin_dir = proc.stdout.strip().splitlines()[-1]
    assert bin_dir.startswith(str(tmp_path) + "/kind-v0.33.0_k8s-v1.36.3_"), bin_dir
    assert bin_dir.endswith("/bin"), bin_dir


def test_node_image_ref_carries_version_and_recipe_hash() -> None:
    proc = run("bash", KIND_DIR / "node-image.sh", "--print-ref")
    assert proc.returncode == 0, explain(proc)
    ref = proc.stdout.strip().splitlines()[-1]
    name, tag = ref.rsplit(":", 1)
    assert name == "local/msgstore-kind-node", ref
    version, digest = tag.rsplit("-", 1)
    assert version == "v1.36.3", ref
    assert len(digest) == 10 and all(c in "0123456789abcdef" for c in digest), ref


def test_node_image_rejects_unknown_arguments() -> None:
    proc = run("bash", KIND_DIR / "node-image.sh", "--frobnicate")
    assert proc.returncode != 0, explain(proc)
    assert "usage" in proc.stderr, explain(proc)


def ensure_kind() -> None:
    """Builds the pinned kind when it is missing (a no-op once cached), never a skip."""
    proc = subprocess.run(
        ["bash", str(KIND_DIR / "build-binaries.sh"), "kind"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, explain(proc)


def test_kind_wrapper_rejects_a_bad_shim_mode() -> None:
    ensure_kind()
    proc = run("bash", KIND_DIR / "kind.sh", "version", env={"MSGSTORE_KIND_SHIM": "sometimes"})
    assert proc.returncode != 0, explain(proc)
    assert "MSGSTORE_KIND_SHIM must be auto, on or off" in proc.stderr, explain(proc)


def test_kind_wrapper_runs_the_pinned_kind() -> None:
    ensure_kind()
    proc = run("bash", KIND_DIR / "kind.sh", "version")
    assert proc.returncode == 0, explain(proc)
    assert proc.stdout.startswith("kind v0.33.0 "), explain(proc)


@pytest.mark.skipif(os.geteuid() != 0, reason="writing /proc/sys needs root")
def test_host_settings_restore_puts_a_changed_sysctl_back(tmp_path: Path) -> None:
    key = Path("/proc/sys/fs/inotify/max_user_instances")
    original = key.read_text().strip()
    record = tmp_path / "host"
    proc = run("bash", HOST_SETTINGS, "save", record)
    assert proc.returncode == 0, explain(proc)
    try:
        same = run("bash", HOST_SETTINGS, "diff", record)
        assert same.returncode == 0, explain(same)

        key.write_text(str(int(original) + 7))
        changed = run("bash", HOST_SETTINGS, "diff", record)
        assert changed.returncode == 1, explain(changed)
        assert (
            f"fs.inotify.max_user_instances: recorded '{original}', now '{int(original) + 7}'"
            in changed.stdout
        )

        restored = run("bash", HOST_SETTINGS, "restore", record)
        assert restored.returncode == 0, explain(restored)
        assert key.read_text().strip() == original
        assert not (record / "sysctl.txt").exists(), "a restored record is removed"
    finally:
        key.write_text(original)


@pytest.mark.skipif(os.geteuid() != 0, reason="creating /lib/modules needs root")
def test_host_settings_removes_a_lib_modules_that_was_absent(tmp_path: Path) -> None:
    if Path("/lib/modules").exists():
        pytest.skip("/lib/modules exists on this host")
    record = tmp_path / "host"
    assert run("bash", HOST_SETTINGS, "save", record).returncode == 0
    Path("/lib/modules").mkdir()
    try:
        proc = run("bash", HOST_SETTINGS, "restore", record)
        assert proc.returncode == 0, explain(proc)
        assert not Path("/lib/modules").exists(), explain(proc)
    finally:
        if Path("/lib/modules").is_dir():
            Path("/lib/modules").rmdir()


def test_host_settings_refuses_to_overwrite_a_record(tmp_path: Path) -> None:
    record = tmp_path / "host"
    first = run("bash", HOST_SETTINGS, "save", record)
    assert first.returncode == 0, explain(first)
    before = (record / "sysctl.txt").read_text()
    second = run("bash", HOST_SETTINGS, "save", record)
    assert second.returncode == 2, explain(second)
    assert "a record is already kept there" in second.stderr, explain(second)
    assert (record / "sysctl.txt").read_text() == before


@pytest.mark.parametrize(
    "args",
    [
        ["restore"],
        ["restore", "/nonexistent/record"],
        ["wipe", "/tmp/x"],
        ["favour-containers", "/tmp/x"],
        ["favour-containers", "/tmp/x", "lots"],
        ["favour-containers", "/tmp/x", "1"],
    ],
)
def test_host_settings_bad_input_is_a_clear_error(args: list[str]) -> None:
    proc = run("bash", HOST_SETTINGS, *args)
    assert proc.returncode == 2, explain(proc)
    assert proc.stderr.startswith("host-settings: "), explain(proc)


ENGINE_CGROUP_FILES = (
    Path("/sys/fs/cgroup/cpu/docker/cpu.shares"),
    Path("/sys/fs/cgroup/docker/cpu.weight"),
)


def test_favoured_containers_get_their_cpu_share_back_on_restore(
    kind_prepared, tmp_path: Path
) -> None:
    """The engine (running, from the kind fixture's preparation) has its containers' CPU
    cgroup; favour-containers raises it and restore puts the recorded value back."""
    files = [f for f in ENGINE_CGROUP_FILES if f.exists()]
    assert files, "the running container engine has no CPU cgroup this script knows"
    original = {f: f.read_text().strip() for f in files}
    record = tmp_path / "host"
    assert run("bash", HOST_SETTINGS, "save", record).returncode == 0
    try:
        for shares in ("8192", "9000"):  # a second call keeps the first recorded value
            proc = run("bash", HOST_SETTINGS, "favour-containers", record, shares)
            assert proc.returncode == 0, explain(proc)
        for f in files:
            expected = "9000" if f.name == "cpu.shares" else str(9000 * 100 // 1024)
            assert f.read_text().strip() == expected
        changed = run("bash", HOST_SETTINGS, "diff", record)
        assert changed.returncode == 1, explain(changed)
        restored = run("bash", HOST_SETTINGS, "restore", record)
        assert restored.returncode == 0, explain(restored)
        assert {f: f.read_text().strip() for f in files} == original
        assert not record.exists(), "a restored record is removed"
    finally:
        for f, value in original.items():
            f.write_text(value)


def test_docker_shim_grants_every_capability_the_host_allows(kind_prepared) -> None:
    """On a host without CAP_SYS_RESOURCE, `docker run --privileged` through the shim starts a
    container holding every other capability of the bounding set (plain docker cannot start it).
    The engine and the node image come from the kind fixture's preparation (built, not skipped)."""
    docker = shutil.which("docker")
    assert docker is not None
    ref = kind_prepared.node_image
    shim = KIND_DIR / "shim" / "docker"
    cmd = [
        "run",
        "--rm",
        "--network",
        "none",
        "--privileged",
        "--entrypoint",
        "grep",
        ref,
        "CapEff",
        "/proc/self/status",
    ]
    proc = run(shim, *cmd, env={"MSGSTORE_KIND_REAL_DOCKER": docker})
    assert proc.returncode == 0, explain(proc)
    effective = int(proc.stdout.split()[1], 16)
    bounding = int(
        next(
            x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("CapBnd:")
        ).split()[1],
        16,
    )
    assert effective & (1 << 21), "CAP_SYS_ADMIN missing: " + proc.stdout
    assert effective & (1 << 24) == 0, "CAP_SYS_RESOURCE must be dropped: " + proc.stdout
    # Docker 20.10 knows capabilities 0..37 (up to CAP_AUDIT_READ); newer kernels have more.
    known = (1 << 38) - 1
    assert effective & known == bounding & known & ~(1 << 24), (
        f"effective {effective:x} vs bounding {bounding:x}"
    )
    if lacks_sys_resource():
        plain = run(docker, *cmd)
        assert plain.returncode != 0, "plain --privileged unexpectedly works here: " + explain(
            plain
        )
