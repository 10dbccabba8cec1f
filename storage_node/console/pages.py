"""What every console page shares: the session (a login first, unless the cluster needs
no token), the user's client of the cluster, the rendering with the security headers, and
the error page a bad request gets (its status; nothing changed)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import aiohttp_jinja2
from aiohttp import web

from storage_node.client import AsyncClient
from storage_node.console.runtime import runtime_of
from storage_node.console.sessions import SESSION_COOKIE, SESSION_SECONDS, Session, set_cookie
from storage_node.errors import MsgStoreError

Page = Callable[[web.Request], Awaitable[web.StreamResponse]]
SESSION = web.RequestKey("console_session", Session)
STARTED = web.RequestKey("console_started", float)

# Scripts only from the console (there are none), nothing framed, forms only to here.
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


def session_of(request: web.Request) -> Session:
    return request[SESSION]


def client_of(request: web.Request) -> AsyncClient:
    """The cluster as the logged-in user: their token on every call."""
    return request[SESSION].client


def render(
    request: web.Request, template: str, context: dict[str, Any], status: int = 200
) -> web.Response:
    rt = runtime_of(request)
    session = request.get(SESSION)
    base = {
        "logged_in": session is not None and session.token is not None,
        "csrf": session.csrf if session else "",
        "admin": rt.settings.admin,
        "path": request.path,
    }
    response = aiohttp_jinja2.render_template(template, request, {**base, **context}, status=status)
    response.headers.update(SECURITY_HEADERS)
    return response


def error_page(request: web.Request, status: int, message: str) -> web.Response:
    return render(request, "error.html", {"status": status, "message": message}, status=status)


def page(handler: Page) -> Page:
    """A console page: the user's session (a login first when the cluster needs a token),
    then the handler, whose typed errors become the error page with their status. A token
    the cluster no longer accepts ends the session."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        rt = runtime_of(request)
        session = rt.sessions.of(request)
        fresh = False
        if session is None:
            if not await rt.cluster_is_open():
                raise web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}")
            session, fresh = await rt.sessions.open(None, rt.anonymous), True
        request[SESSION] = session
        request[STARTED] = time.perf_counter()
        try:
            response = await handler(request)
        except PageError as exc:
            response = error_page(request, exc.status, exc.message)
        except MsgStoreError as exc:
            if exc.status == 401 and session.token is not None:
                await rt.sessions.close(session)
                raise web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}") from None
            response = error_page(request, exc.status, exc.message)
        if fresh:
            set_cookie(request, response, SESSION_COOKIE, session.id, SESSION_SECONDS)
        # the page's time in this process, its cluster calls included (bench/console.py)
        response.headers["Server-Timing"] = f"page;dur={elapsed_ms(request):.2f}"
        return response

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


def elapsed_ms(request: web.Request) -> float:
    """How long the page took so far (the search pages say it)."""
    return (time.perf_counter() - request[STARTED]) * 1000
