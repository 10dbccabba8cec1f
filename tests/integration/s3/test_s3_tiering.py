"""The uploaded tier on S3: the engine's Store with an s3:// object store on a real MinIO.

Small segments and index files make a few hundred messages span several files, so every
lifecycle path (seal, compact, upload by age, reads through ranged gets, restart, outage)
runs in seconds.
"""

from __future__ import annotations

import os
import threading

import pytest

from storage_node.errors import InvalidArgument, Unavailable
from storage_node.store import MessageIn, Store, StoreConfig, TopicConfig

TOPIC = "orders"
PARTITIONS = 2
HOUR_MS = 3_600_000


@pytest.fixture
def s3_env(minio_server, monkeypatch):
    for key, value in minio_server.env().items():
        monkeypatch.setenv(key, value)
    minio_server.create_bucket("tier")
    return minio_server


def config(data_dir, **overrides) -> StoreConfig:
    base = {
        "data_dir": str(data_dir),
        "segment_bytes": 32 * 1024,
        "index_slots": 64,
        "index_items": 256,
        "queue_file_entries": 128,
        "object_store_url": "s3://tier/node-0",
        "compact_after_s": 0,
        "upload_after_s": 3600,
        "lifecycle_interval_s": 0,  # the tests drive the lifecycle themselves
    }
    base.update(overrides)
    return StoreConfig(**base)


def write(store: Store, start: int, count: int) -> list:
    """`count` messages with keys order-<n> (about 300 bytes each), in batches of 50."""
    results = []
    for first in range(start, start + count, 50):
        batch = [
            MessageIn(value=f"order {n} ".encode() * 30, key=f"order-{n}", tag="created")
            for n in range(first, min(first + 50, start + count))
        ]
        results += store.append(TOPIC, batch)
    return results


def everything(store: Store) -> dict[str, bytes]:
    """Every message of the topic by key, read partition by partition from offset 0."""
    out: dict[str, bytes] = {}
    for partition, (first, end) in enumerate(store.partition_offsets(TOPIC)):
        offset = first
        while offset < end:
            got = store.read(TOPIC, partition, offset, max_messages=500)
            for msg in got.messages:
                assert msg.key not in out, f"{msg.key} read twice"
                out[msg.key] = msg.value
            offset = got.next_offset
    return out


def objects(server) -> list[str]:
    listed = server.s3_client().list_objects_v2(Bucket="tier", Prefix="node-0/")
    return sorted(o["Key"] for o in listed.get("Contents", []))


def states(store: Store) -> dict[str, int]:
    out: dict[str, int] = {}
    for info in store.list_files():
        out[f"{info.kind}:{info.state}"] = out.get(f"{info.kind}:{info.state}", 0) + 1
    return out


def open_with_data(tmp_path, count: int = 600) -> tuple[Store, list]:
    store = Store.open(config(tmp_path / "node"))
    store.create_topic(TopicConfig(name=TOPIC, partitions=PARTITIONS))
    results = write(store, 0, count)
    store.seal_active()
    return store, results


def test_upload_waits_for_the_configured_age_then_moves_files_to_s3(s3_env, tmp_path):
    store, _ = open_with_data(tmp_path)
    try:
        store.run_lifecycle_once()
        assert states(store).get("segment:compacted", 0) >= 2
        assert "segment:uploaded" not in states(store)
        assert objects(s3_env) == []  # younger than upload_after_s: nothing uploaded yet

        report = store.run_lifecycle_once(now_ms=_now_ms() + HOUR_MS + 60_000)
        assert report["uploaded"] >= 3
        after = states(store)
        assert "segment:compacted" not in after and "key_index:compacted" not in after
        assert after["segment:uploaded"] >= 2 and after["key_index:uploaded"] >= 1
        keys = objects(s3_env)
        assert any(k.startswith("node-0/commitlog/") for k in keys)
        assert any(k.startswith("node-0/index/") for k in keys)
        # the local compacted copies are gone: the bytes now live in the bucket only
        compacted = tmp_path / "node" / "commitlog" / "compacted"
        assert not [p for p in compacted.iterdir() if not p.name.endswith(".tmp")]
        assert sorted(os.listdir(tmp_path / "node" / "commitlog" / "uploaded"))
    finally:
        store.close()


