"""What every console page shares: the session check, the rendering with the security
headers, and the error page a bad request gets (its status, nothing changed)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import aiohttp_jinja2
from aiohttp import web

from storage_node.console.auth import ConsoleAuth
from storage_node.errors import MsgStoreError
from storage_node.server.app_keys import runtime_of

AUTH = web.AppKey("console_auth", ConsoleAuth)
Page = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Scripts only from this node (there are none yet), nothing framed, forms only to here.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make POSTs say Origin: null
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class PageError(Exception):
    """A request the console cannot answer: shown as the error page with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def auth_of(request: web.Request) -> ConsoleAuth:
    return request.app[AUTH]


def render(
    request: web.Request, template: str, context: dict[str, Any], status: int = 200
) -> web.Response:
    auth = auth_of(request)
    session = auth.session_of(request)
    base = {
        "node_id": runtime_of(request).settings.node_id,
        "logged_in": session is not None,
        "logout_csrf": auth.session_csrf(session) if session else "",
        "path": request.path,
    }
    response = aiohttp_jinja2.render_template(template, request, {**base, **context}, status=status)
    response.headers.update(SECURITY_HEADERS)
    return response


def error_page(request: web.Request, status: int, message: str) -> web.Response:
    return render(request, "error.html", {"status": status, "message": message}, status=status)


def page(handler: Page) -> Page:
    """A console page: a login first when the node has a token, then the handler, whose
    typed errors become the error page with their status."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        auth = auth_of(request)
        if auth.required and auth.session_of(request) is None:
            target = request.path_qs
            raise web.HTTPSeeOther(f"/login?next={quote(target, safe='')}")
        started = time.perf_counter()
        request["console_started"] = started
        try:
            return await handler(request)
        except PageError as exc:
            return error_page(request, exc.status, exc.message)
        except MsgStoreError as exc:
            return error_page(request, exc.status, exc.message)

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


def elapsed_ms(request: web.Request) -> float:
    """How long the page took so far (the search pages say it)."""
    return (time.perf_counter() - request["console_started"]) * 1000
