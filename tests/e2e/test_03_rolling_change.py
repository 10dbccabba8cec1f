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


def _roll_under(shop: Shop, start: int) -> None:
    """With the load running: the config patched, every node pod replaced, and writes
    stored both before the roll and after it."""
    shop.wait_stored("orders", start + 200, "the load stored before the config change")
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in shop.node_pods()}
    shop.kubectl("patch", "messagestore", "orders", "--type=merge", "-p", json.dumps(NEW_CONFIG))

    def rolled() -> bool:
        pods = shop.node_pods()
        return len(pods) == 3 and all(
            p["metadata"]["uid"] != before.get(p["metadata"]["name"]) for p in pods
        )

    shop.cluster.wait_until(rolled, "every node pod replaced by the rolling update", 420, 2)
    shop.wait_store_ready(3)
    shop.wait_stored("orders", shop.stored("orders") + 500, "writes stored after the roll")


def test_a_rolling_config_change_keeps_serving_and_loses_nothing(shop: Shop) -> None:
    shop.wait_store_ready(3)
    start = shop.stored("orders")
    # The load runs until the new pods have carried writes, however long the roll takes (a
    # fixed 75 s load on a loaded machine ended with the roll, having stored only 60 batches).
    with shop.load_until_stopped("roll", seconds=900) as load:
        _roll_under(shop, start)
    produced = shop.finish(load)
    # The producer never gave up: each node's restart was ridden out by its retries.
    assert not produced["unknown"], produced["errors"]
    counts = shop.check_acked(produced, "roll:")
    assert counts["acked"] > 500, counts
    # The new pods run with the new settings.
    for pod in ("orders-0", "orders-1", "orders-2"):
        env = shop.kubectl("exec", pod, "--", "printenv", "MSGSTORE_SEGMENT_BYTES").stdout
        assert env.strip() == "1048576", (pod, env)
