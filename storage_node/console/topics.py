"""``/topics`` and ``/topics/{topic}``: partitions with owner, the node serving each,
first and next offset, message count, stored bytes, retention, and the topic's in and out
rates over the last hour (from the metrics history)."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from aiohttp import web

from storage_node.console.charts import chart, human
from storage_node.console.history import latest_rate
from storage_node.console.pages import client_of, page, render
from storage_node.console.runtime import runtime_of
from storage_node.wire.routing_table import check_topic_name


@page
async def topics_page(request: web.Request) -> web.StreamResponse:
    topics = await client_of(request).list_topics()
    history = runtime_of(request).history
    for t in topics:
        for way in ("in", "out"):
            rate = latest_rate(history.values(f"topic/{t['name']}/{way}"))
            t[f"rate_{way}"] = "-" if rate is None else f"{human(rate)}/s"
    return render(request, "topics.html", {"topics": topics})


@page
async def topic_page(request: web.Request) -> web.StreamResponse:
    topic = check_topic_name(request.match_info["topic"])
    doc = await client_of(request).describe_topic(topic)
    for info in doc["partition_offsets"]:
        first, nxt = info["first_offset"], info["next_offset"]
        info["count"] = None if first is None or nxt is None else nxt - first
        stored = info.get("stored_bytes")
        info["size"] = None if stored is None else human(stored, "B")
        info["browse"] = "/search?" + urlencode(
            {"topic": doc["name"], "partition": info["partition"], "offset": first or 0}
        )
    history = runtime_of(request).history
    charts = [
        chart(f"{topic}: messages in per second", history.rate(f"topic/{topic}/in")),
        chart(
            f"{topic}: messages out per second (committed by groups)",
            history.rate(f"topic/{topic}/out"),
        ),
    ]
    search = f"/search?{urlencode({'topic': topic, 'from': '0'})}"
    context = {"t": doc, "charts": charts, "search": search, "quoted": quote(topic, safe="")}
    return render(request, "topic.html", context)
