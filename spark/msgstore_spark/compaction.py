"""Remote compaction: executors fetch a node's sealed file, rewrite it with the engine's own
format code, and hand it back with its CRC-32; the node verifies and commits it atomically.

The driver only plans (which files on which node); the bytes never pass through it.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote

from msgstore_spark.cluster import connect
from msgstore_spark.errors import explained
from msgstore_spark.options import ConnectionOptions
from storage_node.errors import CorruptData, MsgStoreError
from storage_node.formats.compressed import compact_segment_bytes, verify_compacted_segment
from storage_node.formats.key_index_compacted import (
    compact_key_index_bytes,
    verify_compacted_key_index,
)

CRC_HEADER = "X-Msgstore-Crc32"


@dataclass(frozen=True)
class CompactionTask:
    node_id: str
    address: str
    kind: str  # "segment" | "key_index"
    name: str
    size: int
    compress: bool


def plan(conn: ConnectionOptions, seal: bool) -> list[CompactionTask]:
    """Every node's sealed, not yet compacted files (sealing the active ones first if asked)."""
    client = connect(conn)
    try:
        with explained(conn.endpoints):
            topics = client.list_topics()
            # the node's own rule: segments hold every topic, LZ4 unless all opted out
            compress = not topics or any(t.get("compression", "lz4") == "lz4" for t in topics)
            if seal:
                client.each_node("POST", "/v1/admin/seal")
            answers = client.each_node("GET", "/v1/admin/sealed")
        assert client.routing.table is not None
        addresses = {n.id: n.address for n in client.routing.table.nodes}
        return [
            CompactionTask(node_id, addresses[node_id], f["kind"], f["name"], f["size"], compress)
            for node_id, doc in sorted(answers.items())
            for f in doc["files"]
        ]
    finally:
        client.close()


def rewrite(kind: str, raw: bytes, compress: bool) -> bytes:
    """The engine's compaction of one file, checked before it leaves the executor."""
    if kind == "segment":
        out = compact_segment_bytes(raw, compress)
        verify_compacted_segment(raw, out)
    else:
        out = compact_key_index_bytes(raw)
        verify_compacted_key_index(raw, out)
    return out


def run_task(conn: ConnectionOptions, task: CompactionTask) -> dict[str, Any]:
    """Executor side: fetch, rewrite, send back. A file compacted meanwhile is skipped."""
    started = time.perf_counter()
    client = connect(conn)
    path = f"/v1/admin/files/{quote(task.kind, safe='')}/{quote(task.name, safe='')}"
    report: dict[str, Any] = {**asdict(task), "status": "compacted"}
    try:
        with explained(conn.endpoints):
            try:
                resp = client.request("GET", task.address, path, raw=True)
            except MsgStoreError as err:
                if err.status in (404, 409):
                    report.update(status="skipped", reason=err.message)
                    return report
                raise
            raw = resp.content
            expected = resp.headers.get(CRC_HEADER)
            if expected is not None and zlib.crc32(raw) != int(expected):
                raise CorruptData(f"{task.kind} {task.name} from {task.node_id} arrived damaged")
            compacted = rewrite(task.kind, raw, task.compress)
            try:
                info = client.request(
                    "PUT",
                    task.address,
                    f"{path}/compacted",
                    data=compacted,
                    content_type="application/octet-stream",
                    headers={CRC_HEADER: str(zlib.crc32(compacted))},
                )
            except MsgStoreError as err:
                if err.status in (404, 409):
                    report.update(status="skipped", reason=err.message)
                    return report
                raise
        report.update(
            bytes_before=len(raw),
            bytes_after=len(compacted),
            state=info.get("state"),
            seconds=round(time.perf_counter() - started, 3),
        )
        return report
    finally:
        client.close()