def test_reads_and_lookups_are_served_from_uploaded_files(s3_env, tmp_path):
    store, results = open_with_data(tmp_path)
    try:
        store.run_lifecycle_once(now_ms=_now_ms() + HOUR_MS + 60_000)
        assert "segment:uploaded" in states(store)
        data = everything(store)
        assert data == {f"order-{n}": f"order {n} ".encode() * 30 for n in range(600)}
        found = store.lookup_key(TOPIC, "order-123")
        assert [m.value for m in found.messages] == [b"order 123 " * 30]
        assert store.get_message(results[321].msg_id).key == "order-321"

    finally:
        store.close()

    # The bytes of uploaded files exist only in the bucket now; a fresh store (no block
    # cache) still reads them, so they are served through ranged gets.
    node = tmp_path / "node"
    assert not [p for p in (node / "commitlog" / "compacted").iterdir() if p.suffix != ".tmp"]
    store = Store.open(config(node))
    try:
        assert len(store.read(TOPIC, 0, 0, max_messages=5).messages) == 5
        assert store.lookup_key(TOPIC, "order-456").messages[0].value == b"order 456 " * 30
    finally:
        store.close()


def test_restart_with_files_in_uploaded(s3_env, tmp_path):
    store, results = open_with_data(tmp_path)
    store.run_lifecycle_once(now_ms=_now_ms() + HOUR_MS + 60_000)
    before = everything(store)
    uploaded_before = states(store)
    store.close()

    store = Store.open(config(tmp_path / "node"))
    try:
        assert states(store) == uploaded_before
        assert everything(store) == before
        assert store.lookup_key(TOPIC, "order-7").messages[0].value == b"order 7 " * 30
        assert store.get_message(results[599].msg_id).key == "order-599"
        # appends go on after the uploaded files
        ends = [end for _first, end in store.partition_offsets(TOPIC)]
        write(store, 600, 100)
        assert sum(end for _f, end in store.partition_offsets(TOPIC)) == sum(ends) + 100
        assert len(everything(store)) == 700
    finally:
        store.close()


def test_unreachable_store_delays_uploads_without_losing_or_blocking(s3_env, tmp_path):
    store, _ = open_with_data(tmp_path)
    later = _now_ms() + HOUR_MS + 60_000
    try:
        s3_env.stop()
        reports: list[dict] = []
        worker = threading.Thread(target=lambda: reports.append(store.run_lifecycle_once(later)))
        worker.start()
        write(store, 600, 300)  # appends go on while the upload is failing
        worker.join()
        (report,) = reports
        assert report["uploaded"] == 0 and "S3 upload" in report["upload_error"], report
        assert "expired" in report  # the rest of the pass still ran
        assert store.stats()["upload_failures"] >= 1
        assert "segment:uploaded" not in states(store)  # nothing claimed uploaded
        assert len(everything(store)) == 900  # nothing lost, all readable locally

        # a restart while the bucket is still unreachable opens and serves
        store.close()
        store = Store.open(config(tmp_path / "node"))
        assert len(everything(store)) == 900

        s3_env.start()
        store.seal_active()
        report = store.run_lifecycle_once(now_ms=later)
        assert report["uploaded"] >= 3
        assert "segment:compacted" not in states(store)
        data = everything(store)
        assert data == {f"order-{n}": f"order {n} ".encode() * 30 for n in range(900)}
    finally:
        store.close()


def test_bad_object_store_url_is_refused_before_anything_is_written(tmp_path):
    target = tmp_path / "node"
    for url in ("s3://Bad_Bucket/x", "s3://ok-bucket/p?colour=blue", "ftp://host/x"):
        with pytest.raises(InvalidArgument):
            Store.open(config(target, object_store_url=url))
        assert not target.exists()


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


def test_restart_during_an_outage_opens_and_serves_what_is_local(s3_env, tmp_path):
    """Uploaded files open from their manifests; only their message bytes need the bucket."""
    store, _ = open_with_data(tmp_path)
    store.run_lifecycle_once(now_ms=_now_ms() + HOUR_MS + 60_000)
    uploaded = states(store)
    store.close()

    s3_env.stop()
    store = Store.open(config(tmp_path / "node"))
    try:
        assert states(store) == uploaded
        ends = [end for _first, end in store.partition_offsets(TOPIC)]
        write(store, 600, 100)  # new messages land locally and are readable
        for partition, end in enumerate(ends):
            got = store.read(TOPIC, partition, end, max_messages=500)
            assert got.messages and all(int(m.key[6:]) >= 600 for m in got.messages)
        with pytest.raises(Unavailable):  # old bytes live in the unreachable bucket
            store.read(TOPIC, 0, 0, max_messages=5)
        s3_env.start()
        assert len(everything(store)) == 700
    finally:
        store.close()
