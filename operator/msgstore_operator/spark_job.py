"""Spark on Kubernetes: the `spark-submit` invocation of msgstore's Spark jobs, as objects.

One place builds the cluster-mode `spark-submit` command line and the pod that runs it, so
the operator's compaction CronJob and the ingest Job rendered by
`msgstore spark-job ingest ... -o yaml` submit jobs the same way: the driver runs in the
cluster with the store's Spark ServiceAccount, the Spark image holds the jobs under
``/opt/msgstore/spark/jobs``, and the node token reaches driver and executors from its
Secret (never on a command line). Everything here is a pure function of its arguments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from msgstore_operator import naming
from msgstore_operator.pod_security import (
    SPARK_UID,
    container_security_context,
    pod_security_context,
)
from storage_node.errors import InvalidArgument
from storage_node.formats.names import is_valid_name

SPARK_SUBMIT = "/opt/spark/bin/spark-submit"
KUBERNETES_MASTER = "k8s://https://kubernetes.default.svc:443"
JOBS_DIR = "local:///opt/msgstore/spark/jobs"
DEFAULT_SPARK_IMAGE = "msgstore-spark:0.1.0"
DEFAULT_PORT = 8080
CLUSTER_DOMAIN = "cluster.local"
INGEST_FORMATS = ("jsonl", "json", "csv", "parquet")

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_MEMORY = re.compile(r"^[0-9]+[kmgt]?$")
_CPU = re.compile(r"^([1-9][0-9]{0,5}m|[0-9]{1,3}(\.[0-9]{1,3})?)$")


def store_endpoint(store: str, namespace: str, port: int = DEFAULT_PORT, tls: bool = False) -> str:
    """The store's client Service, as pods in the cluster reach it."""
    scheme = "https" if tls else "http"
    return naming.service_address(store, namespace, port, CLUSTER_DOMAIN, scheme)


# Spark driver and executor pods get their security context (and the store's CA) from pod
# template files: spark-submit has no setting for a securityContext. The operator keeps the
# templates of each store in a ConfigMap that the submitting pod mounts here.
TEMPLATES_DIR = "/opt/msgstore/pod-templates"
DRIVER_TEMPLATE = "driver.yaml"
EXECUTOR_TEMPLATE = "executor.yaml"
SPARK_CA_DIR = naming.CA_DIR  # the same mount point as in the node pods
SPARK_CA_FILE = naming.CA_FILE


def spark_pod_template(ca_config_map: str | None) -> dict[str, Any]:
    """A driver or executor pod template: Pod Security "restricted" as Spark's uid 185,
    and the store's CA certificate mounted at SPARK_CA_FILE when the store serves TLS."""
    container: dict[str, Any] = {
        "name": "spark",
        "securityContext": container_security_context(read_only_root=False),
    }
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {
            "securityContext": pod_security_context(SPARK_UID, SPARK_UID),
            "containers": [container],
        },
    }
    if ca_config_map:
        container["volumeMounts"] = [
            {"name": "msgstore-ca", "mountPath": SPARK_CA_DIR, "readOnly": True}
        ]
        pod["spec"]["volumes"] = [{"name": "msgstore-ca", "configMap": {"name": ca_config_map}}]
    return pod


def spark_templates_data(ca_config_map: str | None) -> dict[str, str]:
    """The ConfigMap data holding both templates (same content: the roles differ in Spark)."""
    text = yaml.safe_dump(spark_pod_template(ca_config_map), sort_keys=True)
    return {DRIVER_TEMPLATE: text, EXECUTOR_TEMPLATE: text}


def check_dns_label(value: str, what: str, max_len: int = 63) -> str:
    if not _DNS_LABEL.match(value) or len(value) > max_len:
        raise InvalidArgument(
            f"{what} {value!r} must be a DNS label (lowercase letters, digits, '-', starting "
            f"with a letter) of at most {max_len} characters"
        )
    return value


