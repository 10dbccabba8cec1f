"""kopf wiring: ``kopf run -m msgstore_operator --standalone --liveness=URL``.

Create, resume and update run one idempotent reconcile pass (see ``reconcile``). A status
loop repeats the same pass every few seconds for every known MessageStore, which keeps
status true from the StatefulSet and pods and repairs drifted children. It is a plain
background task rather than a kopf timer on purpose: kopf puts a finalizer on every object
with a timer, and such a finalizer blocks deleting a store (or its namespace) whenever the
operator is not running. Deletion needs no handler: every child carries an owner reference
and the garbage collector removes it.

Settings (environment variables of the operator process):

* ``MSGSTORE_OPERATOR_INTERVAL_S``: seconds between status refreshes (default 10);
* ``MSGSTORE_OPERATOR_CLUSTER_DOMAIN``: DNS domain of the cluster (default cluster.local);
* ``MSGSTORE_NODE_IMAGE`` / ``MSGSTORE_SPARK_IMAGE``: images used when a spec names none.

Which namespaces are watched is kopf's choice: ``--namespace=NS`` or ``--all-namespaces``.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

import kopf
import kubernetes
import urllib3
from kubernetes.client.rest import ApiException

from . import GROUP, PLURAL, VERSION
from .kube import Kube
from .reconcile import NotYet, Outcome, SpecProblem, reconcile
from .status import changed_fields

INTERVAL_S = float(os.environ.get("MSGSTORE_OPERATOR_INTERVAL_S", "10"))
CLUSTER_DOMAIN = os.environ.get("MSGSTORE_OPERATOR_CLUSTER_DOMAIN", "cluster.local")
DEFAULT_IMAGES = (os.environ.get("MSGSTORE_NODE_IMAGE"), os.environ.get("MSGSTORE_SPARK_IMAGE"))
PREFIX = "msgstore.io"

log = logging.getLogger("msgstore_operator")
_kube: Kube | None = None
_kube_lock = threading.Lock()
_last_success: dict[str, str] = {}
# Latest body of every MessageStore seen by the watch, for the status loop.
_stores: dict[tuple[str, str], dict[str, Any]] = {}
_loop_task: asyncio.Task[None] | None = None


def kube() -> Kube:
    """One API client for the process: in-cluster credentials, else the kubeconfig."""
    global _kube
    with _kube_lock:
        if _kube is None:
            try:
                kubernetes.config.load_incluster_config()
            except kubernetes.config.ConfigException:
                kubernetes.config.load_kube_config()
            _kube = Kube(kubernetes.client.ApiClient())
        return _kube


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Retry(Exception):
    """A failed pass worth retrying soon; ``delay`` in seconds."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


def run_pass(body: Mapping[str, Any]) -> Outcome:
    """One reconcile pass; posts its events. Raises SpecProblem or Retry on failure."""
    k = kube()
    try:
        outcome = reconcile(k, body, CLUSTER_DOMAIN, now_text(), DEFAULT_IMAGES)
    except SpecProblem as exc:
        _event(body, "Warning", "InvalidSpec", str(exc))
        raise
    except NotYet as exc:
        _event(body, "Warning", "Waiting", str(exc))
        raise Retry(str(exc), 15) from exc
    except ApiException as exc:
        if exc.status in (400, 403, 422):
            message = (
                f"the API server refused a child object: {exc.status} {exc.reason}: {exc.body}"
            )
            _event(body, "Warning", "ApplyFailed", message)
            raise Retry(message, 30) from exc
        raise Retry(f"API error {exc.status} {exc.reason}", 5) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise Retry(f"API server unreachable: {exc}", 5) from exc
    for kind, reason, message in outcome.events:
        _event(body, "Warning" if kind == "warning" else "Normal", reason, message)
    meta = body["metadata"]
    _last_success[f"{meta['namespace']}/{meta['name']}"] = now_text()
    if outcome.changed:
        log.info("%s/%s applied: %s", meta["namespace"], meta["name"], ", ".join(outcome.changed))
    return outcome


def _event(body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
    try:
        kube().post_event(dict(body), event_type, reason, message, now_text())
    except (ApiException, urllib3.exceptions.HTTPError) as exc:  # events are best effort
        log.warning("could not post event %s: %s", reason, exc)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Keep kopf's bookkeeping in our own annotations (the status schema is strict), and
    start the status loop."""
    global _loop_task
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    # Events are posted by the reconcile pass itself (what changed, warnings); kopf's own
    # per-handler log events would repeat on every pass.
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    await asyncio.to_thread(kube)
    _loop_task = asyncio.create_task(status_loop())


@kopf.on.cleanup()
async def stop_loop(**_: Any) -> None:
    if _loop_task is not None:
        _loop_task.cancel()


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile_handler(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """Bring the children in line with the spec (only what changed is sent)."""
    try:
        outcome = run_pass(body)
    except SpecProblem as exc:
        raise kopf.PermanentError(str(exc)) from exc
    except Retry as exc:
        raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc
    for key, value in changed_fields(body.get("status") or {}, outcome.status).items():
        patch.status[key] = value


@kopf.on.event(GROUP, VERSION, PLURAL)
def track(event: Mapping[str, Any], **_: Any) -> None:
    """Remember the latest body of every store for the status loop (no finalizer needed)."""
    obj = event.get("object") or {}
    meta = obj.get("metadata") or {}
    key = (meta.get("namespace", ""), meta.get("name", ""))
    if event.get("type") == "DELETED" or meta.get("deletionTimestamp"):
        _stores.pop(key, None)
    else:
        _stores[key] = obj


def refresh_one(body: Mapping[str, Any]) -> None:
    """One status-loop pass for one store: reconcile, then patch only changed status."""
    meta = body["metadata"]
    try:
        outcome = run_pass(body)
    except (SpecProblem, Retry) as exc:
        log.warning("%s/%s: %s", meta["namespace"], meta["name"], exc)
        return
    fields = changed_fields(body.get("status") or {}, outcome.status)
    if fields:
        try:
            kube().patch_status(meta["namespace"], meta["name"], fields)
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile: nothing to report
                log.warning("%s/%s: status patch failed: %s", meta["namespace"], meta["name"], exc)


async def status_loop() -> None:
    """Every INTERVAL_S: refresh every known store (one at a time, in a worker thread)."""
    while True:
        await asyncio.sleep(INTERVAL_S)
        stores = list(_stores.values())
        for body in stores:
            try:
                await asyncio.to_thread(refresh_one, body)
            except Exception:  # keep the loop alive whatever one store does
                log.exception("status refresh failed")
        log.info("status refreshed for %d MessageStores", len(stores))


@kopf.on.probe(id="reconciled")
def reconciled_probe(**_: Any) -> dict[str, str]:
    """Shown by the liveness endpoint: when each store was last reconciled successfully."""
    return dict(_last_success)
