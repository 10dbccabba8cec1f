"""The console's aiohttp application: its pages, the login (the user's token, checked by
asking the cluster, kept in the server-side session) and logout, the stylesheet, and the
background task that reads the nodes' metrics."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from importlib import resources

import aiohttp_jinja2
import jinja2
from aiohttp import web

from storage_node.console import cluster, groups, message, search, topics
from storage_node.console.pages import SECURITY_HEADERS, error_page, render
from storage_node.console.runtime import RUNTIME, ConsoleRuntime, runtime_of
from storage_node.console.scraper import scrape_forever
from storage_node.console.sessions import (
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    SESSION_SECONDS,
    safe_next,
    same_origin,
    set_cookie,
)
from storage_node.console.settings import ConsoleSettings
from storage_node.errors import MsgStoreError

CSS = resources.files("storage_node.console").joinpath("static/console.css")


async def login_form(request: web.Request) -> web.StreamResponse:
    rt = runtime_of(request)
    browser = request.cookies.get(LOGIN_CSRF_COOKIE) or secrets.token_hex(16)
    context = {
        "csrf": rt.sessions.login_csrf(browser),
        "next": safe_next(request.query.get("next")),
        "failed": False,
    }
    response = render(request, "login.html", context)
    set_cookie(request, response, LOGIN_CSRF_COOKIE, browser, 3600)
    return response


async def login(request: web.Request) -> web.StreamResponse:
    """Check the CSRF token, then the user's token with the cluster; a session on success
    (the token stays in this process: the cookie names the session only)."""
    rt = runtime_of(request)
    form = await request.post()
    browser = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    csrf = str(form.get("csrf", ""))
    if not same_origin(request) or not browser or csrf != rt.sessions.login_csrf(browser):
        return error_page(request, 403, "the login form expired or came from another site")
    target = safe_next(str(form.get("next", "")))
    token = str(form.get("token", "")).strip()
    try:
        status = await rt.token_status(token) if token else 401
    except MsgStoreError as exc:
        return error_page(request, 503, f"the cluster did not answer: {exc.message}")
    if status == 401:
        context = {"csrf": csrf, "next": target, "failed": True}
        return render(request, "login.html", context, status=401)
    session = await rt.sessions.open(token, rt.client(token))
    response = web.Response(status=303, headers={"Location": target})
    set_cookie(request, response, SESSION_COOKIE, session.id, SESSION_SECONDS)
    response.del_cookie(LOGIN_CSRF_COOKIE, path="/")
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    rt = runtime_of(request)
    form = await request.post()
    session = rt.sessions.of(request)
    ok = session is not None and str(form.get("csrf", "")) == session.csrf
    if not same_origin(request) or not ok:
        return error_page(request, 403, "logout refused: not a form of this console")
    assert session is not None
    await rt.sessions.close(session)
    response = web.Response(status=303, headers={"Location": "/login"})
    response.del_cookie(SESSION_COOKIE, path="/")
    return response


async def stylesheet(request: web.Request) -> web.StreamResponse:
    response = web.Response(body=CSS.read_bytes(), content_type="text/css")
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = "max-age=300"
    return response


async def healthz(request: web.Request) -> web.StreamResponse:
    """The console's own liveness (its Kubernetes probes): no session, no cluster call."""
    return web.json_response({"status": "ok"})


def create_app(settings: ConsoleSettings) -> web.Application:
    app = web.Application(client_max_size=64 * 1024)
    aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("storage_node.console", "templates"),
        autoescape=True,  # every value escaped: keys, tags and bodies are attacker-controlled
        undefined=jinja2.StrictUndefined,
    )
    rt = ConsoleRuntime(settings)
    app[RUNTIME] = rt
    add = app.router.add_get
    add("/", cluster.cluster_page)
    add("/replication", cluster.replication_page)
    add("/topics", topics.topics_page)
    add("/topics/{topic}", topics.topic_page)
    add("/groups", groups.groups_page)
    add("/groups/{group}", groups.group_page)
    app.router.add_post("/groups/{group}/reset", groups.reset)
    add("/search", search.search)
    add("/messages/{msg_id}", message.message_page)
    add("/messages/{msg_id}/raw", message.raw_body)
    add("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    add("/assets/console.css", stylesheet)
    add("/healthz", healthz)
    app.cleanup_ctx.append(_background)
    return app


async def _background(app: web.Application) -> AsyncIterator[None]:
    rt = app[RUNTIME]
    task = asyncio.create_task(scrape_forever(rt.service, rt.history, rt.settings.scrape_seconds))
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await rt.close()
