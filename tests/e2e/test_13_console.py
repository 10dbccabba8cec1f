"""The web console on kind: the operator runs it when the store asks for it, its pod runs Ready
under Pod Security `restricted`, and a real browser on this machine, through `kubectl
port-forward` to its Service, logs in with the store's token and finds an order's messages
by key, exactly those the cluster's own client returns.

It patches the sample store (`spec.console.enabled: true`) and turns the console off again at
the end. The key searched is an order of the sample data (tests/e2e/test_04_spark.py ingests
it); the test first adds three messages of its own to that key, so it also holds when this
module runs alone: `flock /tmp/msgstore-kind.lock pytest tests/e2e/test_13_console.py`.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from e2e_support import CLIENT_LABEL, NAMESPACE, STORE, Shop, pod_ready
from msgstore_operator.pod_security import restricted_violations

from tests.integration.console.chromium_driver import (
    By,
    WebDriverWait,
    chromium,
    needs_chromium,
    wait_for,
)

CONSOLE = f"{STORE}-console"
CONSOLE_SELECTOR = f"app.kubernetes.io/instance={STORE},app.kubernetes.io/component=console"
KEY = "ord-00000042"  # an order of the sample data
TOPIC = "orders"
FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> 8080")


def _patch_console(shop: Shop, console: dict[str, Any] | None) -> None:
    patch = json.dumps({"spec": {"console": console}})
    shop.kubectl("patch", "messagestore", STORE, "--type", "merge", "-p", patch)


def _ready_console_pod(shop: Shop) -> dict[str, Any] | None:
    pods = shop.get("pods", "-l", CONSOLE_SELECTOR)["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return live[0] if len(live) == 1 and pod_ready(live[0]) else None


@pytest.fixture(scope="module")
def console_pod(shop: Shop) -> Iterator[dict[str, Any]]:
    """The store with its console on: the console's pod, once Ready. Off again afterwards,
    and the operator removes its Deployment and Service."""
    _patch_console(shop, {"enabled": True})
    try:
        yield shop.cluster.wait_until(
            lambda: _ready_console_pod(shop), f"the pod of Deployment {CONSOLE} Ready", 300, 2
        )
    finally:
        _patch_console(shop, None)
    shop.cluster.wait_until(
        lambda: all(
            shop.kubectl("get", kind, CONSOLE, check=False).returncode != 0
            for kind in ("deployment", "service")
        ),
        f"the operator to remove {CONSOLE} once the console is off",
        180,
        2,
    )


@pytest.fixture(scope="module")
def forwarded(
    shop: Shop, console_pod: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """`kubectl port-forward` to the console's Service on a free loopback port (kubectl picks
    it and says which); the console's base URL. Stopped by its PID at the end."""
    out = tmp_path_factory.mktemp("port-forward") / "out"
    cluster = shop.cluster
    argv = [str(cluster.kubectl), "--kubeconfig", str(cluster.kubeconfig), "-n", NAMESPACE]
    argv += ["port-forward", "--address", "127.0.0.1", f"svc/{CONSOLE}", ":8080"]
    with out.open("w") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=cluster.env)
    try:

        def port() -> str | None:
            assert proc.poll() is None, f"kubectl port-forward exited: {out.read_text()}"
            found = FORWARDING.search(out.read_text())
            return found.group(1) if found else None

        base = f"http://127.0.0.1:{cluster.wait_until(port, 'the port-forward', 60, 0.2)}"
        cluster.wait_until(
            lambda: _answers(base + "/healthz"), "the console through the port-forward", 60, 1
        )
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=10).status_code == 200
    except requests.RequestException:
        return False


def _token(shop: Shop) -> str:
    raw = shop.kubectl("get", "secret", f"{STORE}-token", "-o", "jsonpath={.data.token}").stdout
    return base64.b64decode(raw).decode()


