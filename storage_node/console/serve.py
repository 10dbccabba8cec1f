"""Run a console process: its app on ``host:port`` (HTTPS with ``cert``/``key``) until
SIGTERM or SIGINT, printing its URL once it listens."""

from __future__ import annotations

import asyncio
import signal
import socket
import ssl

from aiohttp import web

from storage_node.console.routes import create_app
from storage_node.console.settings import ConsoleSettings


def url_of(settings: ConsoleSettings, port: int) -> str:
    scheme = "https" if settings.cert else "http"
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"{scheme}://{host}:{port}"


async def serve(settings: ConsoleSettings) -> None:
    context = None
    if settings.cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(settings.cert, settings.key)
    runner = web.AppRunner(create_app(settings), access_log=None)
    await runner.setup()
    # our own socket, so that port 0 (any free one) can be told: the URL names the real one
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    site = web.SockSite(runner, sock, ssl_context=context)
    await site.start()
    port = sock.getsockname()[1]
    endpoints = ", ".join(settings.endpoints)
    print(f"console: {url_of(settings, port)} (cluster {endpoints})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def run(settings: ConsoleSettings) -> None:
    asyncio.run(serve(settings))
