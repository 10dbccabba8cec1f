"""A real kind cluster (one control plane, two workers) running msgstore's own images.

Everything it needs is built on this machine, starting right after collection in the
background while the tests that need no build run (cold builds take longer than the per-test
timeout, so a test that needs them waits before its timeout starts): a Docker engine
(scripts/docker-engine.sh), the kind node image assembled from Go modules and Debian packages
(scripts/kind/node-image.sh), the two msgstore images (scripts/build-images.sh), kubectl and
helm (tests/integration/controlplane/build.sh), and the NetworkPolicy enforcer
(scripts/kind/network-policies.sh: kube-network-policies, installed as a DaemonSet right
after the cluster is created, so every test runs with NetworkPolicy enforced). A failed build never skips anything: every test that needs
the cluster fails with the build's own message.

The cluster is created from the repository's kind-config.yaml with another name, images are loaded with `kind load` (pods never pull: no registry is reachable), and it is
deleted at the end of the session, also after failures (MSGSTORE_E2E_KEEP=1 keeps it for a
look). Host settings that kubelets inside kind nodes change are saved first and restored after,
and a Docker engine started here is stopped by its PID.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_tools import K8sCluster, KubectlError
from fixtures_controlplane import (
    ControlPlaneBuildError,
    echo,
    ensure_built,
    require_binary,
    start_in_background,
    wait_for,
)

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
KIND_SH = SCRIPTS / "kind" / "kind.sh"
NODE_IMAGE_SH = SCRIPTS / "kind" / "node-image.sh"
HOST_SETTINGS_SH = SCRIPTS / "kind" / "host-settings.sh"
# the kind cluster's CPU weight against host processes: four nice-0 processes' worth (8,192
# starved the host's own tests in one run: three local nodes took 80 s to start)
CLUSTER_CPU_SHARES = "4096"
HOST_RECORD = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "msgstore-kind"
    / "host-record"
)
BUILD_IMAGES_SH = SCRIPTS / "build-images.sh"
NETPOL_SH = SCRIPTS / "kind" / "network-policies.sh"
NETPOL_MANIFEST = SCRIPTS / "kind" / "netpol" / "enforcer.yaml"
DOCKER_ENGINE_SH = SCRIPTS / "docker-engine.sh"
CLUSTER_NAME = "msgstore-e2e"
KEEP_ENV = "MSGSTORE_E2E_KEEP"


def app_version() -> str:
    chart = yaml.safe_load((REPO / "helm" / "msgstore" / "Chart.yaml").read_text())
    return str(chart["appVersion"])


NODE_IMAGE = f"msgstore:{app_version()}"
SPARK_IMAGE = f"msgstore-spark:{app_version()}"


@dataclass
class _Prepared:
    """What the collection-time preparation produced, or why it failed."""

    error: str = ""
    node_image: str = ""
    netpol_image: str = ""
    started_engine: bool = False
    times: dict[str, float] = field(default_factory=dict)


_prepared: _Prepared | None = None
# Durations the end-to-end run measured (seconds), printed at the end of the session: the
# figures docs/KUBERNETES.md quotes come from this line.
TIMINGS: dict[str, float] = {}


def _stream(argv: list[str], tag: str, timeout: float) -> str:
    """Runs a build script, echoing its stderr with a tag; returns stdout or raises."""
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None and proc.stdout is not None
    err: list[str] = []
    for line in proc.stderr:
        err.append(line)
        echo(tag, line)
    out = proc.stdout.read()
    code = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
    if code != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited with {code} after {time.monotonic() - started:.0f}s:\n"
            + "".join(err[-60:])
            + out[-4000:]
        )
    return out


def _prepare() -> _Prepared:
    """Engine, node image, msgstore images, kubectl and helm: all built or reused here. Once
    the engine runs, the msgstore images (Debian bases, wheels: mostly downloads and disk)
    build beside the Go builds of the control plane and the node image (mostly CPU), which
    need each other in that order."""
    prep = _Prepared()
    engine = _timed_step(
        prep,
        "docker engine",
        lambda: _stream(["bash", str(DOCKER_ENGINE_SH), "ensure"], "docker", 900),
    )
    if prep.error:
        return prep
    prep.started_engine = str(engine).strip().startswith("started")
    images = _Prepared()
    beside = threading.Thread(
        target=_timed_step,
        args=(
            images,
            "msgstore images",
            lambda: _stream(["bash", str(BUILD_IMAGES_SH), "all"], "images", 3600),
        ),
        name="build-msgstore-images",
    )
    beside.start()
    try:
        _timed_step(
            prep, "kubectl, helm, minio", lambda: ensure_built(["kubernetes", "helm", "minio"])
        )
        if not prep.error:
            node = _timed_step(
                prep, "kind node image", lambda: _stream(["bash", str(NODE_IMAGE_SH)], "kind", 3600)
            )
            lines = [line for line in str(node).splitlines() if line.strip()]
            prep.node_image = lines[-1].strip() if lines else ""
        if not prep.error:
            netpol = _timed_step(
                prep,
                "network policy enforcer",
                lambda: _stream(["bash", str(NETPOL_SH), "build"], "netpol", 3600),
            )
            lines = [line for line in str(netpol).splitlines() if line.strip()]
            prep.netpol_image = lines[-1].strip() if lines else ""
    finally:
        beside.join()
    prep.error = prep.error or images.error
    prep.times.update(images.times)
    if not prep.error:
        echo("kind", f"prepared in {json.dumps(prep.times)}\n")
        TIMINGS.update({f"prepare {k}": v for k, v in prep.times.items()})
    return prep


def _timed_step(prep: _Prepared, what: str, step: Callable[[], Any]) -> Any:
    """Runs one preparation step; records its time in `prep`, or its failure as prep.error."""
    started = time.monotonic()
    try:
        result = step()
    except (RuntimeError, OSError, ControlPlaneBuildError, subprocess.TimeoutExpired) as exc:
        prep.error = f"preparing the kind cluster failed at '{what}':\n{exc}"
        return None
    prep.times[what] = round(time.monotonic() - started, 1)
    return result


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Builds what the cluster needs once, before the first test, when a test needs it."""
    global _prepared
    users = [item for item in items if "kind_cluster" in getattr(item, "fixturenames", ())]
    # The cluster's tests run last (in their own order), so it lives only while they run and
    # never loads the machine under the other tests.
    items[:] = [item for item in items if item not in users] + users
    needed = users or [i for i in items if "kind_prepared" in getattr(i, "fixturenames", ())]
    if config.option.collectonly or _prepared is not None or not needed:
        return

    def prepare() -> None:
        global _prepared
        _prepared = _prepare()

    start_in_background("kind", prepare)


