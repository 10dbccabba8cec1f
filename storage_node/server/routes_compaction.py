"""Remote compaction support beyond the file exchange: seal the active files on request.

A compaction job run from outside (Spark) works on sealed files only; sealing first lets it
cover everything written so far, the same reach as the node's own ``POST /v1/admin/compact``.
Appends continue into the fresh active segment meanwhile.
"""

from __future__ import annotations

from aiohttp import web

from storage_node.server.app_keys import runtime_of
from storage_node.server.params import log_param
from storage_node.wire.message_json import file_info_to_json


async def seal(request: web.Request) -> web.Response:
    rt = runtime_of(request)
    files = await rt.partitions.seal(log_param(request))
    return web.json_response(
        {"node": rt.settings.node_id, "sealed": [file_info_to_json(f) for f in files]}
    )


def register(app: web.Application) -> None:
    app.router.add_post("/v1/admin/seal", seal)