@dataclass(frozen=True)
class SparkResources:
    """Driver and executor sizes (the CRD's compaction.spark fields)."""

    executors: int = 2
    driver_cores: int = 1
    driver_memory: str = "1g"
    executor_cores: int = 1
    executor_memory: str = "2g"
    # CPU the pods request from the scheduler ("250m", "0.5"); None: the cores above. Lower
    # than the cores on small clusters, where a whole core per pod would not be scheduled.
    driver_request_cores: str | None = None
    executor_request_cores: str | None = None

    def validate(self) -> SparkResources:
        for name in ("executors", "driver_cores", "executor_cores"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value > 256:
                raise InvalidArgument(f"{name} must be an integer from 1 to 256, got {value!r}")
        for name in ("driver_memory", "executor_memory"):
            if not _MEMORY.match(getattr(self, name)):
                raise InvalidArgument(
                    f"{name} must look like 512m or 2g, got {getattr(self, name)!r}"
                )
        for name in ("driver_request_cores", "executor_request_cores"):
            value = getattr(self, name)
            if value is not None and not _CPU.match(value):
                raise InvalidArgument(f"{name} must look like 250m, 0.5 or 2, got {value!r}")
        return self


@dataclass(frozen=True)
class SparkSubmit:
    """One cluster-mode submission of a msgstore Spark job."""

    app_name: str
    namespace: str
    image: str
    service_account: str
    job: str  # file name under JOBS_DIR ("ingest.py") or a full URI
    job_args: tuple[str, ...] = ()
    resources: SparkResources = field(default_factory=SparkResources)
    token_secret: str | None = None  # Secret with the node token, or None without auth
    token_key: str = "token"
    labels: tuple[tuple[str, str], ...] = ()  # put on driver and executor pods
    # ConfigMap with the driver/executor pod templates (mounted into the submitting pod).
    pod_templates: str | None = None
    # The store's CA certificate file inside driver and executor pods (env MSGSTORE_CA).
    ca_file: str | None = None

    def job_uri(self) -> str:
        return self.job if "://" in self.job else f"{JOBS_DIR}/{self.job}"


def spark_submit_args(sub: SparkSubmit) -> list[str]:
    """Arguments after `spark-submit`: cluster mode on this cluster, sizes, identity, token."""
    res = sub.resources.validate()
    conf: dict[str, str] = {
        "spark.kubernetes.namespace": sub.namespace,
        "spark.kubernetes.container.image": sub.image,
        "spark.kubernetes.authenticate.driver.serviceAccountName": sub.service_account,
        "spark.executor.instances": str(res.executors),
        "spark.driver.cores": str(res.driver_cores),
        "spark.driver.memory": res.driver_memory,
        "spark.executor.cores": str(res.executor_cores),
        "spark.executor.memory": res.executor_memory,
    }
    if res.driver_request_cores:
        conf["spark.kubernetes.driver.request.cores"] = res.driver_request_cores
    if res.executor_request_cores:
        conf["spark.kubernetes.executor.request.cores"] = res.executor_request_cores
    for key, value in sub.labels:
        conf[f"spark.kubernetes.driver.label.{key}"] = value
        conf[f"spark.kubernetes.executor.label.{key}"] = value
    if sub.token_secret:
        ref = f"{sub.token_secret}:{sub.token_key}"
        conf["spark.kubernetes.driver.secretKeyRef.MSGSTORE_TOKEN"] = ref
        conf["spark.kubernetes.executor.secretKeyRef.MSGSTORE_TOKEN"] = ref
    if sub.pod_templates:
        conf["spark.kubernetes.driver.podTemplateFile"] = f"{TEMPLATES_DIR}/{DRIVER_TEMPLATE}"
        conf["spark.kubernetes.executor.podTemplateFile"] = f"{TEMPLATES_DIR}/{EXECUTOR_TEMPLATE}"
        conf["spark.kubernetes.driver.podTemplateContainerName"] = "spark"
        conf["spark.kubernetes.executor.podTemplateContainerName"] = "spark"
    if sub.ca_file:
        conf["spark.kubernetes.driverEnv.MSGSTORE_CA"] = sub.ca_file
        conf["spark.executorEnv.MSGSTORE_CA"] = sub.ca_file
    args = ["--master", KUBERNETES_MASTER, "--deploy-mode", "cluster", "--name", sub.app_name]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return [*args, sub.job_uri(), *sub.job_args]


def submit_pod_spec(sub: SparkSubmit, image_pull_policy: str = "IfNotPresent") -> dict[str, Any]:
    """The pod that runs spark-submit; the driver and executors it starts are separate pods
    (made "restricted" by the pod templates)."""
    container: dict[str, Any] = {
        "name": "spark-submit",
        "image": sub.image,
        "imagePullPolicy": image_pull_policy,
        "command": [SPARK_SUBMIT],
        "args": spark_submit_args(sub),
        "resources": {
            "requests": {"cpu": "100m", "memory": "512Mi"},
            "limits": {"memory": "1Gi"},
        },
        "securityContext": container_security_context(read_only_root=False),
    }
    pod: dict[str, Any] = {
        "serviceAccountName": sub.service_account,
        "restartPolicy": "Never",
        "securityContext": pod_security_context(SPARK_UID),
        "containers": [container],
    }
    if sub.pod_templates:
        container["volumeMounts"] = [
            {"name": "pod-templates", "mountPath": TEMPLATES_DIR, "readOnly": True}
        ]
        pod["volumes"] = [{"name": "pod-templates", "configMap": {"name": sub.pod_templates}}]
    return pod


def build_spark_job(
    sub: SparkSubmit,
    name: str,
    labels: dict[str, str],
    image_pull_policy: str = "IfNotPresent",
    backoff_limit: int = 1,
    ttl_seconds_after_finished: int | None = 86400,
) -> dict[str, Any]:
    """A batch/v1 Job running one submission (what a CronJob's jobTemplate holds too)."""
    spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "template": {
            "metadata": {"labels": dict(labels)},
            "spec": submit_pod_spec(sub, image_pull_policy),
        },
    }
    if ttl_seconds_after_finished is not None:
        spec["ttlSecondsAfterFinished"] = ttl_seconds_after_finished
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": sub.namespace, "labels": dict(labels)},
        "spec": spec,
    }


