"""Clients inside a pod and outside the cluster produce and query through the Services."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from e2e_support import REPO, WORKLOAD, Shop
from fixtures_kind import KindCluster


def test_a_pod_produces_and_queries_by_key_message_id_offset_and_time(shop: Shop) -> None:
    shop.wait_store_ready(3)
    produced = shop.workload(
        "produce", "--topic", "orders", "--run", "inside", "--count", "3000", "--batch", "100"
    )
    assert not produced["unknown"], produced["errors"]
    acked = produced["acked"]
    assert len(acked) == 3000
    by_key: dict[str, list[Any]] = {}
    for value, partition, offset, msg_id in acked:
        by_key.setdefault(f"key-{int(value.split(':')[1]) % 97}", []).append(
            (partition, offset, msg_id)
        )
    # Each key went to one partition (key hash), so its messages are in offset order there.
    assert all(len({p for p, _, _ in v}) == 1 for v in by_key.values())
    sample = acked[::750]
    answers = shop.workload(
        "lookups",
        "--topic", "orders",
        "--keys", "key-1,key-2",
        "--msg-ids", ",".join(a[3] for a in sample),
        "--offsets", ",".join(f"{a[1]}:{a[2]}" for a in sample),
    )  # fmt: skip
    for key in ("key-1", "key-2"):
        want = [m for _, _, m in sorted(by_key[key], key=lambda e: e[1], reverse=True)]
        got = [m for m in answers["by_key"][key] if m in set(want)]
        assert got == want, f"{key}: newest first, every message"
    for value, partition, offset, msg_id in sample:
        one = answers["by_id"][msg_id]
        assert (one["partition"], one["offset"], one["value"]) == (partition, offset, value)
        first = answers["by_offset"][f"{partition}:{offset}"][0]
        assert first[0] == offset and first[2] == msg_id
    by_time = answers["by_time"]
    assert by_time["offsets"] and by_time["offsets"] == by_time["expected"], by_time


def _token(shop: Shop) -> str:
    raw = shop.kubectl("get", "secret", "orders-token", "-o", "jsonpath={.data.token}").stdout
    return base64.b64decode(raw).decode()


def _get(url: str, token: str | None, ca: Path) -> tuple[int, Any]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")
    except (urllib.error.URLError, OSError) as err:
        # The host port accepts before kube-proxy forwards it anywhere: not answered yet.
        return 0, str(err)


def test_the_node_port_answers_from_the_host_with_the_token_only(
    kind_cluster: KindCluster, shop: Shop
) -> None:
    shop.kubectl("apply", "-f", str(REPO / "examples" / "client-nodeport.yaml"))
    token, ca = _token(shop), shop.ca_file()
    base = f"https://127.0.0.1:{kind_cluster.host_ports[30080]}"
    status, body = kind_cluster.wait_until(
        lambda: (lambda r: r if r[0] == 200 else None)(_get(f"{base}/v1/cluster", token, ca)),
        "the NodePort to answer from the host",
        timeout=120,
    )
    assert sorted(n["id"] for n in body["nodes"]) == ["orders-0", "orders-1", "orders-2"]
    status, body = _get(f"{base}/v1/cluster", None, ca)
    assert status == 401, body
    status, body = _get(f"{base}/v1/cluster", "wrong-token", ca)
    assert status in (401, 403), body
    # TLS is on by default: a client that does not trust the store's CA is refused.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"{base}/healthz", timeout=10)


def _host_run(
    endpoint: str, token: str, ca: Path | None, *args: str
) -> subprocess.CompletedProcess[str]:
    """tests/e2e/workload.py run on this machine, outside the cluster."""
    env = {**os.environ, "MSGSTORE_ENDPOINT": endpoint, "MSGSTORE_TOKEN": token}
    env.pop("MSGSTORE_CA", None)
    if ca is not None:
        env["MSGSTORE_CA"] = str(ca)
    return subprocess.run(
        [sys.executable, str(WORKLOAD), *args], env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def _host_workload(endpoint: str, token: str, ca: Path, *args: str) -> Any:
    got = _host_run(endpoint, token, ca, *args)
    assert got.returncode == 0, got.stderr[-3000:]
    return json.loads(got.stdout.strip().splitlines()[-1])


def test_a_client_outside_the_cluster_reaches_every_node_through_its_node_port(
    kind_cluster: KindCluster, shop: Shop
) -> None:
    token, ca = _token(shop), shop.ca_file()
    services = shop.get("services", "-l", "app.kubernetes.io/component=external")["items"]
    ports = sorted(s["spec"]["ports"][0]["nodePort"] for s in services)
    assert ports == [30081, 30082, 30083], ports
    endpoint = "https://127.0.0.1:30081"
    refused = _host_run(endpoint, token, None, "cluster")
    assert refused.returncode != 0 and "certificate verify failed" in refused.stderr, refused
    tables = kind_cluster.wait_until(
        lambda: _host_workload(endpoint, token, ca, "cluster"), "every node from outside", 120, 2
    )
    assert sorted(tables) == ["orders-0", "orders-1", "orders-2"]
    addresses = {n["external_address"] for n in next(iter(tables.values()))["nodes"]}
    assert addresses == {f"https://127.0.0.1:{p}" for p in ports}
    produced = _host_workload(
        endpoint, token, ca, "produce", "--topic", "orders", "--run", "outside", "--count", "1200"
    )
    assert not produced["unknown"], produced["errors"]
    partitions = {a[1] for a in produced["acked"]}
    assert partitions == set(range(6)), partitions  # owned by all three nodes
    sample = produced["acked"][::400]
    answers = _host_workload(
        endpoint, token, ca, "lookups", "--topic", "orders", "--keys", "key-5",
        "--msg-ids", ",".join(a[3] for a in sample),
        "--offsets", ",".join(f"{a[1]}:{a[2]}" for a in sample),
    )  # fmt: skip
    for value, partition, offset, msg_id in sample:
        assert answers["by_id"][msg_id]["value"] == value
        assert answers["by_offset"][f"{partition}:{offset}"][0][2] == msg_id
    assert answers["by_key"]["key-5"]
    assert answers["by_time"]["offsets"] == answers["by_time"]["expected"]
    # What the outside client wrote, a pod inside reads.
    shop.check_acked(produced, "outside:")
