"""Spark compaction on Kubernetes: a ServiceAccount with the rights spark-submit needs
(driver and executor pods in the namespace) and a CronJob that submits spark/jobs/compact.py
in cluster mode."""

from __future__ import annotations

from typing import Any

from msgstore_operator.spark_job import (
    SPARK_CA_FILE,
    SparkResources,
    SparkSubmit,
    build_spark_job,
    spark_templates_data,
)

from .. import naming
from ..spec import StoreSpec
from .meta import Owner, object_meta

# What the driver does with its ServiceAccount: create and watch executor pods, the
# driver's headless Service and ConfigMaps, and (for dynamic allocation) volume claims.
# Spark 4.3's submission client also always server-side-applies a NetworkPolicy
# ("<app>-policy", owned by the driver pod: executors accept traffic only from their own
# application), so the submitting identity needs networkpolicies or the submit fails 403.
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
    # Spark 4 on Kubernetes puts a NetworkPolicy around its executors.
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"],
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


def compaction_submit(
    owner: Owner, spec: StoreSpec, endpoint: str, token_secret: str | None
) -> SparkSubmit:
    """The spark-submit of spark/jobs/compact.py, built by the same code as the ingest Job."""
    sp = spec.compaction.spark
    return SparkSubmit(
        app_name=naming.compaction_cronjob_name(owner.name),
        namespace=owner.namespace,
        image=sp.image,
        service_account=naming.spark_account_name(owner.name),
        job="compact.py",
        job_args=("--endpoint", endpoint),
        resources=SparkResources(
            executors=sp.executors,
            driver_cores=sp.driver_cores,
            driver_memory=sp.driver_memory,
            executor_cores=sp.executor_cores,
            executor_memory=sp.executor_memory,
            driver_request_cores=sp.driver_request_cores,
            executor_request_cores=sp.executor_request_cores,
        ),
        token_secret=token_secret if spec.auth.enabled else None,
        token_key=spec.auth.token_key,
        # The client label lets driver and executors through the store's NetworkPolicy.
        labels=(("app.kubernetes.io/instance", owner.name), (naming.CLIENT_LABEL, owner.name)),
        pod_templates=naming.spark_templates_config_map_name(owner.name),
        ca_file=SPARK_CA_FILE if spec.tls.enabled else None,
    )


def build_compaction_cronjob(
    owner: Owner, spec: StoreSpec, endpoint: str, token_secret: str | None
) -> dict[str, Any]:
    """Runs one compaction at a time on ``compaction.schedule``."""
    labels = naming.common_labels(owner.name, "compaction")
    job = build_spark_job(
        compaction_submit(owner, spec, endpoint, token_secret),
        name=naming.compaction_cronjob_name(owner.name),
        labels=labels,
        image_pull_policy=spec.image_pull_policy,
    )
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
            "jobTemplate": {"metadata": {"labels": labels}, "spec": job["spec"]},
        },
    }


def build_spark_templates_config_map(owner: Owner, spec: StoreSpec) -> dict[str, Any]:
    """Driver and executor pod templates of the store's Spark jobs (compaction and ingest):
    Pod Security "restricted", and the CA ConfigMap mounted when the store serves TLS."""
    ca = naming.ca_config_map_name(owner.name) if spec.tls.enabled else None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(owner, naming.spark_templates_config_map_name(owner.name), "spark"),
        "data": spark_templates_data(ca),
    }
