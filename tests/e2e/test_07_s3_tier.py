"""The S3 tier against MinIO running as a pod: sealed files are uploaded to the bucket and
every acknowledged message is still answered from there, also after the node pod is replaced."""

from __future__ import annotations

import json
from typing import Any

import pytest
from e2e_support import Shop, client_pod_manifest, restricted_security
from fixtures_kind import KindCluster, minio_image

NAMESPACE = "tier"
STORE = "tiered"
BUCKET = "msgstore-tier"
ACCESS_KEY, SECRET_KEY = "msgstore-e2e", "msgstore-e2e-secret"
MINIO_URL = f"http://minio.{NAMESPACE}.svc.cluster.local:9000"


def _minio(image: str) -> list[dict[str, Any]]:
    labels = {"app": "minio"}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "minio", "namespace": NAMESPACE},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "minio",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": ["server", "/data", "--address", ":9000", "--quiet"],
                                "env": [
                                    {"name": "MINIO_ROOT_USER", "value": ACCESS_KEY},
                                    {"name": "MINIO_ROOT_PASSWORD", "value": SECRET_KEY},
                                    {"name": "HOME", "value": "/data"},
                                ],
                                "ports": [{"containerPort": 9000}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/minio/health/ready", "port": 9000},
                                    "periodSeconds": 2,
                                },
                                "securityContext": restricted_security(10001),
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            }
                        ],
                        "volumes": [{"name": "data", "emptyDir": {}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "minio", "namespace": NAMESPACE},
            "spec": {"selector": labels, "ports": [{"port": 9000, "targetPort": 9000}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "tier-s3", "namespace": NAMESPACE},
            "stringData": {
                "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_DEFAULT_REGION": "us-east-1",
            },
        },
    ]


STORE_MANIFEST = {
    "apiVersion": "msgstore.io/v1alpha1",
    "kind": "MessageStore",
    "metadata": {"name": STORE, "namespace": NAMESPACE},
    "spec": {
        "replicas": 1,
        "storage": {"size": "1Gi"},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "segmentBytes": 1048576,
        "index": {"slots": 4096, "items": 16384},
        "topics": [{"name": "logs", "partitions": 2}],
        "tiering": {
            "enabled": True,
            "url": f"s3://{BUCKET}/{STORE}",
            "endpoint": MINIO_URL,
            "credentialsSecret": "tier-s3",
            "uploadAfterHours": 0,
        },
    },
}

S3_LIST = f"""
import boto3, json, sys
s3 = boto3.client("s3", endpoint_url="{MINIO_URL}", aws_access_key_id="{ACCESS_KEY}",
                  aws_secret_access_key="{SECRET_KEY}", region_name="us-east-1")
if sys.argv[1] == "create":
    s3.create_bucket(Bucket="{BUCKET}")
pages = s3.get_paginator("list_objects_v2").paginate(Bucket="{BUCKET}")
print(json.dumps([o["Key"] for p in pages for o in p.get("Contents", [])]))
"""


@pytest.fixture(scope="module")
def tier(kind_cluster: KindCluster, operator_release: str) -> Shop:
    image = minio_image(kind_cluster)
    kind_cluster.run_kubectl("create", "namespace", NAMESPACE)
    kind_cluster.wait_until(
        lambda: kind_cluster.run_kubectl(
            "-n", NAMESPACE, "get", "sa", "default", check=False).returncode == 0,
        "the namespace's default ServiceAccount",
    )  # fmt: skip
    docs = {"apiVersion": "v1", "kind": "List", "items": _minio(image)}
    kind_cluster.run_kubectl("apply", "-f", "-", input=json.dumps(docs))
    kind_cluster.run_kubectl(
        "-n", NAMESPACE, "rollout", "status", "deployment/minio", "--timeout=180s", timeout=200
    )
    kind_cluster.run_kubectl("apply", "-f", "-", input=json.dumps(STORE_MANIFEST))
    shop = Shop(kind_cluster, NAMESPACE, STORE)
    kind_cluster.wait_until(
        lambda: shop.kubectl("get", "secret", f"{STORE}-token", check=False).returncode == 0,
        "the store's token Secret",
        timeout=180,
    )
    shop.kubectl("apply", "-f", "-", input=json.dumps(client_pod_manifest(NAMESPACE, STORE)))
    shop.kubectl("wait", "--for=condition=Ready", "pod/client", "--timeout=180s", timeout=200)
    return shop


def _objects(shop: Shop, create: bool = False) -> list[str]:
    got = shop.kubectl(
        "exec", "-i", "client", "--", "python3", "-", "create" if create else "list",
        input=S3_LIST,
    )  # fmt: skip
    return list(json.loads(got.stdout.strip().splitlines()[-1]))


def _uploaded(shop: Shop) -> int:
    files = shop.workload("files")
    return sum(1 for answer in files.values() for f in answer["files"] if f["state"] == "uploaded")


def test_sealed_files_tier_to_minio_and_every_message_is_still_answered(tier: Shop) -> None:
    assert _objects(tier, create=True) == []
    tier.wait_store_ready(1)
    produced = tier.workload(
        "produce", "--topic", "logs", "--run", "tier", "--count", "30000", "--batch", "500"
    )
    assert not produced["unknown"], produced["errors"]
    uploaded = tier.cluster.wait_until(
        lambda: _uploaded(tier), "sealed files uploaded to MinIO", timeout=300, interval=5
    )
    objects = _objects(tier)
    assert objects and all(key.startswith(f"{STORE}/") for key in objects), objects
    assert uploaded >= 1
    tier.check_acked(produced, "tier:", topic="logs")
    # A replaced pod reads its uploaded files back from MinIO.
    tier.kubectl("delete", "pod", f"{STORE}-0", "--wait=true")
    tier.wait_store_ready(1)
    tier.check_acked(produced, "tier:", topic="logs")
