"""Talking to the test cluster: kubectl/helm runners, JSON reads, polling, namespaces.

Test modules import `KubectlError` (and `K8sCluster` for type hints) from here; the
`k8s_cluster` fixture in conftest.py builds the object.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from waiting import wait_until


class KubectlError(RuntimeError):
    """A kubectl or helm command failed; the message has its arguments and output."""


# What kubectl and helm print when the API server was not reached at all: on a loaded 2-core
# machine a kind or kwok API server can miss a TLS handshake or refuse a connection for a few
# seconds. The request never arrived, so sending it again changes nothing it did not change.
_UNREACHED = (
    "Unable to connect to the server",
    "TLS handshake timeout",
    "connect: connection refused",
)
_UNREACHED_TRIES = 6
_UNREACHED_PAUSE_S = 5.0


# kubectl exec's stream may end in an error after the command's whole output arrived (seen on
# a loaded machine, after a workload had printed its result: "websocket: close 1006 (abnormal
# closure): unexpected EOF")
_STREAM_CUT = ("websocket: close 1006", "error reading from error stream")


def exec_result(returncode: int, out: str, err: str) -> Any:
    """The JSON document on the last line of a `kubectl exec`'s output. A non-zero exit is
    taken only when kubectl says its stream was cut and that line is whole JSON: the command
    had printed its result. Otherwise AssertionError with both outputs."""
    lines = out.strip().splitlines()
    if returncode != 0 and not (lines and any(cut in err for cut in _STREAM_CUT)):
        raise AssertionError(f"workload failed ({returncode}):\n{out}\n{err}")
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise AssertionError(f"workload printed no result ({returncode}):\n{out}\n{err}") from None


def _unreached(proc: subprocess.CompletedProcess[str]) -> bool:
    return proc.returncode != 0 and any(sign in proc.stderr for sign in _UNREACHED)


def _run(
    argv: list[str], env: dict[str, str], input: str | None, check: bool, timeout: float
) -> subprocess.CompletedProcess[str]:
    for attempt in range(_UNREACHED_TRIES):
        proc = subprocess.run(
            argv, env=env, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if not _unreached(proc) or attempt == _UNREACHED_TRIES - 1:
            break
        sys.stderr.write(f"[kubectl] API server not reached, again in {_UNREACHED_PAUSE_S:.0f}s\n")
        time.sleep(_UNREACHED_PAUSE_S)
    if check and proc.returncode != 0:
        raise KubectlError(
            f"{' '.join(argv)} exited with {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


@dataclass(frozen=True)
class K8sCluster:
    """A running kwokctl cluster and the tools to talk to it."""

    name: str
    kubeconfig: Path
    api_server_url: str
    kubectl: Path
    helm: Path
    bin_dir: Path
    workdir: Path
    env: dict[str, str]

    def run_kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """kubectl against this cluster; raises KubectlError on failure when `check`."""
        argv = [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args]
        return _run(argv, self.env, input, check, timeout)

    def run_helm(
        self, *args: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """helm against this cluster; raises KubectlError on failure when `check`."""
        argv = [str(self.helm), "--kubeconfig", str(self.kubeconfig), *args]
        return _run(argv, self.env, None, check, timeout)

    def get_json(self, *args: str) -> Any:
        """`kubectl get ARGS -o json`, parsed."""
        return json.loads(self.run_kubectl("get", *args, "-o", "json").stdout)

    @staticmethod
    def wait_until(
        condition: Callable[[], Any], what: str, timeout: float = 120, interval: float = 0.5
    ) -> Any:
        """Polls `condition` until it returns something truthy (tests/waiting.py)."""
        return wait_until(condition, timeout, what, interval)

    def api_client(self) -> Any:
        """A kubernetes.client.ApiClient configured from this cluster's kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def new_namespace(self, prefix: str = "t") -> str:
        """Creates a uniquely named namespace and waits until pods can be created in it."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.run_kubectl("create", "namespace", name)
        # The ServiceAccount admission plugin rejects pods until the controller manager has
        # created the namespace's default ServiceAccount.
        wait_until(
            lambda: (
                self.run_kubectl(
                    "get", "serviceaccount", "default", "-n", name, check=False
                ).returncode
                == 0
            ),
            60,
            f"namespace {name}'s default ServiceAccount",
            interval=0.3,
        )
        return name
