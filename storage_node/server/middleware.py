"""Request middleware: JSON errors with the right status, authentication and the routes'
permissions, request metrics."""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from storage_node.access.authorizer import ANONYMOUS, Authorizer
from storage_node.errors import DiskFull, MsgStoreError
from storage_node.server.app_keys import PRINCIPAL
from storage_node.server.metrics import NodeMetrics
from storage_node.server.permissions import SUPER_CHANGE, Kind, authorize, permission_of
from storage_node.tls import peer_subject

log = logging.getLogger(__name__)
UNDECLARED = SUPER_CHANGE  # deny by default: a route nobody declared is the super-user's
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
HTTP_CODES = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
}


def error_response(status: int, code: str, message: str, **details: object) -> web.Response:
    body: dict[str, object] = {"code": code, "message": message}
    body.update(details)
    headers = {}
    if status == 503:
        headers["Retry-After"] = "1"
    return web.json_response({"error": body}, status=status, headers=headers)


def _error_from_exception(exc: BaseException) -> web.Response:
    if isinstance(exc, MsgStoreError):
        if exc.status >= 500 and exc.status not in (503, 507):
            log.error("request failed: %s: %s", exc.code, exc.message)
        return web.json_response(
            exc.to_json(),
            status=exc.status,
            headers={"Retry-After": "1"} if exc.status == 503 else {},
        )
    if isinstance(exc, web.HTTPException):
        if exc.status == 413:
            return error_response(
                413, "request_too_large", "the request body exceeds the node's size limit"
            )
        code = HTTP_CODES.get(exc.status, "http_error")
        return error_response(exc.status, code, exc.reason or code)
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        err = DiskFull(f"the data disk cannot take more bytes: {exc.strerror}")
        return web.json_response(err.to_json(), status=err.status)
    log.exception("unexpected error", exc_info=exc)
    return error_response(500, "internal", f"internal error: {type(exc).__name__}")


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes ``{"error": {"code", "message", ...}}`` with its status."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error_from_exception(exc)
    except Exception as exc:  # noqa: BLE001 - the catch-all that turns crashes into 500s
        return _error_from_exception(exc)


def access_middleware(authorizer: Authorizer) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Who is asking, and may they: the bearer token becomes a ``Principal`` kept on the
    request (401 when it proves no one), then the route's declared permission
    (``permissions.PERMISSIONS``) is checked before its handler runs (403, logged and
    counted). A /v1 route without a declared permission is the super-user's alone."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else None
        permission = permission_of(request.method, route) if route is not None else None
        if permission is not None and permission.kind is Kind.PUBLIC:
            return await handler(request)
        if not request.path.startswith("/v1"):
            return await handler(request)  # the console's pages: their own login
        if authorizer.required:
            header = request.headers.get("Authorization", "")
            scheme, _, given = header.partition(" ")
            subject = client_subject(request) if not header else None
            if subject is not None:
                # no token, but a client certificate the TLS handshake verified against the
                # store's CA bundle: a user whose ``tls_subject`` it is (MessageStoreUser tls)
                who = authorizer.authenticate_subject(subject)
                if who is None:
                    return _unauthenticated(f"no user has the certificate subject {subject!r}")
            elif scheme.lower() != "bearer" or not given.strip():
                return _unauthenticated("missing 'Authorization: Bearer <token>' header")
            else:
                who = authorizer.authenticate(given.strip())
                if who is None:
                    return _unauthenticated("the bearer token is not valid")
        else:
            who = ANONYMOUS
        request[PRINCIPAL] = who
        if route is None:
            return await handler(request)  # no such route: 404 or 405
        if permission is None:
            permission = UNDECLARED
        await authorize(request, who, permission, authorizer)
        return await handler(request)

    return middleware


def client_subject(request: web.Request) -> str | None:
    """The RFC 4514 subject of the client certificate this connection's TLS handshake
    verified (the node asks for one only when it has a CA bundle), or None."""
    if request.transport is None:
        return None
    return peer_subject(request.transport.get_extra_info("ssl_object"))


def _unauthenticated(message: str) -> web.Response:
    resp = error_response(401, "unauthenticated", message)
    resp.headers["WWW-Authenticate"] = 'Bearer realm="msgstore"'
    return resp


# The routes that produce or fetch messages (their latency by protocol, with the Kafka
# listener's requests beside them).
OPERATION_OF_ROUTE = {
    ("POST", "/v1/topics/{topic}/messages"): "produce",
    ("GET", "/v1/topics/{topic}/partitions/{partition}/messages"): "fetch",
    ("POST", "/v1/topics/{topic}/fetch"): "fetch",
}


def metrics_middleware(metrics: NodeMetrics) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Count and time requests by route pattern (never by raw path: bounded labels)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        finally:
            info = request.match_info.route.resource
            route = info.canonical if info is not None else "unmatched"
            metrics.requests.labels(request.method, route, str(status)).inc()
            seconds = time.perf_counter() - started
            metrics.latency.labels(request.method, route).observe(seconds)
            operation = OPERATION_OF_ROUTE.get((request.method, route))
            if operation is not None:
                metrics.observe(operation, "http", seconds)

    return middleware