def needs_kind_builds(item: pytest.Item) -> bool:
    """Tests that use the kind preparation, and the image tests (which would otherwise build
    the same images at the same time as the preparation does)."""
    names = getattr(item, "fixturenames", ())
    return (
        "kind_prepared" in names
        or "kind_cluster" in names
        or bool(item.get_closest_marker("images"))
    )


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Such a test waits for the preparation here, before its timeout starts."""
    if needs_kind_builds(item):
        wait_for("kind")
    yield


@dataclass(frozen=True)
class KindCluster(K8sCluster):
    """A running kind cluster: the K8sCluster tools plus kind's own names and ports."""

    node_names: tuple[str, ...] = ()
    worker_names: tuple[str, ...] = ()
    # containerPort of kind-config.yaml's extraPortMappings -> the host port used here.
    host_ports: dict[int, int] = field(default_factory=dict)

    def kind(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return _kind(*args, timeout=timeout)

    def docker(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        proc = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise KubectlError(f"docker {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def diagnostics(self, namespaces: list[str] | None = None) -> str:
        """Pods, events and logs: what a failing end-to-end test prints."""
        parts: list[str] = []

        def add(title: str, *args: str) -> None:
            got = self.run_kubectl(*args, check=False, timeout=60)
            parts.append(f"--- {title} ---\n{got.stdout}{got.stderr}")

        add("nodes", "get", "nodes", "-o", "wide")
        add("pods", "get", "pods", "-A", "-o", "wide")
        add("events", "get", "events", "-A", "--sort-by=.lastTimestamp")
        add("messagestores", "get", "messagestores", "-A", "-o", "yaml")
        pods = self.get_json("pods", "-A").get("items", [])
        for pod in pods:
            ns = pod["metadata"]["namespace"]
            if ns == "kube-system" or (namespaces and ns not in namespaces):
                continue
            name = pod["metadata"]["name"]
            add(f"logs {ns}/{name}", "logs", "-n", ns, name, "--all-containers", "--tail=80")
            restarted = any(
                s.get("restartCount", 0) for s in pod.get("status", {}).get("containerStatuses", [])
            )
            if restarted:
                add(
                    f"previous logs {ns}/{name}",
                    "logs",
                    "-n",
                    ns,
                    name,
                    "--all-containers",
                    "--previous",
                    "--tail=80",
                )
        return "\n".join(parts)


_current: KindCluster | None = None


def binary_image(
    cluster: KindCluster, name: str, binary: Path, user: str, base: str = NODE_IMAGE
) -> str:
    """An image of one binary built on this machine (on `base`, default the node image's
    Debian), loaded on the workers; its tag names the binary's size and time, so a rebuilt
    binary makes a new image. Built with the classic builder and no network: the binary is
    the only thing copied in."""
    stat = binary.stat()
    tag = f"msgstore-e2e/{name}:{stat.st_size}-{int(stat.st_mtime)}"
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
        context = cluster.workdir / f"{name}-image"
        context.mkdir(exist_ok=True)
        (context / binary.name).write_bytes(binary.read_bytes())
        (context / binary.name).chmod(0o755)
        (context / "Dockerfile").write_text(
            f"FROM {base}\nCOPY {binary.name} /usr/local/bin/{binary.name}\nUSER {user}\n"
            f'ENTRYPOINT ["/usr/local/bin/{binary.name}"]\n'
        )
        subprocess.run(
            ["docker", "build", "--network", "none", "-q", "-t", tag, str(context)],
            env={**os.environ, "DOCKER_BUILDKIT": "0"},
            check=True,
            capture_output=True,
        )
    _kind(
        "load",
        "docker-image",
        "--name",
        CLUSTER_NAME,
        tag,
        "--nodes",
        ",".join(cluster.worker_names),
    )
    return tag


def minio_image(cluster: KindCluster) -> str:
    """MinIO (built from its Go module) on the node image's Debian base."""
    return binary_image(cluster, "minio", require_binary("minio"), "10001:10001")


def install_network_policy_enforcer(cluster: KindCluster, image: str) -> None:
    """kube-network-policies as a DaemonSet on every node (scripts/kind/netpol/enforcer.yaml),
    so the NetworkPolicies of the tests are enforced; waits until each node runs it."""
    _kind("load", "docker-image", "--name", cluster.name, image, timeout=600)
    manifest = NETPOL_MANIFEST.read_text().replace("image: IMAGE", f"image: {image}")
    cluster.run_kubectl("apply", "-f", "-", input=manifest)
    cluster.run_kubectl(
        "-n", "kube-system", "rollout", "status", "daemonset/kube-network-policies",
        "--timeout=300s", timeout=330,
    )  # fmt: skip


def _kind(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["bash", str(KIND_SH), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise KubectlError(
            f"kind {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# The test cluster shares two cores with two other pytest processes. Two settings keep its
# control plane answering when the machine is loaded (a CI run once saw the controller manager
# and the scheduler restart 8 times each and the API server miss TLS handshakes):
# - one control plane has no one to elect, yet a leader that misses its lease renewal under
#   load exits, and every restart relists the whole cluster, adding load;
# - etcd without fsync: the nodes' own fsyncs and Kafka's share the disk, and a slow fsync
#   stalls every API write. A test cluster is thrown away, never recovered from disk.
_CONTROL_PLANE_PATCH = {
    "group": "kubeadm.k8s.io",
    "version": "v1beta4",
    "kind": "ClusterConfiguration",
    "patch": yaml.safe_dump(
        [
            {
                "op": "add",
                "path": "/controllerManager/extraArgs/-",
                "value": {"name": "leader-elect", "value": "false"},
            },
            {  # kind gives the scheduler no arguments of its own (a null list)
                "op": "add",
                "path": "/scheduler/extraArgs",
                "value": [{"name": "leader-elect", "value": "false"}],
            },
            {
                "op": "add",
                "path": "/etcd",
                "value": {"local": {"extraArgs": [{"name": "unsafe-no-fsync", "value": "true"}]}},
            },
        ]
    ),
}


def _kind_config(work: Path) -> tuple[Path, dict[int, int]]:
    """kind-config.yaml with this session's cluster name.

    The host ports stay as the file maps them: the external addresses that the sample store
    advertises (127.0.0.1:30081...) must be the ports the host really listens on. A port
    already taken (say, by a cluster of `make kind-up`) is reported, never silently moved.
    """
    config = yaml.safe_load((REPO / "kind-config.yaml").read_text())
    config["name"] = CLUSTER_NAME
    config.setdefault("kubeadmConfigPatchesJSON6902", []).append(_CONTROL_PLANE_PATCH)
    ports: dict[int, int] = {}
    for node in config["nodes"]:
        for mapping in node.get("extraPortMappings", []):
            ports[int(mapping["containerPort"])] = int(mapping["hostPort"])
    busy = sorted(p for p in ports.values() if not _port_free(p))
    if busy:
        raise KubectlError(
            f"host ports {busy} of kind-config.yaml are in use (a cluster of `make kind-up`? "
            "`make kind-down` removes it); the end-to-end cluster needs them"
        )
    path = work / "kind-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path, ports


def _delete(work: Path) -> None:
    _kind(
        "delete",
        "cluster",
        "--name",
        CLUSTER_NAME,
        "--kubeconfig",
        str(work / "gone"),
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="session")
def kind_prepared() -> Iterator[_Prepared]:
    """A running container engine and the kind node image (built after collection); an
    engine started for the session is stopped by its PID at the end."""
    wait_for("kind")
    prep = _prepared or _Prepared(error="the kind cluster was not prepared after collection")
    if prep.error:
        pytest.fail(prep.error, pytrace=False)
    yield prep
    if prep.started_engine and os.environ.get(KEEP_ENV) != "1":
        subprocess.run(["bash", str(DOCKER_ENGINE_SH), "stop"], check=False)


@pytest.fixture(scope="session")
def kind_cluster(
    tmp_path_factory: pytest.TempPathFactory, kind_prepared: _Prepared
) -> Iterator[KindCluster]:
    """The kind cluster for the whole session, with msgstore's images loaded on its nodes."""
    global _current
    prep = kind_prepared
    kubectl = require_binary("kubectl")
    helm = require_binary("helm")
    work = tmp_path_factory.mktemp("kind")
    # The record of the host's settings lives in one place across runs: a run killed before its
    # teardown leaves it behind, and the next run restores it before recording afresh (else it
    # would record, and later "restore", the values the killed run's kubelets had set).
    if (HOST_RECORD / "sysctl.txt").exists():
        subprocess.run(["bash", str(HOST_SETTINGS_SH), "restore", str(HOST_RECORD)], check=True)
    subprocess.run(["bash", str(HOST_SETTINGS_SH), "save", str(HOST_RECORD)], check=True)
    # The cluster's containers share one CPU cgroup that weighs as one host process: beside a
    # busy test run the API server starved and restarted. Restored with the sysctls.
    subprocess.run(
        ["bash", str(HOST_SETTINGS_SH), "favour-containers", str(HOST_RECORD), CLUSTER_CPU_SHARES],
        check=True,
    )
    # A cluster left by an interrupted run is replaced, so a half-failed run can be re-run.
    if CLUSTER_NAME in _kind("get", "clusters", check=False).stdout.split():
        _delete(work)
    config, host_ports = _kind_config(work)
    kubeconfig = work / "kubeconfig"
    env = dict(os.environ)
    env.update(
        {"KUBECONFIG": str(kubeconfig), "PATH": f"{kubectl.parent}{os.pathsep}{env['PATH']}"}
    )
    try:
        started = time.monotonic()
        _kind(
            "create",
            "cluster",
            "--name",
            CLUSTER_NAME,
            "--image",
            prep.node_image,
            "--config",
            str(config),
            "--kubeconfig",
            str(kubeconfig),
            "--wait",
            "300s",
            timeout=900,
        )
        created = time.monotonic() - started
        # again: an engine that had run no container yet had no CPU cgroup to favour before
        subprocess.run(
            ["bash", str(HOST_SETTINGS_SH), "favour-containers", str(HOST_RECORD)]
            + [CLUSTER_CPU_SHARES],
            check=True,
        )
        nodes = _kind("get", "nodes", "--name", CLUSTER_NAME).stdout.split()
        workers = tuple(sorted(n for n in nodes if "worker" in n))
        started = time.monotonic()
        _kind("load", "docker-image", "--name", CLUSTER_NAME, NODE_IMAGE, timeout=900)
        # Spark pods never run on the control plane (it is tainted): load only the workers.
        _kind(
            "load",
            "docker-image",
            "--name",
            CLUSTER_NAME,
            SPARK_IMAGE,
            "--nodes",
            ",".join(workers),
            timeout=900,
        )
        loaded = time.monotonic() - started
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        cluster = KindCluster(
            name=CLUSTER_NAME,
            kubeconfig=kubeconfig,
            api_server_url=str(server),
            kubectl=kubectl,
            helm=helm,
            bin_dir=kubectl.parent,
            workdir=work,
            env=env,
            node_names=tuple(sorted(nodes)),
            worker_names=workers,
            host_ports=host_ports,
        )
        cluster.run_kubectl(
            "wait", "--for=condition=Ready", "nodes", "--all", "--timeout=300s", timeout=330
        )
        started = time.monotonic()
        install_network_policy_enforcer(cluster, prep.netpol_image)
        TIMINGS["network policy enforcer installed"] = round(time.monotonic() - started, 1)
        sys.stderr.write(
            f"[kind] cluster {CLUSTER_NAME}: created in {created:.0f}s, images loaded in "
            f"{loaded:.0f}s\n"
        )
        TIMINGS["kind create cluster"] = round(created, 1)
        TIMINGS["kind load images"] = round(loaded, 1)
        _current = cluster
        yield cluster
    finally:
        _current = None
        if os.environ.get(KEEP_ENV) != "1":
            _delete(work)
        subprocess.run(["bash", str(HOST_SETTINGS_SH), "restore", str(HOST_RECORD)], check=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test on the kind cluster shows the pods' state, events and logs."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and _current is not None and "kind_cluster" in item.fixturenames:
        try:
            text = _current.diagnostics()
        except (KubectlError, subprocess.TimeoutExpired, OSError) as exc:
            text = f"could not collect diagnostics: {exc}"
        report.sections.append(("kubernetes diagnostics", text))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIMINGS:
        terminalreporter.write_line(f"kind end-to-end timings (s): {json.dumps(TIMINGS)}")
