"""`msgstore spark-job ingest -o yaml`: the rendered Job and its spark-submit command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from msgstore_operator.spark_job import (
    JOBS_DIR,
    KUBERNETES_MASTER,
    IngestRequest,
    SparkResources,
    build_ingest_job,
)


def msgstore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storage_node.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def conf_of(args: list[str]) -> dict[str, str]:
    out = {}
    for flag, value in zip(args, args[1:], strict=False):
        if flag == "--conf":
            key, _, val = value.partition("=")
            out[key] = val
    return out


def test_cli_renders_a_cluster_mode_ingest_job_as_yaml():
    proc = msgstore(
        "spark-job",
        "ingest",
        "--store",
        "orders",
        "-n",
        "shop",
        "--topic",
        "orders",
        "--input",
        "s3a://landing/orders/2026-11-21/",
        "--format",
        "parquet",
        "--key-field",
        "order_id",
        "--tag-field",
        "event_type",
        "--executors",
        "4",
        "--executor-memory",
        "3g",
        "-o",
        "yaml",
    )
    assert proc.returncode == 0, proc.stderr
    job = yaml.safe_load(proc.stdout)
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["metadata"] == {
        "name": "orders-ingest-orders",
        "namespace": "shop",
        "labels": {
            "app.kubernetes.io/name": "msgstore",
            "app.kubernetes.io/instance": "orders",
            "app.kubernetes.io/component": "ingest",
            "app.kubernetes.io/managed-by": "msgstore-cli",
        },
    }
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "orders-spark"
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["command"] == ["/opt/spark/bin/spark-submit"]
    args = container["args"]
    assert args[:4] == ["--master", KUBERNETES_MASTER, "--deploy-mode", "cluster"]
    conf = conf_of(args)
    assert conf["spark.kubernetes.namespace"] == "shop"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "orders-spark"
    assert conf["spark.executor.instances"] == "4"
    assert conf["spark.executor.memory"] == "3g"
    # the token comes from the store's Secret, never from the command line
    assert conf["spark.kubernetes.driver.secretKeyRef.MSGSTORE_TOKEN"] == "orders-token:token"
    assert conf["spark.kubernetes.executor.secretKeyRef.MSGSTORE_TOKEN"] == "orders-token:token"
    job_at = args.index(f"{JOBS_DIR}/ingest.py")
    assert args[job_at + 1 :] == [
        "--endpoint",
        "https://orders.shop.svc.cluster.local:8080",
        "--topic",
        "orders",
        "--input",
        "s3a://landing/orders/2026-11-21/",
        "--format",
        "parquet",
        "--key-column",
        "order_id",
        "--tag-column",
        "event_type",
    ]


def test_json_output_and_no_auth():
    proc = msgstore(
        "spark-job", "ingest", "--store", "s", "--topic", "t", "--input", "local:///d", "--no-auth",
        "-o", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any("MSGSTORE_TOKEN" in a for a in args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--store", "Orders"], "store name 'Orders' must be a DNS label"),
        (["--store", "x" * 41], "at most 40 characters"),
        (["--topic", "a/b"], "topic 'a/b'"),
        (["--topic", ".."], "topic '..'"),
        (["--input", "has space"], "input 'has space'"),
        (["-n", "Bad_NS"], "namespace 'Bad_NS'"),
        (["--executors", "0"], "executors must be an integer from 1 to 256"),
        (["--driver-memory", "lots"], "driver_memory must look like 512m or 2g"),
        (["--port", "70000"], "port must be 1..65535"),
        (["--name", "Job!"], "job name 'Job!'"),
        (["--key-field", "order id"], "key_field 'order id'"),
        (["--driver-request-cores", "a lot"], "driver_request_cores must look like 250m"),
        (["--executor-request-cores", "0m"], "executor_request_cores must look like 250m"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message_and_print_nothing(args, message):
    base = {"--store": "orders", "--topic": "orders", "--input": "local:///data/x.jsonl"}
    argv = ["spark-job", "ingest"]
    given = dict(zip(args[::2], args[1::2], strict=True))
    for key, value in {**base, **given}.items():
        argv += [key, value]
    proc = msgstore(*argv)
    assert proc.returncode == 2
    assert proc.stdout == ""  # nothing for `kubectl apply -f -` to apply
    assert message in proc.stderr


def test_unknown_format_is_refused_by_the_parser():
    proc = msgstore(
        "spark-job", "ingest", "--store", "s", "--topic", "t", "--input", "x", "--format", "xml"
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert "invalid choice: 'xml'" in proc.stderr


def test_long_topic_names_still_give_a_valid_job_name():
    job = build_ingest_job(
        IngestRequest(
            store="a" * 40, namespace="ns", topic="Orders.EU_West-" + "x" * 100, input="i"
        )
    )
    name = job["metadata"]["name"]
    assert len(name) <= 52 and name == name.lower()
    assert name == "a" * 40 + "-ingest-orde"


def test_resources_validation_is_shared_with_the_builder():
    with pytest.raises(Exception, match="executor_memory"):
        SparkResources(executor_memory="2GB").validate()


def test_request_cores_go_to_the_pods_and_default_to_the_cores():
    proc = msgstore(
        "spark-job", "ingest", "--store", "s", "--topic", "t", "--input", "local:///d",
        "--driver-request-cores", "250m", "--executor-request-cores", "0.5", "-o", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    conf = conf_of(json.loads(proc.stdout)["spec"]["template"]["spec"]["containers"][0]["args"])
    assert conf["spark.kubernetes.driver.request.cores"] == "250m"
    assert conf["spark.kubernetes.executor.request.cores"] == "0.5"
    plain = msgstore(
        "spark-job", "ingest", "--store", "s", "--topic", "t", "--input", "x", "-o", "json"
    )
    conf = conf_of(json.loads(plain.stdout)["spec"]["template"]["spec"]["containers"][0]["args"])
    assert not any(key.endswith("request.cores") for key in conf)


def test_ingest_job_reaches_the_store_over_tls_unless_told_otherwise():
    from msgstore_operator.spark_job import IngestRequest, build_ingest_job

    req = IngestRequest(store="orders", namespace="shop", topic="orders", input="/data")
    pod = build_ingest_job(req)["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "https://orders.shop.svc.cluster.local:8080" in args
    assert "spark.kubernetes.driverEnv.MSGSTORE_CA=/etc/msgstore/ca/ca.crt" in args
    assert "spark.kubernetes.driver.label.msgstore.io/client=orders" in args
    assert pod["volumes"] == [
        {"name": "pod-templates", "configMap": {"name": "orders-spark-templates"}}
    ]
    plain = build_ingest_job(
        IngestRequest(store="orders", namespace="shop", topic="orders", input="/data", tls=False)
    )["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "http://orders.shop.svc.cluster.local:8080" in plain
    assert not any("MSGSTORE_CA" in a for a in plain)


def test_cli_no_tls_flag():
    proc = msgstore(
        "spark-job",
        "ingest",
        "--store",
        "orders",
        "--namespace",
        "shop",
        "--topic",
        "t",
        "--input",
        "/data",
        "--no-tls",
        "-o",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    assert "http://orders.shop.svc.cluster.local:8080" in proc.stdout
    assert "MSGSTORE_CA" not in proc.stdout
