"""kopf wiring: ``kopf run -m msgstore_operator --standalone --liveness=URL``.

Create, resume and update run one idempotent reconcile pass (see ``reconcile``). A status
loop repeats the same pass every few seconds for every MessageStore of a kopf index, which keeps
status true from the StatefulSet and pods and repairs drifted children. It is a plain
background task rather than a kopf timer on purpose: kopf puts a finalizer on every object
with a timer, and such a finalizer blocks deleting a store (or its namespace) whenever the
operator is not running. Deletion needs no handler: every child carries an owner reference
and the garbage collector removes it.

Settings (environment variables of the operator process):

* ``MSGSTORE_OPERATOR_INTERVAL_S``: seconds between status refreshes (default 10);
* ``MSGSTORE_OPERATOR_CLUSTER_DOMAIN``: DNS domain of the cluster (default cluster.local);
* ``MSGSTORE_NODE_IMAGE`` / ``MSGSTORE_SPARK_IMAGE``: images used when a spec names none;
* ``MSGSTORE_OPERATOR_TLS``, ``MSGSTORE_OPERATOR_NETWORK_POLICY`` (default true): whether a
  store whose spec does not say gets HTTPS / a NetworkPolicy;
* ``MSGSTORE_OPERATOR_RESTRICTED_PODS`` (default true): Pod Security "restricted" contexts
  on node pods (false only for development images that need root);
* ``MSGSTORE_OPERATOR_CERT_VALIDITY_DAYS`` (default 90): node certificate lifetime when a
  spec does not say (renewed after two thirds of it);
* ``MSGSTORE_OPERATOR_NAMESPACE``: the operator's namespace, let through the NetworkPolicy;
* ``MSGSTORE_OPERATOR_CLAIM_GRACE_S`` (default 120): how long a volume claim may stay
  Pending before the store is Degraded.

Which namespaces are watched is kopf's choice: ``--namespace=NS`` or ``--all-namespaces``.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
import kubernetes
import urllib3
from kubernetes.client.rest import ApiException

from . import API_VERSION, GROUP, KIND, PLURAL, VERSION
from .kube import Kube
from .reconcile import NotYet, Outcome, SpecProblem, reconcile
from .spec import SecurityDefaults
from .status import DEGRADED, changed_fields, set_condition

INTERVAL_S = float(os.environ.get("MSGSTORE_OPERATOR_INTERVAL_S", "10"))
CLUSTER_DOMAIN = os.environ.get("MSGSTORE_OPERATOR_CLUSTER_DOMAIN", "cluster.local")
DEFAULT_IMAGES = (os.environ.get("MSGSTORE_NODE_IMAGE"), os.environ.get("MSGSTORE_SPARK_IMAGE"))


def security_defaults_from_env(env: Mapping[str, str]) -> SecurityDefaults:
    """The chart's tls / networkPolicy / podSecurity values, as the operator receives them."""

    def flag(name: str, default: bool) -> bool:
        raw = env.get(name, "").strip().lower()
        if not raw:
            return default
        if raw in ("1", "true", "yes", "on"):
            return True
        if raw in ("0", "false", "no", "off"):
            return False
        raise SystemExit(f"{name}={raw!r}: expected true or false")

    days = env.get("MSGSTORE_OPERATOR_CERT_VALIDITY_DAYS", "90")
    if not days.isdigit() or not 1 <= int(days) <= 3650:
        raise SystemExit(f"MSGSTORE_OPERATOR_CERT_VALIDITY_DAYS={days!r}: expected 1..3650")
    return SecurityDefaults(
        tls=flag("MSGSTORE_OPERATOR_TLS", True),
        network_policy=flag("MSGSTORE_OPERATOR_NETWORK_POLICY", True),
        restricted_pods=flag("MSGSTORE_OPERATOR_RESTRICTED_PODS", True),
        certificate_validity_days=int(days),
    )


SECURITY_DEFAULTS = security_defaults_from_env(os.environ)
OPERATOR_NAMESPACE = os.environ.get("MSGSTORE_OPERATOR_NAMESPACE") or None
CLAIM_GRACE_S = float(os.environ.get("MSGSTORE_OPERATOR_CLAIM_GRACE_S", "120"))
PREFIX = "msgstore.io"

log = logging.getLogger("msgstore_operator")


@dataclass
class OperatorState:
    """What the operator keeps between passes, in kopf's operator memo (``memo.state``; the
    per-store memos are shallow copies of it, so every handler sees the same object)."""

    kube: Kube
    # One pass at a time per store: the handlers and the status loop never interleave, and
    # each pass reads the store afresh under the lock, so a pass never applies a superseded
    # spec.
    pass_locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_success: dict[str, str] = field(default_factory=dict)
    last_warning: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    loop_task: asyncio.Task[None] | None = None

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


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        return body, _reconcile_body(state, body)


def _reconcile_body(state: OperatorState, body: dict[str, Any]) -> Outcome:
    k = state.kube
    try:
        outcome = reconcile(
            k,
            body,
            CLUSTER_DOMAIN,
            now_text(),
            DEFAULT_IMAGES,
            SECURITY_DEFAULTS,
            OPERATOR_NAMESPACE,
            CLAIM_GRACE_S,
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
    """Keep kopf's bookkeeping in our own annotations (the status schema is strict), and
    start the status loop."""
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
    state = OperatorState(await asyncio.to_thread(connect))
    memo.state = state
    state.loop_task = asyncio.create_task(status_loop(state, stores))


@kopf.on.cleanup()
async def stop_loop(memo: kopf.Memo, **_: Any) -> None:
    state: OperatorState | None = memo.get("state")
    if state is not None and state.loop_task is not None:
        state.loop_task.cancel()


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
    """Every INTERVAL_S: refresh every store of the index (one at a time, in a worker
    thread)."""
    while True:
        await asyncio.sleep(INTERVAL_S)
        known = list(stores)
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
