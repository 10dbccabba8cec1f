"""mTLS between nodes: the routes only the store's own processes call need, besides the
token, a client certificate of a node or the failover controller (storage_node/mtls.py).

Which routes: the log-shipping fetch and epoch-end (followers), the fence and the routing
hand-over (the controller). Every other route serves clients with tokens as before; a client
that presents a certificate of another CA fails in the TLS handshake on every route.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from storage_node.server.app_keys import runtime_of
from storage_node.server.middleware import Handler, error_response

log = logging.getLogger("msgstore.access")
PEER_ONLY_ROUTES = frozenset(
    {
        ("GET", "/v1/replication/logs/{log}/fetch"),
        ("GET", "/v1/replication/logs/{log}/epoch-end"),
        ("POST", "/v1/replication/logs/{log}/fence"),
        ("PUT", "/v1/replication/routing"),
    }
)


def peer_auth_middleware() -> Callable[..., Awaitable[web.StreamResponse]]:
    """403 on a peer-only route without a peer's certificate; the connection is closed, so a
    peer whose certificate was just renewed comes back with the new one."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        info = request.match_info.route.resource
        route = (request.method, info.canonical if info is not None else "")
        rt = runtime_of(request)
        if route not in PEER_ONLY_ROUTES or not rt.settings.mtls:
            return await handler(request)
        server_tls = rt.server_tls
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if server_tls is None:
            why: str | None = "the node serves no TLS"
        else:
            why = rt.peer_check.refusal(der, server_tls.trusted, server_tls.trust_reloads)
        if why is None:
            return await handler(request)
        log.warning(
            "refused %s %s from %s: only the store's nodes may call it (%s)",
            request.method,
            request.path,
            request.remote,
            why,
        )
        resp = error_response(
            403,
            "forbidden",
            f"{request.method} {route[1]} is for the store's nodes: {why}",
        )
        resp.force_close()
        return resp

    return middleware
