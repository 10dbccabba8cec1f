"""Spark on Kubernetes: a rendered ingest Job whose driver pod starts executor pods, and the
store's compaction CronJob compacting every node's sealed files in executors."""

from __future__ import annotations

import time
from typing import Any

from e2e_support import Shop, spark_job_yaml, watch_pods
from fixtures_kind import SPARK_IMAGE, TIMINGS

SAMPLE = "file:///opt/msgstore/data/orders-sample.jsonl"
SAMPLE_MESSAGES = 100_000


def _job_done(shop: Shop, name: str) -> dict[str, Any] | None:
    conds = shop.get("job", name).get("status", {}).get("conditions", [])
    for cond in conds:
        if cond["type"] in ("Complete", "Failed") and cond["status"] == "True":
            return cond
    return None


def _run_job(shop: Shop, job: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """Applies a Job, watches its Spark pods until it ends; the pods seen, by name."""
    name = job["metadata"]["name"]
    shop.kubectl("delete", "job", name, "--ignore-not-found", "--wait=true")
    import json

    shop.kubectl("apply", "-f", "-", input=json.dumps(job))
    started = time.monotonic()
    seen = watch_pods(shop, "spark-role", lambda: _job_done(shop, name), timeout)
    outcome = _job_done(shop, name)
    logs = shop.kubectl("logs", f"job/{name}", "--tail=60", check=False).stdout
    assert outcome and outcome["type"] == "Complete", f"{outcome}\n{logs}"
    return {"pods": seen, "seconds": round(time.monotonic() - started, 1)}


def test_spark_ingest_job_runs_a_driver_and_executors_that_ingest_the_sample(shop: Shop) -> None:
    shop.wait_store_ready(3)
    before = shop.workload("digest", "--topic", "orders")
    job = spark_job_yaml(
        "ingest", "--store", "orders", "-n", shop.namespace, "--topic", "orders",
        "--input", SAMPLE, "--format", "jsonl", "--key-field", "order_id",
        "--tag-field", "event_type", "--time-field", "ts", "--image", SPARK_IMAGE,
        "--executors", "2", "--driver-memory", "512m", "--executor-memory", "768m",
        "--driver-request-cores", "250m", "--executor-request-cores", "250m",
    )  # fmt: skip
    run = _run_job(shop, job)
    TIMINGS["spark ingest job (apply to complete)"] = run["seconds"]
    roles = [p["role"] for p in run["pods"].values()]
    assert roles.count("driver") == 1, run
    assert roles.count("executor") >= 2, run
    executor_nodes = {p["node"] for p in run["pods"].values() if p["role"] == "executor"}
    assert executor_nodes <= set(shop.cluster.worker_names), run
    after = shop.workload("digest", "--topic", "orders")
    assert after["total"] - before["total"] == SAMPLE_MESSAGES, (before, after)
    # Keys and tags came from the sample's fields: an order's events, newest first.
    found = shop.workload("lookups", "--topic", "orders", "--keys", "ord-00000042")
    assert found["by_key"]["ord-00000042"], found


def _states(shop: Shop) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for node, answer in shop.workload("files").items():
        counts: dict[str, int] = {}
        for f in answer["files"]:
            counts[f["state"]] = counts.get(f["state"], 0) + 1
        out[node] = counts
    return out


def test_the_compaction_cronjob_compacts_every_nodes_sealed_files_in_executors(
    shop: Shop,
) -> None:
    states = _states(shop)
    assert all(c.get("sealed", 0) > 0 for c in states.values()), states
    digest = shop.workload("digest", "--topic", "orders")
    lookups = shop.workload(
        "lookups", "--topic", "orders", "--keys", "ord-00000042,ord-00000007,key-3",
        "--offsets", "0:0,1:10,2:100,3:1000",
    )  # fmt: skip
    cronjob = shop.get("cronjob", "orders-compact")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "orders-compact-now", "namespace": shop.namespace},
        "spec": cronjob["spec"]["jobTemplate"]["spec"],
    }
    run = _run_job(shop, job)
    TIMINGS["spark compaction job (apply to complete)"] = run["seconds"]
    roles = [p["role"] for p in run["pods"].values()]
    assert roles.count("executor") >= 2, run
    after = _states(shop)
    assert all(c.get("sealed", 0) == 0 and c.get("compacted", 0) > 0 for c in after.values()), (
        states,
        after,
    )
    assert shop.workload("digest", "--topic", "orders") == digest
    assert (
        shop.workload(
            "lookups",
            "--topic",
            "orders",
            "--keys",
            "ord-00000042,ord-00000007,key-3",
            "--offsets",
            "0:0,1:10,2:100,3:1000",
        )  # fmt: skip
        == lookups
    )
