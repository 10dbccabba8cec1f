"""``/groups`` and ``/groups/{group}``: lag per partition as ``msgstore group describe``
computes it (sortable, "lagging only"), the group's lag over the last hour, and (admin
mode only) ``POST /groups/{group}/reset``, which moves the group's offsets with the
session's token: the cluster refuses it (403) to a token that may not."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from storage_node.client import AsyncClient
from storage_node.console.charts import chart
from storage_node.console.pages import PageError, client_of, page, render, session_of
from storage_node.console.runtime import runtime_of
from storage_node.console.sessions import same_origin
from storage_node.console.views import parse_time
from storage_node.errors import InvalidArgument, InvalidName, NotFound
from storage_node.formats.names import is_valid_name

SORTS = ("topic", "partition", "committed", "next_offset", "lag")
TARGETS = ("earliest", "latest", "offset", "time")


async def lag_rows(client: AsyncClient, group: str) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per partition of each topic the group committed in (``group describe``):
    the lag is the next offset less the committed one, or less the first when later."""
    path = f"/v1/consumer-groups/{quote(group, safe='')}/offsets"
    doc = await client.get(path)
    unreachable = list(doc.get("unreachable_nodes", []))
    rows: list[dict[str, Any]] = []
    for topic in sorted(doc["offsets"]):
        committed = doc["offsets"][topic]
        info = await client.describe_topic(topic)
        unreachable += [n for n in info.get("unreachable_nodes", []) if n not in unreachable]
        for part in info["partition_offsets"]:
            offset = committed.get(str(part["partition"]))
            first, nxt = part["first_offset"], part["next_offset"]
            lag = None
            if nxt is not None:
                lag = nxt - max(offset if offset is not None else 0, first or 0)
            rows.append(
                {
                    "topic": topic,
                    "partition": part["partition"],
                    "owner": part["owner"],
                    "committed": offset,
                    "first_offset": first,
                    "next_offset": nxt,
                    "lag": lag,
                }
            )
    return rows, unreachable


@page
async def groups_page(request: web.Request) -> web.StreamResponse:
    doc = await client_of(request).get("/v1/consumer-groups")
    context = {"groups": doc["groups"], "unreachable": doc.get("unreachable_nodes", [])}
    return render(request, "groups.html", context)


def _group(request: web.Request) -> str:
    group = request.match_info["group"]
    if not is_valid_name(group):
        raise InvalidName(f"invalid consumer group name {group!r}")
    return group


@page
async def group_page(request: web.Request) -> web.StreamResponse:
    group = _group(request)
    sort = request.query.get("sort", "lag")
    order = request.query.get("order", "desc" if sort == "lag" else "asc")
    lagging = request.query.get("lagging", "") in ("1", "on", "true")
    if sort not in SORTS or order not in ("asc", "desc"):
        raise PageError(400, f"sort must be one of {', '.join(SORTS)} and order asc or desc")
    rows, unreachable = await lag_rows(client_of(request), group)
    if not rows and not unreachable:
        raise NotFound(f"consumer group {group!r} has no committed offsets")
    total = sum(r["lag"] or 0 for r in rows)
    shown = [r for r in rows if not lagging or (r["lag"] or 0) > 0]
    missing = 2**63 if order == "asc" else -(2**63)  # unknown values sort last

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        value = r[sort]
        return (value if value is not None else missing, r["topic"], r["partition"])

    shown.sort(key=key, reverse=order == "desc")
    flip = {"asc": "desc", "desc": "asc"}
    links = {
        s: "?"
        + urlencode(
            {
                "sort": s,
                "order": flip[order] if s == sort else "desc",
                **({"lagging": "1"} if lagging else {}),
            }
        )
        for s in SORTS
    }
    history = runtime_of(request).history
    context = {
        "group": group,
        "rows": shown,
        "total": total,
        "count": len(rows),
        "sort": sort,
        "order": order,
        "lagging": lagging,
        "links": links,
        "unreachable": unreachable,
        "chart": chart(
            f"lag of {group} (messages), last hour", history.values(f"group/{group}/lag")
        ),
        "topics": sorted({r["topic"] for r in rows}),
        "targets": TARGETS,
        "done": request.query.get("reset") == "done",
    }
    return render(request, "group.html", context)


@page
async def reset(request: web.Request) -> web.StreamResponse:
    """Move the group's offsets of a topic (one partition, or all) to the earliest or
    latest offset, a given offset, or the first offset stored at a time; committed with
    the session's token, so only a token the cluster lets write does it."""
    group = _group(request)
    form = await request.post()
    session = session_of(request)
    if not same_origin(request) or str(form.get("csrf", "")) != session.csrf:
        raise PageError(403, "refused: not a form of this console (CSRF)")
    if not runtime_of(request).settings.admin:
        raise PageError(403, "offset resets need a console started with --admin")
    client = client_of(request)
    topic = str(form.get("topic", ""))
    target = str(form.get("to", ""))
    if target not in TARGETS:
        raise InvalidArgument(f"to must be one of {', '.join(TARGETS)}, got {target!r}")
    info = await client.describe_topic(topic)
    spans = {p["partition"]: p for p in info["partition_offsets"]}
    raw = str(form.get("partition", "")).strip()
    if raw and not (raw.isdigit() and int(raw) in spans):
        raise InvalidArgument(f"topic {topic!r} has no partition {raw!r}")
    partitions = [int(raw)] if raw else sorted(spans)
    if target == "offset" and not raw:
        raise InvalidArgument("a reset to an offset needs one partition")
    when = parse_time("time", str(form.get("time", ""))) if target == "time" else None
    if target == "time" and when is None:
        raise InvalidArgument("a reset to a time needs the time")
    plan = []
    for p in partitions:
        first, nxt = spans[p]["first_offset"], spans[p]["next_offset"]
        if first is None or nxt is None:
            raise InvalidArgument(f"partition {p} is unreachable; nothing was changed")
        if target == "earliest":
            to = first
        elif target == "latest":
            to = nxt
        elif target == "offset":
            text = str(form.get("offset", "")).strip()
            if not text.isdigit():
                raise InvalidArgument(f"offset must be an integer, got {text!r}")
            to = int(text)
        else:
            assert when is not None
            page_ = await client.read(topic, p, max_messages=1, start_time=when)
            to = page_["messages"][0]["offset"] if page_["messages"] else page_["next_offset"]
        plan.append((p, min(max(to, first), nxt)))
    for p, to in plan:
        await client.commit_offset(group, topic, p, to)
    raise web.HTTPSeeOther(f"/groups/{quote(group, safe='')}?reset=done")
