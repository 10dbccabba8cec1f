"""``/search``: by key (time range, partition and tag filters), by time range alone, by
message ID, by partition and offset. Capped, newest first for a key or a time range, with
a cursor link to the next (older) page; the page says whether it found nothing or stopped
at its cap, how long it took, and which nodes did not answer. Every read goes through the
user's client (their token), so the nodes decide what they may see."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from storage_node.client import AsyncClient
from storage_node.console import timerange
from storage_node.console.pages import PageError, client_of, elapsed_ms, page, render
from storage_node.console.views import Message, message_of, parse_time, row
from storage_node.errors import InvalidArgument, MsgStoreError, NotFound
from storage_node.formats.limits import MAX_LOOKUP
from storage_node.formats.message_id import parse_msg_id
from storage_node.wire.routing_table import check_topic_name

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_TIME = 2**63 - 1
FIELDS = ("topic", "key", "msg_id", "partition", "offset", "tag", "from", "until", "before")


def int_field(form: dict[str, str], name: str, default: int | None, low: int, high: int) -> Any:
    raw = form.get(name, "").strip()
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(f"{name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise InvalidArgument(f"{name} must be between {low} and {high}, got {value}")
    return value


async def partition_count(client: AsyncClient, topic: str) -> int:
    """The topic's partitions as the routing table says (404 for an unknown topic)."""
    count = client.routing.partitions(topic)
    if count is None:
        await client.refresh_routing()
        count = client.routing.partitions(topic)
    if count is None:
        raise NotFound(f"unknown topic {topic!r}")
    return count


