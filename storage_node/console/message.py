"""``/messages/{msg_id}``: one message (metadata, what its ID encodes, its headers, its
body in three views, its neighbours, the timeline of its key) and
``/messages/{msg_id}/raw``, its body."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from storage_node.console.pages import PageError, client_of, page, render
from storage_node.console.views import (
    VIEWS,
    Message,
    body_view,
    decode_msg_id,
    default_view,
    fmt_ms,
    message_of,
    row,
)
from storage_node.formats.message_id import parse_msg_id

TIMELINE_CAP = 50


async def _message(request: web.Request) -> Message:
    msg_id = request.match_info["msg_id"]
    parse_msg_id(msg_id)  # 400 for a malformed ID, before any node is asked
    return message_of(await client_of(request).get_message(msg_id))


@page
async def message_page(request: web.Request) -> web.StreamResponse:
    m = await _message(request)
    view = request.query.get("view") or default_view(m.value)
    if view not in VIEWS:
        raise PageError(400, f"view must be one of {', '.join(VIEWS)}, got {view!r}")
    timeline: dict[str, Any] | None = None
    if m.key is not None:
        found = await client_of(request).lookup_key(m.topic, m.key, 0, 2**63 - 1, TIMELINE_CAP + 1)
        messages = [message_of(x) for x in found["messages"]]
        timeline = {
            "rows": [row(x) for x in messages[:TIMELINE_CAP]],
            "more": len(messages) > TIMELINE_CAP,
            "unreachable": found.get("unreachable_nodes", []),
            "search": f"/search?{urlencode({'topic': m.topic, 'key': m.key})}",
        }
    around = {"topic": m.topic, "partition": m.partition}
    context = {
        "m": m,
        "stored": fmt_ms(m.store_timestamp),
        "born": fmt_ms(m.timestamp),
        "id_parts": decode_msg_id(m.msg_id),
        "body": body_view(m.value, view),
        "views": VIEWS,
        "base": f"/messages/{quote(m.msg_id, safe='')}",
        "previous": (
            f"/search?{urlencode({**around, 'offset': m.offset - 1, 'limit': 1})}"
            if m.offset > 0
            else None
        ),
        "next": f"/search?{urlencode({**around, 'offset': m.offset + 1, 'limit': 1})}",
        "around": f"/search?{urlencode({**around, 'offset': max(0, m.offset - 10)})}",
        "timeline": timeline,
    }
    return render(request, "message.html", context)


@page
async def raw_body(request: web.Request) -> web.StreamResponse:
    """The whole body, as bytes, to download (never rendered by the browser)."""
    m = await _message(request)
    safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in m.msg_id)
    return web.Response(
        body=m.value,
        content_type="application/octet-stream",
        headers={
            "Content-Disposition": f'attachment; filename="{safe_name}.bin"',
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; sandbox",
            "Cache-Control": "no-store",
        },
    )
