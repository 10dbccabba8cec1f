"""Spark compaction on Kubernetes: a ServiceAccount with the rights spark-submit needs
(driver and executor pods in the namespace) and a CronJob that submits spark/jobs/compact.py
in cluster mode."""

from __future__ import annotations

from typing import Any

from .. import naming
from ..spec import StoreSpec
from .meta import Owner, object_meta

SPARK_SUBMIT = "/opt/spark/bin/spark-submit"
KUBERNETES_MASTER = "k8s://https://kubernetes.default.svc:443"
# Path of the compact job inside the Spark image (the image copies spark/jobs/ there).
COMPACT_JOB = "local:///opt/msgstore/spark/jobs/compact.py"

# What the driver does with its ServiceAccount: create and watch executor pods, the
# driver's headless Service and ConfigMaps, and (for dynamic allocation) volume claims.
SPARK_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
        "verbs": [
            "create",
            "get",
            "list",
            "watch",
            "patch",
            "update",
            "delete",
            "deletecollection",
        ],
    },
]


def build_spark_service_account(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(owner, naming.spark_account_name(owner.name), "spark"),
    }


def build_spark_role(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_meta(owner, naming.spark_account_name(owner.name), "spark"),
        "rules": [dict(rule) for rule in SPARK_RULES],
    }


def build_spark_role_binding(owner: Owner) -> dict[str, Any]:
    name = naming.spark_account_name(owner.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(owner, name, "spark"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}],
    }


def spark_submit_args(
    owner: Owner, spec: StoreSpec, endpoint: str, token_secret: str | None
) -> list[str]:
    """Arguments of spark-submit: cluster mode on this cluster, the node token passed to the
    driver and executors from its Secret (never on the command line)."""
    sp = spec.compaction.spark
    account = naming.spark_account_name(owner.name)
    conf = {
        "spark.kubernetes.namespace": owner.namespace,
        "spark.kubernetes.container.image": sp.image,
        "spark.kubernetes.authenticate.driver.serviceAccountName": account,
        "spark.executor.instances": str(sp.executors),
        "spark.driver.cores": str(sp.driver_cores),
        "spark.driver.memory": sp.driver_memory,
        "spark.executor.cores": str(sp.executor_cores),
        "spark.executor.memory": sp.executor_memory,
        "spark.kubernetes.driver.label.app.kubernetes.io/instance": owner.name,
        "spark.kubernetes.executor.label.app.kubernetes.io/instance": owner.name,
    }
    if spec.auth.enabled and token_secret:
        ref = f"{token_secret}:{spec.auth.token_key}"
        conf["spark.kubernetes.driver.secretKeyRef.MSGSTORE_TOKEN"] = ref
        conf["spark.kubernetes.executor.secretKeyRef.MSGSTORE_TOKEN"] = ref
    args = [
        "--master",
        KUBERNETES_MASTER,
        "--deploy-mode",
        "cluster",
        "--name",
        naming.compaction_cronjob_name(owner.name),
    ]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return [*args, COMPACT_JOB, "--endpoint", endpoint]


def build_compaction_cronjob(
    owner: Owner, spec: StoreSpec, endpoint: str, token_secret: str | None
) -> dict[str, Any]:
    """Runs one compaction at a time on ``compaction.schedule``."""
    labels = naming.common_labels(owner.name, "compaction")
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": object_meta(owner, naming.compaction_cronjob_name(owner.name), "compaction"),
        "spec": {
            "schedule": spec.compaction.schedule,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": labels},
                "spec": {
                    "backoffLimit": 1,
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "serviceAccountName": naming.spark_account_name(owner.name),
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "spark-submit",
                                    "image": spec.compaction.spark.image,
                                    "imagePullPolicy": spec.image_pull_policy,
                                    "command": [SPARK_SUBMIT],
                                    "args": spark_submit_args(owner, spec, endpoint, token_secret),
                                }
                            ],
                        },
                    },
                },
            },
        },
    }