@page
async def search(request: web.Request) -> web.StreamResponse:
    """The search form, and the answer to what it asks."""
    q = request.query
    form = {k: q.get(k, "") for k in FIELDS}
    limit = int_field(dict(q), "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    form["limit"] = str(limit)
    context: dict[str, Any] = {"form": form, "result": None}
    if form["msg_id"].strip():
        msg_id = form["msg_id"].strip()
        parse_msg_id(msg_id)  # a malformed ID is a 400 before any node is asked
        raise web.HTTPSeeOther(f"/messages/{quote(msg_id, safe='')}")
    client = client_of(request)
    if form["topic"] and form["key"]:
        context["result"] = await _by_key(client, form, limit)
    elif form["topic"] and form["offset"]:
        context["result"] = await _by_offset(client, form, limit)
    elif form["topic"] and (form["from"] or form["until"]):
        context["result"] = await _by_time(client, form, limit)
    elif any(form[k] for k in ("topic", "key", "offset", "partition")):
        raise PageError(
            400,
            "search needs a topic with a key (topic=T&key=K), a topic and a time range "
            "(topic=T&from=...&until=...), a topic, partition and offset "
            "(topic=T&partition=P&offset=O), or a message ID (msg_id=ID)",
        )
    if context["result"] is not None:
        context["result"]["took_ms"] = f"{elapsed_ms(request):.1f}"
    return render(request, "search.html", context)


def _window(form: dict[str, str]) -> tuple[int, int]:
    begin = parse_time("from", form["from"]) or 0
    end = parse_time("until", form["until"])
    end = MAX_TIME if end is None else end
    if begin > end:
        raise PageError(400, f"'from' ({form['from']}) is after 'until' ({form['until']})")
    return begin, end


def _link(form: dict[str, str], **changes: Any) -> str:
    kept = {k: v for k, v in form.items() if v and k not in ("msg_id",)}
    kept.update({k: str(v) for k, v in changes.items()})
    return f"/search?{urlencode(kept)}"


async def _by_key(client: AsyncClient, form: dict[str, str], limit: int) -> dict[str, Any]:
    """Newest first from ``before`` (the cursor: ``STORE_MS:SKIP``, the older end of the
    page before and how many of its messages at that millisecond were shown already)."""
    topic = check_topic_name(form["topic"])
    count = await partition_count(client, topic)
    partition = int_field(form, "partition", None, 0, count - 1)
    begin, end = _window(form)
    skip = 0
    if form["before"]:
        at, _, seen = form["before"].partition(":")
        if not (at.isdigit() and seen.isdigit()):
            raise InvalidArgument(f"before must be STORE_MS:SKIP, got {form['before']!r}")
        end, skip = min(end, int(at)), int(seen)
    tag = form["tag"] or None
    filtered = partition is not None or tag is not None
    # one more than shown tells "more exist" from "exactly the cap"; filters apply to
    # what the key index answered, so they ask for as much as a lookup gives
    ask = MAX_LOOKUP if filtered else min(MAX_LOOKUP, limit + 1 + skip)
    doc = await client.lookup_key(topic, form["key"], begin, end, ask)
    found = [message_of(m) for m in doc["messages"]][skip:]
    messages = [
        m
        for m in found
        if (partition is None or m.partition == partition) and (tag is None or m.tag == tag)
    ]
    more = len(messages) > limit
    shown = messages[:limit]
    return {
        "kind": "key",
        "rows": [row(m) for m in shown],
        "more": more,
        "more_unsure": filtered and doc["limit_reached"] and not more,
        "unreachable": doc.get("unreachable_nodes", []),
        "order": "newest first",
        "older": _link(form, before=_cursor(found, shown, end, skip)) if more else None,
    }


def _cursor(found: list[Message], shown: list[Message], end: int, skipped: int) -> str:
    """Where the next page of a key search starts: the oldest shown store time, and how
    many answers at that time came before it (shown now, filtered, or on pages before)."""
    last = shown[-1]
    at = last.store_timestamp
    upto = found.index(last) + 1
    seen = sum(1 for m in found[:upto] if m.store_timestamp == at)
    return f"{at}:{seen + (skipped if at == end else 0)}"


async def _by_time(client: AsyncClient, form: dict[str, str], limit: int) -> dict[str, Any]:
    topic = check_topic_name(form["topic"])
    count = await partition_count(client, topic)
    if form["tag"]:
        raise PageError(400, "a tag filter needs a key (topic=T&key=K&tag=G)")
    partition = int_field(form, "partition", None, 0, count - 1)
    begin, end = _window(form)
    parts = [partition] if partition is not None else list(range(count))
    cursor = timerange.parse_cursor(form["before"], parts)
    found = await timerange.newest_first(client, topic, parts, begin, end, limit, cursor)
    return {
        "kind": "time",
        "rows": [row(m) for m in found.messages],
        "more": found.cursor is not None,
        "more_unsure": False,
        "unreachable": found.unreachable,
        "order": "newest first by store time",
        "older": _link(form, before=found.cursor) if found.cursor else None,
    }


async def _by_offset(client: AsyncClient, form: dict[str, str], limit: int) -> dict[str, Any]:
    topic = check_topic_name(form["topic"])
    count = await partition_count(client, topic)
    if not form["partition"]:
        raise PageError(400, "a search by offset needs a partition (partition=P)")
    partition = int_field(form, "partition", 0, 0, count - 1)
    offset = int_field(form, "offset", 0, 0, MAX_TIME)
    unreachable: list[str] = []
    try:
        doc = await client.read(topic, partition, offset, max_messages=limit + 1)
        messages = [message_of(m) for m in doc["messages"]]
    except MsgStoreError as exc:
        if exc.status != 503:
            raise
        owner = client.routing.owner(topic, partition)
        unreachable, messages = [owner[0] if owner else f"partition {partition}"], []
    base = {"topic": topic, "partition": partition, "limit": limit}
    older = max(0, offset - limit)
    return {
        "kind": "offset",
        "rows": [row(m) for m in messages[:limit]],
        "more": len(messages) > limit,
        "more_unsure": False,
        "unreachable": unreachable,
        "order": f"partition {partition} from offset {offset}, oldest first",
        "older": None,
        "previous": f"/search?{urlencode({**base, 'offset': older})}" if offset > 0 else None,
        "next": (
            f"/search?{urlencode({**base, 'offset': messages[limit].offset})}"
            if len(messages) > limit
            else None
        ),
    }