def test_the_console_pod_runs_ready_under_pod_security_restricted(
    shop: Shop, console_pod: dict[str, Any]
) -> None:
    labels = shop.cluster.get_json("namespace", NAMESPACE)["metadata"]["labels"]
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted", labels
    # The namespace really enforces it: the API server refuses a pod that breaks the profile.
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "not-restricted"},
        "spec": {
            "containers": [{"name": "c", "image": console_pod["spec"]["containers"][0]["image"]}]
        },
    }
    refused = shop.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=json.dumps(bare), check=False
    )
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused
    # The console's pod as the API server admitted and the kubelet runs it.
    spec = console_pod["spec"]
    assert restricted_violations(spec) == []
    (container,) = spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["automountServiceAccountToken"] is False
    # The label the store's NetworkPolicy admits as a client (the cluster enforces it).
    assert console_pod["metadata"]["labels"][CLIENT_LABEL[0]] == STORE
    owners = {(o["kind"], o["name"]) for o in console_pod["metadata"]["ownerReferences"]}
    assert any(kind == "ReplicaSet" and name.startswith(CONSOLE) for kind, name in owners)
    service = shop.get("service", CONSOLE)["spec"]
    assert service["type"] == "ClusterIP" and service["ports"][0]["port"] == 8080


def test_without_a_session_the_console_sends_to_login(forwarded: str) -> None:
    page = requests.get(forwarded + "/", timeout=30, allow_redirects=False)
    assert page.status_code == 303, page.status_code
    assert page.headers["Location"].startswith("/login"), page.headers
    login = requests.get(forwarded + page.headers["Location"], timeout=30)
    assert login.status_code == 200 and 'id="login-form"' in login.text


@needs_chromium
def test_a_browser_logs_in_and_finds_an_orders_messages_by_key(
    shop: Shop, forwarded: str, tmp_path: Path
) -> None:
    added = shop.workload(
        "produce", "--topic", TOPIC, "--run", "console", "--count", "3", "--key", KEY
    )
    assert len(added["acked"]) == 3, added["errors"]
    expected = shop.workload("lookups", "--topic", TOPIC, "--keys", KEY)["by_key"][KEY]
    assert {a[3] for a in added["acked"]} <= set(expected)
    assert expected[0] in {a[3] for a in added["acked"]}  # newest first
    assert len(expected) <= 50, "more than one page of the console: choose another key"
    nodes = len(shop.node_pods())

    with chromium(tmp_path / "profile") as browser:
        browser.get(forwarded + "/")
        wait_for(browser, "#login-form")
        assert "/login" in browser.current_url
        browser.find_element(By.ID, "token").send_keys(_token(shop))
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait_for(browser, "#nodes")
        assert browser.current_url == forwarded + "/"
        assert browser.execute_script("return document.cookie") == ""  # HttpOnly

        # Every node answers the console's pod through the NetworkPolicy.
        def every_node_ok(driver: Any) -> bool:
            driver.refresh()
            rows = driver.find_elements(By.CSS_SELECTOR, "#nodes tbody tr")
            return len(rows) == nodes and all(r.get_attribute("class") == "ok" for r in rows)

        WebDriverWait(browser, 120, 2).until(every_node_ok)

        browser.get(forwarded + "/search")
        wait_for(browser, "#key-search")
        browser.find_element(By.ID, "topic").send_keys(TOPIC)
        browser.find_element(By.ID, "key").send_keys(KEY)
        browser.find_element(By.CSS_SELECTOR, "#key-search button[type=submit]").click()
        wait_for(browser, "#summary")
        summary = browser.find_element(By.ID, "summary").text
        assert summary.startswith(f"{len(expected)} shown ·"), summary  # and no "more exist"
        assert browser.find_elements(By.ID, "unreachable") == []
        shown = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "a.msg-link")]
        assert shown == expected  # the same messages, newest first
        keys = {k.text for k in browser.find_elements(By.CSS_SELECTOR, "td.key")}
        assert keys == {KEY}

        browser.find_elements(By.CSS_SELECTOR, "a.msg-link")[0].click()
        wait_for(browser, "#msg-id")
        assert browser.find_element(By.ID, "msg-id").text == expected[0]
        assert browser.find_element(By.ID, "key").text == KEY
        newest = {a[3]: a[0] for a in added["acked"]}[expected[0]]  # one of those added
        assert browser.find_element(By.ID, "body").text == newest
