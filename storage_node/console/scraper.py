"""Reads every node's ``/metrics`` every few seconds into the console's History: the
throughput in and out of each node, its disk use, the in and out rates of each topic and
the lag of each consumer group. A node that does not answer just leaves a gap (and
its partitions are missing from that sample's group lag)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from storage_node.client import AsyncClient, RawAnswer
from storage_node.console.history import History
from storage_node.errors import MsgStoreError

log = logging.getLogger(__name__)


Partition = tuple[str, int]


@dataclass
class NodeSamples:
    """One node's answer: its own series, and the partition offsets it reports (group lag
    needs every node's: a group's partitions are served across the cluster)."""

    series: dict[str, float] = field(default_factory=dict)
    first: dict[Partition, float] = field(default_factory=dict)
    next: dict[Partition, float] = field(default_factory=dict)
    committed: dict[tuple[str, str, int], float] = field(default_factory=dict)


def samples_of(node: str, text: str) -> NodeSamples:
    """The series a node's metrics give (see History), summed over labels."""
    out = NodeSamples()
    series: dict[str, float] = defaultdict(float)
    disk: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name, labels, value = s.name, s.labels, float(s.value)
            if name == "msgstore_appended_messages_total":
                series[f"node/{node}/in_messages"] += value
            elif name == "msgstore_appended_bytes_total":
                series[f"node/{node}/in_bytes"] += value
            elif name in ("msgstore_disk_size_bytes", "msgstore_disk_free_bytes"):
                disk[name] = value
            elif name == "msgstore_partition_first_offset":
                out.first[(labels["topic"], int(labels["partition"]))] = value
            elif name == "msgstore_partition_next_offset":
                series[f"topic/{labels['topic']}/in"] += value
                out.next[(labels["topic"], int(labels["partition"]))] = value
            elif name == "msgstore_group_committed_offset":
                series[f"node/{node}/out_messages"] += value
                series[f"topic/{labels['topic']}/out"] += value
                key = (labels["group"], labels["topic"], int(labels["partition"]))
                out.committed[key] = value
    series.setdefault(f"node/{node}/out_messages", 0.0)
    if len(disk) == 2:
        size = disk["msgstore_disk_size_bytes"]
        series[f"node/{node}/disk_used"] = size - disk["msgstore_disk_free_bytes"]
        series[f"node/{node}/disk_size"] = size
    out.series = dict(series)
    return out


def merge(per_node: list[NodeSamples]) -> dict[str, float]:
    """One scrape of the cluster: node series as they are, topic series summed over the
    nodes (each reports the partitions it serves), and each group's lag as ``msgstore
    group describe`` counts it: over every partition of each topic it committed in, the
    next offset less the committed one (or less the first offset, when later)."""
    out: dict[str, float] = defaultdict(float)
    first: dict[Partition, float] = {}
    nxt: dict[Partition, float] = {}
    committed: dict[tuple[str, str, int], float] = {}
    for samples in per_node:
        for name, value in samples.series.items():
            out[name] += value
        first.update(samples.first)
        nxt.update(samples.next)
        committed.update(samples.committed)
    topics_of: dict[str, set[str]] = defaultdict(set)
    for group, topic, _p in committed:
        topics_of[group].add(topic)
    for group, topics in topics_of.items():
        out[f"group/{group}/lag"] = sum(
            end - max(committed.get((group, t, p), 0.0), first.get((t, p), 0.0))
            for (t, p), end in nxt.items()
            if t in topics
        )
    return dict(out)


async def scrape_once(client: AsyncClient, history: History) -> int:
    """One round over every node of the routing table; how many nodes answered."""
    doc = await client.refresh_routing()
    nodes = [n["id"] for n in doc.get("nodes", [])]

    async def one(node: str) -> NodeSamples | None:
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
