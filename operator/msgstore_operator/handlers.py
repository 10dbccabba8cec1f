"""kopf wiring: ``kopf run -m msgstore_operator.handlers --standalone --liveness=URL``.

Create, resume and update run one idempotent reconcile pass (see ``reconcile``). A status
loop repeats the same pass every few seconds for every MessageStore of a kopf index, which keeps
status true from the StatefulSet and pods and repairs drifted children. It is a plain
background task rather than a kopf timer on purpose: kopf puts a finalizer on every object
with a timer, and such a finalizer blocks deleting a store (or its namespace) whenever the
operator is not running. Deletion needs no handler: every child carries an owner reference
and the garbage collector removes it.

Settings: environment variables read once at start-up into an ``OperatorSettings``
(config.py; names and defaults in docs/CONFIG.md), kept in the operator's memo with the rest
of its state; a bad value stops the operator before it connects.

Which namespaces are watched is kopf's choice: ``--namespace=NS`` or ``--all-namespaces``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
import kubernetes
import urllib3
from kubernetes.client.rest import ApiException

from . import API_VERSION, GROUP, KIND, PLURAL, VERSION
from .config import OperatorSettings, SettingsError, read_settings
from .failover import Failovers
from .kube import Kube
from .reconcile import NotYet, Outcome, SpecProblem, owner_of, reconcile
from .status import DEGRADED, changed_fields, now_text, set_condition
from .user_handlers import user_loop  # also registers the MessageStoreUser handlers

PREFIX = "msgstore.io"

log = logging.getLogger("msgstore_operator")


@dataclass
class OperatorState:
    """What the operator keeps between passes, in kopf's operator memo (``memo.state``; the
    per-store memos are shallow copies of it, so every handler sees the same object)."""

    kube: Kube
    settings: OperatorSettings
    failovers: Failovers
    # One pass at a time per store: the handlers and the status loop never interleave, and
    # each pass reads the store afresh under the lock, so a pass never applies a superseded
    # spec.
    pass_locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_success: dict[str, str] = field(default_factory=dict)
    last_warning: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    loop_task: asyncio.Task[None] | None = None
    user_loop_task: asyncio.Task[None] | None = None

    def pass_lock(self, namespace: str, name: str) -> threading.Lock:
        with self.lock:
            return self.pass_locks.setdefault((namespace, name), threading.Lock())


def connect() -> Kube:
    """An API client: in-cluster credentials, else the kubeconfig."""
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return Kube(kubernetes.client.ApiClient())


class Retry(Exception):
    """A failed pass worth retrying soon; ``delay`` in seconds."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


def run_pass(
    state: OperatorState, namespace: str, name: str
) -> tuple[dict[str, Any], Outcome] | None:
    """One reconcile pass on the store as it is now (None if it is gone or being deleted).

    Posts its events; raises SpecProblem or Retry on failure.
    """
    with state.pass_lock(namespace, name):
        try:
            body = state.kube.get(API_VERSION, KIND, namespace, name)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise Retry(f"cannot read the MessageStore: {exc}", 5) from exc
        if body is None or body["metadata"].get("deletionTimestamp"):
            return None
        outcome = _reconcile_body(state, body)
        if outcome.spec is not None:
            owner = owner_of(body)
            state.failovers.ensure(owner, outcome.spec, state.pass_lock(namespace, name))
            replication = state.failovers.report((namespace, name), outcome.routing)
            if replication is not None:
                outcome.status["replication"] = replication
        return body, outcome


def _reconcile_body(state: OperatorState, body: dict[str, Any]) -> Outcome:
    k, config = state.kube, state.settings
    try:
        outcome = reconcile(
            k,
            body,
            config.cluster_domain,
            now_text(),
            config.default_images,
            config.security,
            config.namespace,
            config.claim_grace_s,
        )
    except SpecProblem as exc:
        _warn(state, body, "InvalidSpec", str(exc))
        _report_degraded(state, body, "InvalidSpec", str(exc))
        raise
    except NotYet as exc:
        _warn(state, body, "Waiting", str(exc))
        raise Retry(str(exc), 15) from exc
    except ApiException as exc:
        if exc.status in (400, 403, 422):
            message = (
                f"the API server refused a child object: {exc.status} {exc.reason}: {exc.body}"
            )
            _warn(state, body, "ApplyFailed", message)
            raise Retry(message, 30) from exc
        raise Retry(f"API error {exc.status} {exc.reason}", 5) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise Retry(f"API server unreachable: {exc}", 5) from exc
    for kind, reason, message in outcome.events:
        _event(k, body, "Warning" if kind == "warning" else "Normal", reason, message)
    meta = body["metadata"]
    state.last_success[f"{meta['namespace']}/{meta['name']}"] = now_text()
    state.last_warning.pop((meta["namespace"], meta["name"]), None)
    if outcome.changed:
        log.info("%s/%s applied: %s", meta["namespace"], meta["name"], ", ".join(outcome.changed))
    return outcome


