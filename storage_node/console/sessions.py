"""Console sessions, kept in the console's memory: a session holds the user's token and a
client of the cluster that sends it on every call, so the nodes check each user's rights.

The cookie holds only a random session id (HttpOnly, SameSite=Strict, Secure over HTTPS);
the token never leaves the server. Every POST carries a CSRF token: the login form's is
bound to a cookie of the browser that loaded it, every other form's to the session."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass

from aiohttp import web

from storage_node.client import AsyncClient

SESSION_COOKIE = "msgstore_session"
LOGIN_CSRF_COOKIE = "msgstore_login_csrf"
SESSION_SECONDS = 12 * 3600
MAX_SESSIONS = 10_000  # the oldest goes first beyond this (memory stays bounded)


@dataclass
class Session:
    id: str
    token: str | None  # None: an open cluster (no token configured on its nodes)
    client: AsyncClient
    csrf: str
    expires: float


class Sessions:
    """The live sessions of this console process (a restart logs everyone out)."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._live: OrderedDict[str, Session] = OrderedDict()

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def login_csrf(self, browser: str) -> str:
        """The CSRF token of the login form, bound to the browser's login cookie."""
        return self._sign("login:" + browser)

    async def open(self, token: str | None, client: AsyncClient) -> Session:
        session = Session(
            secrets.token_urlsafe(32),
            token,
            client,
            secrets.token_hex(32),
            time.time() + SESSION_SECONDS,
        )
        self._live[session.id] = session
        while len(self._live) > MAX_SESSIONS:
            _, oldest = self._live.popitem(last=False)
            if oldest.token is not None:
                await oldest.client.close()
        return session

    def of(self, request: web.Request) -> Session | None:
        """The request's live session, if its cookie names one."""
        session = self._live.get(request.cookies.get(SESSION_COOKIE, ""))
        if session is None or session.expires < time.time():
            return None
        return session

    async def close(self, session: Session) -> None:
        if self._live.pop(session.id, None) is not None and session.token is not None:
            await session.client.close()  # an open cluster's sessions share one client

    async def close_all(self) -> None:
        for session in list(self._live.values()):
            await self.close(session)


def same_origin(request: web.Request) -> bool:
    """A POST from a page of this console: an Origin header, when the browser sends one,
    names this host (browsers send it on every cross-site POST)."""
    origin = request.headers.get("Origin")
    if origin is None or origin == "null":
        return origin is None
    return origin.split("://", 1)[-1] == request.host


def safe_next(target: str | None) -> str:
    """Where to go after login: a path of this console only (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def set_cookie(
    request: web.Request, response: web.StreamResponse, name: str, value: str, max_age: int
) -> None:
    """An HttpOnly, SameSite=Strict cookie for the whole console (Secure over HTTPS)."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        httponly=True,
        samesite="Strict",
        path="/",
        secure=request.secure,
    )
