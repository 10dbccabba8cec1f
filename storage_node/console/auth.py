"""Console sessions: with a node token, every page needs a login (``POST /login``, form
field ``token``), exchanged for a signed HttpOnly, SameSite=Strict cookie; every POST
carries a CSRF token bound to the browser (login) or to the session (logout).

Sessions are signed with a key made at start, so a restarted node logs everyone out and
no token is ever kept in a cookie."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field

from aiohttp import web

from storage_node.server.auth import token_role

SESSION_COOKIE = "msgstore_session"
LOGIN_CSRF_COOKIE = "msgstore_login_csrf"
SESSION_SECONDS = 12 * 3600


@dataclass
class ConsoleAuth:
    """The node's token(s) and the key that signs session cookies."""

    token: str
    read_token: str = ""
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    @property
    def required(self) -> bool:
        return bool(self.token)

    def _sign(self, text: str) -> str:
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()

    def token_ok(self, given: str) -> bool:
        """The full or the read token (the console only reads): the API's one check."""
        return bool(given) and token_role(given, self.token, self.read_token) is not None

    def new_session(self) -> str:
        body = f"{int(time.time()) + SESSION_SECONDS}.{secrets.token_hex(16)}"
        return f"{body}.{self._sign('session:' + body)}"

    def session_of(self, request: web.Request) -> str | None:
        """The request's session id (its cookie's nonce) if signed here and not expired."""
        cookie = request.cookies.get(SESSION_COOKIE, "")
        expiry, _, rest = cookie.partition(".")
        nonce, _, signature = rest.partition(".")
        if not (expiry.isdigit() and nonce and signature):
            return None
        if not hmac.compare_digest(signature, self._sign(f"session:{expiry}.{nonce}")):
            return None
        return nonce if int(expiry) > time.time() else None

    def session_csrf(self, session: str) -> str:
        """The CSRF token of a session's forms (logout)."""
        return self._sign("csrf:" + session)

    def login_csrf(self, browser: str) -> str:
        """The CSRF token of the login form, bound to the browser's login cookie."""
        return self._sign("login:" + browser)


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
