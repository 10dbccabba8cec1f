"""A rolling configuration change under load: every pod replaced, nothing acknowledged lost."""

from __future__ import annotations

import json

from e2e_support import Shop

# Small segments and key-index files, so the Spark ingest that follows seals files for the
# compaction CronJob to work on (the sample's defaults seal at 1 GiB).
NEW_CONFIG = {
    "spec": {
        "segmentBytes": 1048576,
        "index": {"slots": 4096, "items": 16384},
        "flush": {"mode": "sync", "maxAgeMs": 100},
    }
}


def test_a_rolling_config_change_keeps_serving_and_loses_nothing(shop: Shop) -> None:
    shop.wait_store_ready(3)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in shop.node_pods()}
    load = shop.start_workload(
        "produce", "--topic", "orders", "--run", "roll", "--seconds", "75", "--batch", "20",
        "--pause-ms", "20",
    )  # fmt: skip
    shop.kubectl("patch", "messagestore", "orders", "--type=merge", "-p", json.dumps(NEW_CONFIG))

    def rolled() -> bool:
        pods = shop.node_pods()
        return len(pods) == 3 and all(
            p["metadata"]["uid"] != before.get(p["metadata"]["name"]) for p in pods
        )

    shop.cluster.wait_until(rolled, "every node pod replaced by the rolling update", 420, 2)
    shop.wait_store_ready(3)
    produced = shop.finish(load)
    # The producer never gave up: each node's restart was ridden out by its retries.
    assert not produced["unknown"], produced["errors"]
    counts = shop.check_acked(produced, "roll:")
    assert counts["acked"] > 500, counts
    # The new pods run with the new settings.
    for pod in ("orders-0", "orders-1", "orders-2"):
        env = shop.kubectl("exec", pod, "--", "printenv", "MSGSTORE_SEGMENT_BYTES").stdout
        assert env.strip() == "1048576", (pod, env)