def _warn(state: OperatorState, body: Mapping[str, Any], reason: str, message: str) -> None:
    """A Warning event, once per distinct problem (passes repeat every few seconds)."""
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    if state.last_warning.get(key) != (reason, message):
        state.last_warning[key] = (reason, message)
        _event(state.kube, body, "Warning", reason, message)


def _report_degraded(
    state: OperatorState, body: Mapping[str, Any], reason: str, message: str
) -> None:
    """Say in status why nothing can be applied (the pass stopped before computing it)."""
    meta = body["metadata"]
    old = body.get("status") or {}
    conditions = set_condition(
        old.get("conditions") or [], DEGRADED, True, reason, message, now_text()
    )
    fields = changed_fields(old, {"phase": "Degraded", "conditions": conditions})
    if fields:
        try:
            state.kube.patch_status(meta["namespace"], meta["name"], fields)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            log.warning("%s/%s: status patch failed: %s", meta["namespace"], meta["name"], exc)


def _event(k: Kube, body: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
    try:
        k.post_event(dict(body), event_type, reason, message, now_text())
    except (ApiException, urllib3.exceptions.HTTPError) as exc:  # events are best effort
        log.warning("could not post event %s: %s", reason, exc)


@kopf.index(GROUP, VERSION, PLURAL)
def messagestores(namespace: str | None, name: str | None, **_: Any) -> dict[tuple[str, str], bool]:
    """Every MessageStore the watch sees, for the status loop (kopf drops deleted ones; an
    index needs no finalizer)."""
    return {(namespace or "", name or ""): True}


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    """Read the operator's settings, keep kopf's bookkeeping in our own annotations (the
    status schema is strict), and start the status loop."""
    try:
        config = read_settings()
    except SettingsError as exc:  # the operator stops: a permanent failure at start-up
        raise kopf.PermanentError(f"bad operator setting: {exc}") from exc
    log.info("operator settings: %s", config)
    # kopf passes its indices by name; its ActivityFn protocol has no parameter for them.
    stores: kopf.Index[tuple[str, str], bool] = kwargs["messagestores"]
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    # Events are posted by the reconcile pass itself (what changed, warnings); kopf's own
    # per-handler log events would repeat on every pass.
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    kube = await asyncio.to_thread(connect)
    state = OperatorState(kube, config, Failovers(kube, config.failover_timeout_s))
    memo.state = state
    state.loop_task = asyncio.create_task(status_loop(state, stores))
    users: kopf.Index[tuple[str, str], bool] = kwargs["messagestoreusers"]
    state.user_loop_task = asyncio.create_task(user_loop(state, users))


@kopf.on.cleanup()
async def stop_loop(memo: kopf.Memo, **_: Any) -> None:
    state: OperatorState | None = memo.get("state")
    for task in (state.loop_task, state.user_loop_task) if state is not None else ():
        if task is not None:
            task.cancel()
    if state is not None:
        await asyncio.to_thread(state.failovers.stop_all)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile_handler(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    """Bring the children in line with the spec (only what changed is sent)."""
    namespace, name = body.metadata.namespace, body.metadata.name
    if namespace is None or name is None:  # MessageStore is namespaced; kopf sends both
        raise kopf.PermanentError("the MessageStore event has no namespace or name")
    try:
        result = run_pass(memo.state, namespace, name)
    except SpecProblem as exc:
        raise kopf.PermanentError(str(exc)) from exc
    except Retry as exc:
        raise kopf.TemporaryError(str(exc), delay=exc.delay) from exc
    if result is not None:
        fresh, outcome = result
        for key, value in changed_fields(fresh.get("status") or {}, outcome.status).items():
            patch.status[key] = value


def refresh_one(state: OperatorState, namespace: str, name: str) -> None:
    """One status-loop pass for one store: reconcile, then patch only changed status."""
    try:
        result = run_pass(state, namespace, name)
    except (SpecProblem, Retry) as exc:
        log.warning("%s/%s: %s", namespace, name, exc)
        return
    if result is None:
        return
    body, outcome = result
    fields = changed_fields(body.get("status") or {}, outcome.status)
    if fields:
        try:
            state.kube.patch_status(namespace, name, fields)
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile: nothing to report
                log.warning("%s/%s: status patch failed: %s", namespace, name, exc)


async def status_loop(state: OperatorState, stores: kopf.Index[tuple[str, str], bool]) -> None:
    """Every ``interval_s``: refresh every store of the index (one at a time, in a worker
    thread)."""
    while True:
        await asyncio.sleep(state.settings.interval_s)
        known = list(stores)
        await asyncio.to_thread(state.failovers.retain, set(known))  # may join a thread
        for namespace, name in known:
            try:
                await asyncio.to_thread(refresh_one, state, namespace, name)
            except Exception:  # keep the loop alive whatever one store does
                log.exception("status refresh failed")
        log.info("status refreshed for %d MessageStores", len(known))


@kopf.on.probe(id="reconciled")
def reconciled_probe(memo: kopf.Memo, **_: Any) -> dict[str, str]:
    """Shown by the liveness endpoint: when each store was last reconciled successfully."""
    state: OperatorState | None = memo.get("state")
    return dict(state.last_success) if state is not None else {}
