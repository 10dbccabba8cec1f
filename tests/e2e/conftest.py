"""msgstore end to end on a real kind cluster: the chart, the operator pod, node pods, Spark.

The `kind_cluster` fixture (tests/fixtures_kind.py) gives the cluster with the images loaded.
Here: the Helm release (session), the sample MessageStore of examples/ with a client pod
(session), and the helpers the test modules share. The modules run in name order and tell
one story on one store: installed, ready, used from inside and outside, reconfigured under
load, fed by Spark on Kubernetes, compacted by its CronJob, hurt, scaled, tiered to MinIO.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from e2e_support import (
    CLIENT_POD,
    NAMESPACE,
    OPERATOR_NAMESPACE,
    RELEASE,
    REPO,
    STORE,
    Shop,
    client_pod_manifest,
)
from fixtures_kind import TIMINGS, KindCluster, app_version

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            # (The e2e marker comes by folder from tests/conftest.py.) The first test also
            # creates the cluster and installs the chart; Spark jobs and node restarts take
            # minutes on a 2-core machine. (No test asserts a duration.)
            item.add_marker(pytest.mark.timeout(1500))


@pytest.fixture(scope="session")
def operator_release(kind_cluster: KindCluster) -> Iterator[str]:
    """The chart installed with the locally built images; the operator runs as a pod."""
    version = app_version()
    kind_cluster.run_helm(
        "upgrade",
        "--install",
        RELEASE,
        str(REPO / "helm" / "msgstore"),
        "--namespace",
        OPERATOR_NAMESPACE,
        "--create-namespace",
        "--set",
        f"image.tag={version}",
        "--set",
        f"spark.image.tag={version}",
        "--set",
        "operator.statusIntervalSeconds=3",
        "--wait",
        "--timeout",
        "5m",
        timeout=330,
    )
    yield RELEASE
    kind_cluster.run_helm("uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, check=False)


def kind_subnet(cluster: KindCluster) -> str:
    """The IPv4 subnet of the docker network the kind nodes are on."""
    got = cluster.docker("network", "inspect", "kind", "-f", "{{json .IPAM.Config}}")
    subnets = [c["Subnet"] for c in json.loads(got) if ":" not in c.get("Subnet", ":")]
    assert subnets, f"no IPv4 subnet on the docker network 'kind': {got}"
    return str(subnets[0])


@pytest.fixture(scope="session")
def shop(kind_cluster: KindCluster, operator_release: str) -> Shop:
    """examples/messagestore.yaml applied in its namespace, plus a client pod. One addition, as
    scripts/kind-up.sh makes it: the NetworkPolicy (enforced here) admits the kind network,
    from whose addresses the host's NodePort traffic reaches the pods."""
    cluster = kind_cluster
    cluster.run_kubectl("create", "namespace", NAMESPACE)
    # Pod Security "restricted" enforced: every pod msgstore creates here must comply.
    cluster.run_kubectl(
        "label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted"
    )
    cluster.wait_until(
        lambda: (
            cluster.run_kubectl("-n", NAMESPACE, "get", "sa", "default", check=False).returncode
            == 0
        ),
        "the namespace's default ServiceAccount",
    )
    store = yaml.safe_load((REPO / "examples" / "messagestore.yaml").read_text())
    store["spec"]["networkPolicy"] = {"ingressFrom": [{"ipBlock": {"cidr": kind_subnet(cluster)}}]}
    cluster.run_kubectl("-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(store))
    shop = Shop(cluster, NAMESPACE, STORE)
    started = time.monotonic()
    shop.wait_credentials()
    shop.kubectl("apply", "-f", "-", input=json.dumps(client_pod_manifest(NAMESPACE, STORE)))
    shop.kubectl(
        "wait", "--for=condition=Ready", f"pod/{CLIENT_POD}", "--timeout=180s", timeout=200
    )
    shop.wait_store_ready(3)
    TIMINGS["sample store applied to Ready (3 node pods)"] = round(time.monotonic() - started, 1)
    return shop
