"""A `msgstore serve` process with the S3 tier, configured by environment variables exactly as
the operator configures a pod (MSGSTORE_OBJECT_STORE_URL, MSGSTORE_UPLOAD_AFTER_S, AWS_* from
the credentials Secret): its background worker uploads, and a restarted node serves reads and
key lookups from the uploaded files."""

from __future__ import annotations

import time

from storage_node.client.sync_client import Client
from tests.integration.node.conftest import NodeProcess

TOPIC = "events"


def node_env(server) -> dict[str, str]:
    return {
        **server.env(),
        "MSGSTORE_OBJECT_STORE_URL": "s3://tier/node-0",
        "MSGSTORE_SEGMENT_BYTES": str(32 * 1024),
        "MSGSTORE_INDEX_SLOTS": "64",
        "MSGSTORE_INDEX_ITEMS": "256",
        "MSGSTORE_COMPACT_AFTER_S": "0",
        "MSGSTORE_UPLOAD_AFTER_S": "0",
        "MSGSTORE_LIFECYCLE_INTERVAL_S": "0.5",
    }


def uploaded_files(client: Client) -> list[dict]:
    files = next(iter(client.files().values()))
    return [f for f in files["files"] if f["state"] == "uploaded"]


def test_node_uploads_in_the_background_and_serves_uploaded_files_after_restart(
    minio_server, tmp_path
):
    minio_server.create_bucket("tier")
    node = NodeProcess(tmp_path / "node", env=node_env(minio_server)).start()
    try:
        with Client(node.address) as client:
            client.create_topic(TOPIC, partitions=2)
            sent = client.produce(
                TOPIC,
                [{"key": f"k-{n}", "value": f"event {n} " * 20} for n in range(800)],
            )
            deadline = time.monotonic() + 120
            while not uploaded_files(client):
                assert time.monotonic() < deadline, "the node never uploaded a file"
                assert node.proc is not None and node.proc.poll() is None, node.log.read_text()
                time.sleep(0.5)
    finally:
        assert node.stop() == 0
    listed = minio_server.s3_client().list_objects_v2(Bucket="tier", Prefix="node-0/")
    assert listed.get("KeyCount", 0) >= 1

    node.env["MSGSTORE_LIFECYCLE_INTERVAL_S"] = "0"
    node.start()
    try:
        with Client(node.address) as client:
            assert uploaded_files(client)
            values = {}
            for partition in range(2):
                for msg in client.read_all(TOPIC, partition, 0):
                    assert msg["key"] not in values, f"{msg['key']} read twice"
                    values[msg["key"]] = msg
            assert len(values) == 800
            assert all(values[f"k-{n}"]["value"] == f"event {n} " * 20 for n in range(800))
            found = client.lookup_key(TOPIC, "k-17")
            assert [m["key"] for m in found["messages"]] == ["k-17"]
            assert client.get_message(sent[5]["msg_id"])["key"] == "k-5"
    finally:
        node.stop()
