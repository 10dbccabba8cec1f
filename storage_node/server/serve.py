"""Run one node: listen first (health answers at once), recover the store in a thread, serve,
and on SIGTERM/SIGINT stop taking requests, finish the ones in flight, close the store
(flush + clean-shutdown marker) and exit 0."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from typing import Any

from aiohttp import web

from storage_node import structured_log
from storage_node.server.app import create_app
from storage_node.server.app_keys import METRICS
from storage_node.server.metrics_served import stores_of
from storage_node.server.runtime import NodeRuntime
from storage_node.server.settings import NodeSettings, build_store_config
from storage_node.tls import ReloadingServerContext

log = logging.getLogger("msgstore.node")


async def _routing_watch(runtime: NodeRuntime, app: web.Application) -> None:
    """Reload the routing file when it changes and create newly routed topics."""
    applied = runtime.routing.table.generation
    while True:
        await asyncio.sleep(runtime.settings.routing_poll_s)
        try:  # users and ACL changes apply (and are counted) without waiting for a request
            await runtime.in_thread(runtime.authorizer.document)
        except Exception:  # noqa: BLE001 - the watcher must survive anything
            log.exception("access file reload failed")
        try:
            # a request may have taken the new table already (check_owner refreshes too):
            # act on every generation not acted on yet
            changed = runtime.routing.refresh_if_changed()
            if runtime.store is None:
                continue  # still opening: it takes the table it finds then
            if changed or runtime.routing.table.generation != applied:
                applied = runtime.routing.table.generation
                app[METRICS].routing_reloads.inc()
                log.info("routing table generation %d loaded", runtime.routing.table.generation)
                if runtime.replicas is not None:
                    await runtime.in_thread(runtime.replicas.apply, runtime.routing.table)
                await runtime.in_thread(runtime.sync_topics_from_routing)
        except Exception:  # noqa: BLE001 - the watcher must survive anything
            log.exception("routing reload failed")


async def _tls_watch(runtime: NodeRuntime, tls: ReloadingServerContext) -> None:
    """Reload the certificate files and the CA bundle when they change (new connections
    get the new ones; the peer-only routes check against the bundle loaded now)."""
    while True:
        await asyncio.sleep(runtime.settings.tls_reload_s)
        try:
            tls.check()
        except Exception:  # noqa: BLE001 - the watcher must survive anything
            log.exception("TLS reload failed")


def _open_store(runtime: NodeRuntime) -> None:
    from storage_node.partitions import SingleLog
    from storage_node.store import Store

    settings = runtime.settings
    os.makedirs(settings.data_dir, exist_ok=True)
    table = runtime.routing.table
    if table.logs:  # replicated logs: one store per log this node holds
        from storage_node.replication.replicas import LogHost

        headers = {"Authorization": f"Bearer {settings.token}"} if settings.token else {}
        host = LogHost(
            settings.node_id,
            settings.data_dir,
            build_store_config(settings),
            headers,
            settings.tls_ca or True,
            settings.replication_ack_timeout_s,
            identity=runtime.peer_identity,
        )
        host.apply(table)
        runtime.replicas = host
        runtime.partitions.attach(host)
    else:  # one log of factor 1, served through the same partition service
        runtime.partitions.attach(SingleLog(Store.open(build_store_config(settings))))
    runtime.sync_topics_from_routing()


async def _start_kafka(runtime: NodeRuntime, tls: ReloadingServerContext | None) -> list[Any]:
    """The Kafka listeners (docs/KAFKA.md) when a Kafka port is set, on this event loop: the
    internal one, and the external one when an external port is set too (one KafkaNode, so
    both serve the same groups); with TLS on, they serve TLS with the HTTP API's reloading
    certificate context."""
    settings = runtime.settings
    if not settings.kafka_port:
        return []

    def build() -> list[Any]:  # in a thread: importing the protocol schemas takes a moment
        from storage_node.kafka.listener import KafkaListener
        from storage_node.kafka.node import KafkaNode

        node = KafkaNode(runtime, settings.host, settings.kafka_port, settings.kafka_external_port)
        listeners = [KafkaListener(node)]
        if settings.kafka_external_port:
            listeners.append(KafkaListener(node, listeners[0].table, listener="external"))
        return listeners

    listeners = await asyncio.to_thread(build)
    ports = [settings.kafka_port, settings.kafka_external_port]
    started: list[Any] = []
    try:
        for listener, port in zip(listeners, ports, strict=False):
            await listener.start(settings.host, port, tls.context if tls else None)
            started.append(listener)
    except OSError:
        for listener in started:
            await listener.close()
        raise
    for listener in listeners:
        log.info(
            "node %s serving Kafka (%s) on %s:%d (%s)",
            settings.node_id,
            listener.listener,
            settings.host,
            listener.port,
            ("SASL_SSL" if tls else "SASL_PLAINTEXT")
            if settings.token
            else ("SSL" if tls else "PLAINTEXT"),
        )
    return listeners


def _log_recoveries(runtime: NodeRuntime) -> None:
    """One line per store about its recovery; a warning when it cut or skipped data."""
    for served in stores_of(runtime.partitions):
        report = served.store.recovery_report
        lost = report["truncated_bytes"] or report["corrupt_records"] or report["corrupt_files"]
        log.log(
            logging.WARNING if lost else logging.INFO,
            "recovered in %.3fs (%s): %d bytes of torn tail cut, %d corrupt records, "
            "%d corrupt files, %d records replayed",
            served.store.recovery_seconds,
            "after a clean shutdown" if report["clean"] else "without a clean-shutdown marker",
            report["truncated_bytes"],
            len(report["corrupt_records"]),
            len(report["corrupt_files"]),
            report["replayed_records"],
            extra={"log": served.log},
        )


async def serve(settings: NodeSettings) -> int:
    """Serve until a stop signal; returns the process exit code."""
    runtime = NodeRuntime(settings)
    app = create_app(runtime)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=30)
    await runner.setup()
    tls = None
    if settings.tls_cert:  # with mTLS the CA bundle verifies the client certificates too
        ca = settings.tls_ca if settings.mtls else ""
        tls = ReloadingServerContext(settings.tls_cert, settings.tls_key, ca)
    runtime.server_tls = tls
    site = web.TCPSite(
        runner,
        settings.host,
        settings.port,
        reuse_address=True,
        ssl_context=tls.context if tls else None,
    )
    await site.start()
    log.info(
        "node %s listening on %s://%s:%d%s",
        settings.node_id,
        "https" if tls else "http",
        settings.host,
        settings.port,
        " (mTLS between nodes)" if settings.mtls else "",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    exit_code = 0
    try:  # before the store opens: a node that answers ready serves Kafka too
        kafka = await _start_kafka(runtime, tls)
    except OSError as err:  # a Kafka port is taken: stop as a failed start
        kafka = []
        runtime.startup_error = f"cannot serve Kafka on port {settings.kafka_port}: {err}"
        log.error("%s", runtime.startup_error)
        exit_code = 1
        stop.set()
    open_task = loop.run_in_executor(None, _open_store, runtime)
    watcher = asyncio.create_task(_routing_watch(runtime, app))
    tls_watcher = asyncio.create_task(_tls_watch(runtime, tls)) if tls else None
    stop_task = asyncio.create_task(stop.wait())
    first: set[asyncio.Future[None] | asyncio.Task[bool]] = {open_task, stop_task}
    done, _ = await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
    if open_task in done:
        exc = open_task.exception()
        if exc is not None:
            runtime.startup_error = f"store failed to open: {exc}"
            log.error("%s", runtime.startup_error)
            exit_code = 1
            stop.set()
        else:
            log.info("store ready in %s", settings.data_dir)
            _log_recoveries(runtime)
    await stop.wait()
    log.info("stopping: draining requests")
    runtime.draining = True
    for task in (watcher, tls_watcher):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    for listener in kafka:
        await listener.close()
    await runner.cleanup()
    if not open_task.done():
        with contextlib.suppress(Exception):
            await open_task
    if runtime.partitions.logs is not None:
        await loop.run_in_executor(None, runtime.partitions.close)
        log.info("stores closed cleanly" if runtime.replicas else "store closed cleanly")
    await runtime.close()
    return exit_code


def run(settings: NodeSettings) -> int:
    structured_log.configure(
        settings.node_id,
        settings.log_level,
        settings.log_format,
        (settings.token, settings.read_token),
    )
    return asyncio.run(serve(settings))
