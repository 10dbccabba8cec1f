"""Reads every node's ``/metrics`` every few seconds into the console's History: the
throughput in and out of each node, its disk use, the in and out rates of each topic and
the lag of each consumer group. A node that does not answer just leaves a gap."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from storage_node.client import AsyncClient, RawAnswer
from storage_node.console.history import History
from storage_node.errors import MsgStoreError

log = logging.getLogger(__name__)


def samples_of(node: str, text: str) -> dict[str, float]:
    """The series a node's metrics give (see History), summed over labels."""
    out: dict[str, float] = defaultdict(float)
    disk: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name, labels, value = s.name, s.labels, float(s.value)
            if name == "msgstore_appended_messages_total":
                out[f"node/{node}/in_messages"] += value
            elif name == "msgstore_appended_bytes_total":
                out[f"node/{node}/in_bytes"] += value
            elif name in ("msgstore_disk_size_bytes", "msgstore_disk_free_bytes"):
                disk[name] = value
            elif name == "msgstore_partition_next_offset":
                out[f"topic/{labels['topic']}/in"] += value
            elif name == "msgstore_group_committed_offset":
                out[f"node/{node}/out_messages"] += value
                out[f"topic/{labels['topic']}/out"] += value
            elif name == "msgstore_group_lag_messages":
                out[f"group/{labels['group']}/lag"] += value
    out.setdefault(f"node/{node}/out_messages", 0.0)
    if len(disk) == 2:
        out[f"node/{node}/disk_used"] = (
            disk["msgstore_disk_size_bytes"] - disk["msgstore_disk_free_bytes"]
        )
        out[f"node/{node}/disk_size"] = disk["msgstore_disk_size_bytes"]
    return dict(out)


def merge(per_node: list[dict[str, float]]) -> dict[str, float]:
    """One scrape of the cluster: node series as they are, topic and group series summed
    over the nodes (each node reports the partitions it serves)."""
    out: dict[str, float] = defaultdict(float)
    for samples in per_node:
        for name, value in samples.items():
            out[name] += value
    return dict(out)


async def scrape_once(client: AsyncClient, history: History) -> int:
    """One round over every node of the routing table; how many nodes answered."""
    doc = await client.refresh_routing()
    nodes = [n["id"] for n in doc.get("nodes", [])]

    async def one(node: str) -> dict[str, float] | None:
        address = client.routing.address_of(node)
        if address is None:
            return None
        try:
            answer: RawAnswer = await client.request("GET", address, "/metrics", raw=True)
        except MsgStoreError:
            return None
        return samples_of(node, answer.content.decode("utf-8", errors="replace"))

    found = [s for s in await asyncio.gather(*(one(n) for n in nodes)) if s is not None]
    history.add(time.time(), merge(found))
    return len(found)


async def scrape_forever(client: AsyncClient, history: History, every: float) -> None:
    while True:
        try:
            await scrape_once(client, history)
        except MsgStoreError as exc:
            log.warning("metrics not read: %s", exc.message)
        except Exception:  # noqa: BLE001 - a bad scrape must not end the loop
            log.exception("metrics not read")
        await asyncio.sleep(every)
