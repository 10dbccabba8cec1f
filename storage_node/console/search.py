"""``/search``: by key (time range, partition and tag filters), by message ID, by
partition and offset. Capped, newest first for a key; the page says whether it found
nothing or stopped at its cap, how long it took, and which nodes did not answer."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from storage_node.console.pages import PageError, elapsed_ms, page, render
from storage_node.console.views import parse_time, row
from storage_node.errors import MsgStoreError, NotFound
from storage_node.formats.limits import MAX_LOOKUP
from storage_node.formats.message_id import parse_msg_id
from storage_node.server import lookups
from storage_node.server.app_keys import runtime_of
from storage_node.server.lookups import message_from_json
from storage_node.server.params import int_value
from storage_node.server.routes_topics import get_topic_config
from storage_node.server.runtime import NodeRuntime
from storage_node.store import Message
from storage_node.wire.routing_table import check_topic_name

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_TIME = 2**63 - 1


def _int(query: Any, name: str, default: int | None, low: int, high: int) -> int | None:
    raw = query.get(name, "")
    return default if raw.strip() == "" else int_value(name, raw, low, high)


@page
async def search(request: web.Request) -> web.StreamResponse:
    """The search form, and the answer to what it asks."""
    q = request.query
    form = {k: q.get(k, "") for k in ("topic", "key", "msg_id", "partition", "offset", "tag")}
    form.update({"from": q.get("from", ""), "until": q.get("until", "")})
    limit = _int(q, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT) or DEFAULT_LIMIT
    form["limit"] = str(limit)
    context: dict[str, Any] = {"form": form, "result": None}
    if form["msg_id"].strip():
        msg_id = form["msg_id"].strip()
        parse_msg_id(msg_id)  # a malformed ID is a 400 before any node is asked
        raise web.HTTPSeeOther(f"/messages/{quote(msg_id, safe='')}")
    if form["topic"] and form["key"]:
        context["result"] = await _by_key(request, form, limit)
    elif form["topic"] and form["offset"]:
        context["result"] = await _by_offset(request, form, limit)
    elif any(form[k] for k in ("topic", "key", "offset", "partition")):
        raise PageError(
            400,
            "search needs a topic with a key (topic=T&key=K), a topic, partition and offset "
            "(topic=T&partition=P&offset=O), or a message ID (msg_id=ID)",
        )
    if context["result"] is not None:
        context["result"]["took_ms"] = f"{elapsed_ms(request):.1f}"
    return render(request, "search.html", context)


async def _by_key(request: web.Request, form: dict[str, str], limit: int) -> dict[str, Any]:
    rt = runtime_of(request)
    topic = check_topic_name(form["topic"])
    cfg = await get_topic_config(rt, topic)
    partition = _int(form, "partition", None, 0, cfg.partitions - 1)
    begin = parse_time("from", form["from"]) or 0
    end = parse_time("until", form["until"])
    end = MAX_TIME if end is None else end
    if begin > end:
        raise PageError(400, f"'from' ({form['from']}) is after 'until' ({form['until']})")
    tag = form["tag"] or None
    filtered = partition is not None or tag is not None
    # one more than shown tells "more exist" from "exactly the cap"; filters apply to
    # what the key index answered, so they ask for as much as a lookup gives
    ask = MAX_LOOKUP if filtered else limit + 1
    found = await lookups.lookup_key(rt, topic, form["key"], begin, end, ask, "cluster")
    messages = [
        m
        for m in found.messages
        if (partition is None or m.partition == partition) and (tag is None or m.tag == tag)
    ]
    more = len(messages) > limit
    return {
        "kind": "key",
        "rows": [row(m) for m in messages[:limit]],
        "more": more,
        "more_unsure": filtered and found.limit_reached and not more,
        "unreachable": found.unreachable,
        "order": "newest first",
        "timeline": f"/search?{urlencode({'topic': topic, 'key': form['key']})}",
    }


async def _by_offset(request: web.Request, form: dict[str, str], limit: int) -> dict[str, Any]:
    rt = runtime_of(request)
    topic = check_topic_name(form["topic"])
    cfg = await get_topic_config(rt, topic)
    if not form["partition"]:
        raise PageError(400, "a search by offset needs a partition (partition=P)")
    partition = _int(form, "partition", 0, 0, cfg.partitions - 1) or 0
    offset = _int(form, "offset", 0, 0, MAX_TIME) or 0
    messages, unreachable = await read_page(rt, topic, partition, offset, limit + 1)
    base = {"topic": topic, "partition": partition, "limit": limit}
    older = max(0, offset - limit)
    return {
        "kind": "offset",
        "rows": [row(m) for m in messages[:limit]],
        "more": len(messages) > limit,
        "more_unsure": False,
        "unreachable": unreachable,
        "order": f"partition {partition} from offset {offset}, oldest first",
        "previous": f"/search?{urlencode({**base, 'offset': older})}" if offset > 0 else None,
        "next": (
            f"/search?{urlencode({**base, 'offset': messages[limit].offset})}"
            if len(messages) > limit
            else None
        ),
    }


async def read_page(
    rt: NodeRuntime, topic: str, partition: int, offset: int, count: int
) -> tuple[list[Message], list[str]]:
    """Up to ``count`` messages of a partition from ``offset``, read by the node serving
    it through its read route (this node's own included: one path to the partition's
    store); ([], [node]) when that node does not answer."""
    table = rt.routing.current()
    owner = table.owner(topic, partition) or rt.settings.node_id
    serving = table.leader_of(owner)
    address = table.node_address(serving) or rt.settings.address
    path = f"/v1/topics/{quote(topic, safe='')}/partitions/{partition}/messages"
    params = {"offset": str(offset), "max_messages": str(count)}
    try:
        doc = await rt.peer_get(address, path, params)
    except MsgStoreError:
        return [], [serving]
    if doc is None:
        raise NotFound(f"topic {topic!r} has no partition {partition} on node {serving}")
    return [message_from_json(m) for m in doc["messages"]], []