@dataclass(frozen=True)
class IngestRequest:
    """What `msgstore spark-job ingest` asks for: load files into a topic of a store."""

    store: str
    namespace: str
    topic: str
    input: str  # any path Spark reads: file:// inside the image, s3a://, hdfs://, ...
    format: str = "jsonl"
    key_field: str | None = None
    tag_field: str | None = None
    time_field: str | None = None
    name: str | None = None
    image: str = DEFAULT_SPARK_IMAGE
    port: int = DEFAULT_PORT
    auth: bool = True
    token_secret: str | None = None
    token_key: str = "token"
    service_account: str | None = None
    image_pull_policy: str = "IfNotPresent"
    resources: SparkResources = field(default_factory=SparkResources)
    tls: bool = True  # the store serves HTTPS (the operator's default)

    def validate(self) -> IngestRequest:
        check_dns_label(self.store, "store name", 40)
        check_dns_label(self.namespace, "namespace")
        if self.name is not None:
            check_dns_label(self.name, "job name", 52)
        if not is_valid_name(self.topic):
            raise InvalidArgument(f"topic {self.topic!r} must be 1-200 of A-Z a-z 0-9 . _ -")
        if self.format not in INGEST_FORMATS:
            raise InvalidArgument(f"format must be one of {', '.join(INGEST_FORMATS)}")
        for what in ("key_field", "tag_field", "time_field"):
            value = getattr(self, what)
            if value is not None and (not value or any(c.isspace() for c in value)):
                raise InvalidArgument(f"{what} {value!r} must be a column name without spaces")
        if not self.input or any(c.isspace() for c in self.input):
            raise InvalidArgument(f"input {self.input!r} must be a non-empty path without spaces")
        if not 1 <= self.port <= 65535:
            raise InvalidArgument(f"port must be 1..65535, got {self.port}")
        if self.image_pull_policy not in ("Always", "IfNotPresent", "Never"):
            raise InvalidArgument("image pull policy must be Always, IfNotPresent or Never")
        if not self.image:
            raise InvalidArgument("image must not be empty")
        self.resources.validate()
        return self

    def job_name(self) -> str:
        return self.name or naming.ingest_job_name(self.store, self.topic)


def build_ingest_job(req: IngestRequest) -> dict[str, Any]:
    """The Job that submits spark/jobs/ingest.py against a store running in the cluster."""
    req.validate()
    name = req.job_name()
    labels = {**naming.common_labels(req.store, "ingest"), **naming.cli_managed()}
    job_args = [
        "--endpoint",
        store_endpoint(req.store, req.namespace, req.port, req.tls),
        "--topic",
        req.topic,
        "--input",
        req.input,
        "--format",
        req.format,
    ]
    for flag, value in (
        ("--key-column", req.key_field),
        ("--tag-column", req.tag_field),
        ("--timestamp-column", req.time_field),
    ):
        if value:
            job_args += [flag, value]
    token_secret = None
    if req.auth:
        token_secret = req.token_secret or naming.token_secret_name(req.store)
    sub = SparkSubmit(
        app_name=name,
        namespace=req.namespace,
        image=req.image,
        service_account=req.service_account or naming.spark_account_name(req.store),
        job="ingest.py",
        job_args=tuple(job_args),
        resources=req.resources,
        token_secret=token_secret,
        token_key=req.token_key,
        # The client label lets driver and executors through the store's NetworkPolicy.
        labels=(("app.kubernetes.io/instance", req.store), (naming.CLIENT_LABEL, req.store)),
        pod_templates=naming.spark_templates_config_map_name(req.store),
        ca_file=SPARK_CA_FILE if req.tls else None,
    )
    return build_spark_job(sub, name, labels, req.image_pull_policy)
