"""The console's routes on the node's app, its templates (autoescaped), login and logout."""

from __future__ import annotations

import secrets
from importlib import resources

import aiohttp_jinja2
import jinja2
from aiohttp import web

from storage_node.console import cluster, message, search
from storage_node.console.auth import (
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    SESSION_SECONDS,
    ConsoleAuth,
    safe_next,
    same_origin,
    set_cookie,
)
from storage_node.console.pages import AUTH, SECURITY_HEADERS, auth_of, error_page, render

CSS = resources.files("storage_node.console").joinpath("static/console.css")


async def login_form(request: web.Request) -> web.StreamResponse:
    auth = auth_of(request)
    if not auth.required:
        raise web.HTTPSeeOther("/")
    browser = request.cookies.get(LOGIN_CSRF_COOKIE) or secrets.token_hex(16)
    context = {
        "csrf": auth.login_csrf(browser),
        "next": safe_next(request.query.get("next")),
        "failed": False,
    }
    response = render(request, "login.html", context)
    set_cookie(request, response, LOGIN_CSRF_COOKIE, browser, 3600)
    return response


async def login(request: web.Request) -> web.StreamResponse:
    """Check the CSRF token and the node token; a session cookie on success."""
    auth = auth_of(request)
    form = await request.post()
    browser = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    csrf = str(form.get("csrf", ""))
    if not same_origin(request) or not browser or csrf != auth.login_csrf(browser):
        return error_page(request, 403, "the login form expired or came from another site")
    target = safe_next(str(form.get("next", "")))
    if not auth.required:
        raise web.HTTPSeeOther(target)
    if not auth.token_ok(str(form.get("token", ""))):
        context = {"csrf": csrf, "next": target, "failed": True}
        return render(request, "login.html", context, status=401)
    response = web.Response(status=303, headers={"Location": target})
    set_cookie(request, response, SESSION_COOKIE, auth.new_session(), SESSION_SECONDS)
    response.del_cookie(LOGIN_CSRF_COOKIE, path="/")
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    auth = auth_of(request)
    form = await request.post()
    session = auth.session_of(request)
    ok = session is not None and str(form.get("csrf", "")) == auth.session_csrf(session)
    if not same_origin(request) or not ok:
        return error_page(request, 403, "logout refused: not a form of this console")
    response = web.Response(status=303, headers={"Location": "/login"})
    response.del_cookie(SESSION_COOKIE, path="/")
    return response


async def stylesheet(request: web.Request) -> web.StreamResponse:
    response = web.Response(body=CSS.read_bytes(), content_type="text/css")
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = "max-age=300"
    return response


def register(app: web.Application, token: str, read_token: str) -> None:
    """Add the console's pages to a node's app (login required when ``token`` is set)."""
    aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("storage_node.console", "templates"),
        autoescape=True,  # every value escaped: keys, tags and bodies are attacker-controlled
        undefined=jinja2.StrictUndefined,
    )
    app[AUTH] = ConsoleAuth(token, read_token)
    add = app.router.add_get
    add("/", cluster.cluster_page)
    add("/topics", cluster.topics_page)
    add("/topics/{topic}", cluster.topic_page)
    add("/groups", cluster.groups_page)
    add("/groups/{group}", cluster.group_page)
    add("/search", search.search)
    add("/messages/{msg_id}", message.message_page)
    add("/messages/{msg_id}/raw", message.raw_body)
    add("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    add("/assets/console.css", stylesheet)
