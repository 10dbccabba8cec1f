"""kopf wiring of MessageStoreUser: create, resume and update run one user pass; a deletion
(seen as a watch event, so no finalizer ever blocks deleting a user or its namespace)
re-renders the store's access document at once, which revokes the user. A loop repeats the
pass for every user of a kopf index every few seconds: certificates are renewed, a lost
Secret is issued again, a user whose store appears later gets its credential. The store's own
pass re-renders the document too, so a deletion missed while the operator was down is
revoked on its first pass.

Every pass of a user runs under its store's pass lock: the user's Secret, the store's access
document and the store's reconcile pass never interleave.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import kopf
import urllib3
from kubernetes.client.rest import ApiException

from . import API_VERSION, GROUP, KIND, USER_KIND, USER_PLURAL, VERSION
from .children import Owner
from .config import OperatorSettings
from .kube import Kube
from .status import changed_fields, now_text
from .users import AccessSync, UserOutcome, reconcile_user, sync_access

log = logging.getLogger("msgstore_operator.users")


class OperatorState(Protocol):
    """What these handlers use of ``handlers.OperatorState`` (kopf's operator memo)."""

    kube: Kube
    settings: OperatorSettings

    def pass_lock(self, namespace: str, name: str) -> threading.Lock: ...


class Retry(Exception):
    """A pass that failed on the API; the loop tries again on its next round."""


def _event(kube: Kube, body: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
    try:
        kube.post_event(dict(body), kind, reason, message, now_text())
    except (ApiException, urllib3.exceptions.HTTPError) as exc:  # events are best effort
        log.warning("could not post event %s: %s", reason, exc)


def _sync(state: OperatorState, owner: Owner) -> AccessSync:
    return sync_access(state.kube, owner, datetime.datetime.now(datetime.UTC))


def run_user_pass(
    state: OperatorState, namespace: str, name: str
) -> tuple[dict[str, Any], UserOutcome] | None:
    """One pass on the user as it is now (None when it is gone); posts its events."""
    try:
        body = state.kube.get(API_VERSION, USER_KIND, namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return None
        store = str((body.get("spec") or {}).get("store") or "")
        with state.pass_lock(namespace, store):
            body = state.kube.get(API_VERSION, USER_KIND, namespace, name)
            if body is None:
                return None
            outcome = reconcile_user(
                state.kube,
                body,
                now_text(),
                lambda owner: _sync(state, owner),
                state.settings.security,
            )
    except ApiException as exc:
        raise Retry(f"API error {exc.status} {exc.reason}: {exc.body}") from exc
    except urllib3.exceptions.HTTPError as exc:
        raise Retry(f"API server unreachable: {exc}") from exc
    for kind, reason, message in outcome.events:
        _event(state.kube, body, kind, reason, message)
    return body, outcome


def revoke(state: OperatorState, namespace: str, store: str) -> None:
    """Re-render a store's document after one of its users was deleted."""
    if not store:
        return
    try:
        with state.pass_lock(namespace, store):
            body = state.kube.get(API_VERSION, KIND, namespace, store)
            if body is None:
                return
            meta = body["metadata"]
            _sync(state, Owner(meta["name"], namespace, meta["uid"]))
    except (ApiException, urllib3.exceptions.HTTPError) as exc:  # the store pass retries
        log.warning("%s/%s: access document not re-rendered: %s", namespace, store, exc)


@kopf.index(GROUP, VERSION, USER_PLURAL)
def messagestoreusers(
    namespace: str | None, name: str | None, **_: Any
) -> dict[tuple[str, str], bool]:
    """Every MessageStoreUser the watch sees, for the user loop."""
    return {(namespace or "", name or ""): True}


@kopf.on.resume(GROUP, VERSION, USER_PLURAL)
@kopf.on.create(GROUP, VERSION, USER_PLURAL)
@kopf.on.update(GROUP, VERSION, USER_PLURAL)
def user_handler(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    """Issue or keep the credential and put the user into its store's access document."""
    namespace, name = body.metadata.namespace, body.metadata.name
    if namespace is None or name is None:
        raise kopf.PermanentError("the MessageStoreUser event has no namespace or name")
    try:
        result = run_user_pass(memo.state, namespace, name)
    except Retry as exc:
        raise kopf.TemporaryError(str(exc), delay=5) from exc
    if result is not None:
        fresh, outcome = result
        for key, value in changed_fields(fresh.get("status") or {}, outcome.status).items():
            patch.status[key] = value


def _deleted(event: kopf.RawEvent, **_: Any) -> bool:
    return event.get("type") == "DELETED"


@kopf.on.event(GROUP, VERSION, USER_PLURAL, when=_deleted)
def user_deleted(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    """A deleted user leaves its store's access document now (revocation)."""
    obj = event.get("object") or {}
    meta = obj.get("metadata") or {}
    state: OperatorState | None = memo.get("state")
    if state is not None:
        revoke(
            state, str(meta.get("namespace") or ""), str((obj.get("spec") or {}).get("store") or "")
        )


def refresh_user(state: OperatorState, namespace: str, name: str) -> None:
    try:
        result = run_user_pass(state, namespace, name)
    except Retry as exc:
        log.warning("%s/%s: %s", namespace, name, exc)
        return
    if result is None:
        return
    body, outcome = result
    fields = changed_fields(body.get("status") or {}, outcome.status)
    if fields:
        try:
            state.kube.patch_status(namespace, name, fields, plural=USER_PLURAL)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("%s/%s: status patch failed: %s", namespace, name, exc)


async def user_loop(state: OperatorState, users: kopf.Index[tuple[str, str], bool]) -> None:
    """Every ``interval_s``: a pass for every user of the index, one at a time."""
    while True:
        await asyncio.sleep(state.settings.interval_s)
        for namespace, name in list(users):
            try:
                await asyncio.to_thread(refresh_user, state, namespace, name)
            except Exception:  # keep the loop alive whatever one user does
                log.exception("user refresh failed")
