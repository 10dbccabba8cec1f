"""The NetworkPolicy enforcer's entrypoint (scripts/kind/netpol/enforcer.sh) on this machine's
kernel, in a network namespace of its own: it installs the NFQUEUE diversion the engine
needs (iptables' NFQUEUE target: this kernel has no nft_queue), hands its flags to the
engine, keeps the engine's exit code and removes its rules after it; without POD_CIDR it
refuses to start. The engine is a stand-in script here (the real one runs on the kind
cluster, tests/e2e/test_11_network_policy.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ENFORCER = REPO / "scripts" / "kind" / "netpol" / "enforcer.sh"
ENGINE = "/usr/local/bin/kube-network-policies"


@pytest.fixture
def entrypoint(tmp_path: Path) -> Path:
    """enforcer.sh with the engine replaced by a script that prints the rules it runs under
    and its flags, then exits 3."""
    if shutil.which("unshare") is None or shutil.which("iptables") is None:
        pytest.fail("unshare and iptables are needed (util-linux, iptables)")
    engine = tmp_path / "engine"
    engine.write_text('#!/bin/bash\niptables -t mangle -S\necho "engine $*"\nexit 3\n')
    engine.chmod(0o755)
    script = tmp_path / "enforcer.sh"
    script.write_text(ENFORCER.read_text().replace(ENGINE, str(engine)))
    return script


def run_in_netns(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "-n", "bash", "-c", command], capture_output=True, text=True, timeout=60
    )


def test_the_diversion_is_installed_for_the_engine_and_removed_after(entrypoint: Path) -> None:
    got = run_in_netns(
        f"POD_CIDR=10.244.0.0/16 NFQUEUE_ID=77 bash {entrypoint} --v=2; echo rc=$?; "
        "echo after; iptables -t mangle -S"
    )
    out, _, after = got.stdout.partition("after\n")
    assert "rc=3" in out, got.stderr  # the engine's exit code
    rules = [line for line in out.splitlines() if "MSGSTORE-NETPOL" in line]
    assert rules == [
        "-N MSGSTORE-NETPOL",
        "-A POSTROUTING -j MSGSTORE-NETPOL",
        "-A MSGSTORE-NETPOL -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN",
        "-A MSGSTORE-NETPOL -p udp -m udp --dport 53 -j RETURN",
        "-A MSGSTORE-NETPOL -m owner --uid-owner 0 -j RETURN",
        "-A MSGSTORE-NETPOL -s 10.244.0.0/16 -j NFQUEUE --queue-num 77 --queue-bypass",
        "-A MSGSTORE-NETPOL -d 10.244.0.0/16 -j NFQUEUE --queue-num 77 --queue-bypass",
    ], out
    assert "engine --nfqueue-id=77 --disable-nri" in out and out.rstrip().endswith("rc=3")
    assert "MSGSTORE-NETPOL" not in after


def test_without_a_pod_cidr_it_refuses_and_installs_nothing(entrypoint: Path) -> None:
    got = run_in_netns(f"bash {entrypoint}; echo rc=$?; iptables -t mangle -S")
    assert "rc=1" in got.stdout and "POD_CIDR must be set" in got.stderr
    assert "MSGSTORE-NETPOL" not in got.stdout and "engine" not in got.stdout
