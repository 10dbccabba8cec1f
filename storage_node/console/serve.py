"""Run a console process: its app on ``host:port`` (HTTPS with ``cert``/``key``) until
SIGTERM or SIGINT, printing its URL once it listens."""

from __future__ import annotations

import asyncio
import signal
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
    site = web.TCPSite(runner, settings.host, settings.port, ssl_context=context)
    await site.start()
    server = site._server  # the bound port, when 0 asked for any free one
    port = server.sockets[0].getsockname()[1] if server is not None else settings.port  # type: ignore[attr-defined]
    print(
        f"console: {url_of(settings, port)} (cluster {', '.join(settings.endpoints)})", flush=True
    )
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
