"""One pass for a MessageStoreUser, and the store's access document kept equal to its users.

``reconcile_user`` issues or keeps the user's credential Secret; ``sync_access`` renders the
document from every user of the store and writes ``<store>-access`` only when it says
something new (generation + 1). The store's own reconcile pass calls ``sync_access`` too, so
a user deleted while the operator was down is revoked on its first pass.

Getting a change to the nodes quickly: the kubelet refreshes a mounted Secret when it syncs
the pod, which it does on its own only every ``syncFrequency`` (one minute by default), but
also at once whenever the pod object changes. After writing a new document the operator
therefore sets annotation ``msgstore.io/access-generation`` on every node pod; the kubelet
then rewrites the mounted file within seconds and the node re-reads it (docs/SECURITY.md,
"Revocation").
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.rest import ApiException

from . import API_VERSION, KIND, USER_KIND, naming
from .children import Owner
from .children import tls as tls_children
from .children.users import (
    UserOwner,
    build_access_secret,
    build_user_secret,
    live_document,
    next_generation,
    owned_by,
    plan_credentials,
    render_access,
    with_generation,
)
from .kube import Kube
from .spec import SecurityDefaults, StoreSpec, parse_spec
from .status import READY, parse_time, set_condition
from .user_spec import Authentication, UserSpec, UserSpecProblem, parse_user

log = logging.getLogger("msgstore_operator.users")


@dataclass(frozen=True)
class AccessSync:
    generation: int
    users: tuple[str, ...]  # the users the document holds
    changed: bool


def _store_users(kube: Kube, owner: Owner) -> list[tuple[UserSpec, Mapping[str, Any] | None]]:
    """Every user of the store with a usable spec, paired with its own Secret (or None).

    One GET per user: the operator may not list Secrets (it reads only its own)."""
    pairs: list[tuple[UserSpec, Mapping[str, Any] | None]] = []
    for body in kube.list(API_VERSION, USER_KIND, owner.namespace):
        meta = body.get("metadata") or {}
        if (body.get("spec") or {}).get("store") != owner.name or meta.get("deletionTimestamp"):
            continue
        try:
            spec = parse_user(body)
        except UserSpecProblem:
            continue
        secret = kube.get("v1", "Secret", owner.namespace, naming.user_secret_name(spec.name))
        # Only a Secret the user owns counts: one merely named so proves nothing.
        pairs.append((spec, secret if owned_by(secret, meta.get("uid", "")) else None))
    return pairs


def sync_access(kube: Kube, owner: Owner, now: datetime.datetime) -> AccessSync:
    """Write the store's access document if it changed; nudge the node pods when it did."""
    doc, names = render_access(_store_users(kube, owner))
    name = naming.access_secret_name(owner.name)
    current = live_document(kube.get("v1", "Secret", owner.namespace, name))
    generation = next_generation(current, doc, int(now.timestamp()))
    if generation is None:
        assert current is not None
        return AccessSync(current.generation, tuple(names), False)
    kube.apply(build_access_secret(owner, with_generation(doc, generation)))
    log.info(
        "%s/%s: access document generation %d: %d users",
        owner.namespace,
        owner.name,
        generation,
        len(names),
    )
    _nudge_pods(kube, owner, generation)
    return AccessSync(generation, tuple(names), True)


def _nudge_pods(kube: Kube, owner: Owner, generation: int) -> None:
    """Annotate every node pod so its kubelet refreshes the mounted document now."""
    body = {"metadata": {"annotations": {naming.ACCESS_GENERATION_ANNOTATION: str(generation)}}}
    pods = kube.list("v1", "Pod", owner.namespace, naming.label_selector_string(owner.name))
    for pod in pods:
        pod_name = pod["metadata"]["name"]
        try:
            kube.merge_patch("v1", "Pod", owner.namespace, pod_name, body)
        except ApiException as exc:  # the kubelet's own sync still brings it, later
            log.warning("%s/%s: could not annotate pod: %s", owner.namespace, pod_name, exc)


@dataclass
class UserOutcome:
    status: dict[str, Any]
    store: str = ""
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


class _NotReady(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _status(
    body: Mapping[str, Any], ready: bool, reason: str, message: str, now: str, **extra: Any
) -> dict[str, Any]:
    generation = int((body.get("metadata") or {}).get("generation") or 1)
    old = body.get("status") or {}
    conditions = set_condition(
        old.get("conditions") or [], READY, ready, reason, message, now, generation
    )
    return {
        "observedGeneration": generation,
        "secret": extra.get("secret", ""),
        "accessGeneration": extra.get("access_generation", 0),
        "conditions": conditions,
    }


def _store_ca(kube: Kube, namespace: str, store: str, spec: StoreSpec) -> tuple[bytes | None, Any]:
    """(what clients verify the nodes with: the CA ConfigMap, both CAs during a rotation;
    the operator's own CA with its key, which signs tls users, or None)."""
    if not spec.tls.enabled:
        return None, None
    cm = kube.get("v1", "ConfigMap", namespace, naming.ca_config_map_name(store))
    pem = ((cm or {}).get("data") or {}).get(naming.CA_KEY)
    if spec.tls.issuer_ref is not None:
        return (pem.encode() if pem else None), None
    ca = tls_children.ca_from_secret(
        kube.get("v1", "Secret", namespace, naming.ca_secret_name(store))
    )
    return (pem.encode() if pem and ca else None), ca


def _credentials(
    kube: Kube,
    body: Mapping[str, Any],
    spec: UserSpec,
    store_body: Mapping[str, Any],
    defaults: SecurityDefaults | None,
    now: str,
    outcome: UserOutcome,
) -> StoreSpec:
    """Issue or keep the user's Secret; raises _NotReady naming what is missing."""
    meta = body["metadata"]
    owner = UserOwner(meta["name"], meta["namespace"], meta["uid"])
    store_spec = parse_spec(store_body.get("spec"), defaults=defaults)
    ca_pem, ca = _store_ca(kube, owner.namespace, spec.store, store_spec)
    if spec.authentication is Authentication.TLS:
        if not store_spec.tls.enabled:
            raise _NotReady(
                "TlsDisabled", f"MessageStore {spec.store} serves no TLS: a tls user needs it"
            )
        if store_spec.tls.issuer_ref is not None:
            raise _NotReady(
                "TlsUnsupported",
                f"MessageStore {spec.store} takes its certificates from cert-manager; the "
                "operator signs tls users only with its own CA (use a token user)",
            )
    if store_spec.tls.enabled and ca_pem is None:
        raise _NotReady("WaitingForCA", f"the CA of MessageStore {spec.store} is not issued yet")
    moment = parse_time(now)
    assert moment is not None
    live = kube.get("v1", "Secret", owner.namespace, naming.user_secret_name(owner.name))
    rotate = str((meta.get("annotations") or {}).get(naming.ROTATE_ANNOTATION, ""))
    validity = datetime.timedelta(days=store_spec.tls.certificate_validity_days)
    plan = plan_credentials(spec, rotate, live, ca_pem, ca, validity, moment)
    _, sent = kube.apply(build_user_secret(owner, spec.store, plan))
    if plan.issued:
        outcome.events.append(
            ("Normal", "CredentialIssued", f"{spec.authentication.value} credential in "
             f"Secret {owner.name} ({plan.issued})")
        )  # fmt: skip
    elif sent:
        outcome.events.append(("Normal", "SecretUpdated", f"Secret {owner.name} updated"))
    return store_spec


def reconcile_user(
    kube: Kube,
    body: Mapping[str, Any],
    now: str,
    sync: Callable[[Owner], AccessSync],
    defaults: SecurityDefaults | None = None,
) -> UserOutcome:
    """One pass for one user; ``sync`` writes its store's access document (under the
    store's lock) and says which users it holds."""
    meta = body["metadata"]
    ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
    outcome = UserOutcome(status={}, store=str((body.get("spec") or {}).get("store") or ""))
    secret = naming.user_secret_name(name)
    try:
        spec = parse_user(body)
        live = kube.get("v1", "Secret", ns, secret)
        if live is not None and not owned_by(live, uid):
            raise _NotReady(
                "SecretConflict",
                f"Secret {secret} already exists and does not belong to this user; "
                "rename the user or remove that Secret",
            )
        store_body = kube.get(API_VERSION, KIND, ns, spec.store)
        if store_body is None or (store_body.get("metadata") or {}).get("deletionTimestamp"):
            # A Secret issued earlier stays (no store, no access document: it opens nothing).
            raise _NotReady(
                "StoreNotFound",
                f"MessageStore {spec.store} does not exist in namespace {ns}; the credential "
                "is issued once it does",
            )
        store_spec = _credentials(kube, body, spec, store_body, defaults, now, outcome)
        store_meta = store_body["metadata"]
        synced = sync(Owner(store_meta["name"], ns, store_meta["uid"]))
    except UserSpecProblem as exc:
        outcome.status = _status(body, False, "InvalidSpec", str(exc), now)
        return outcome
    except _NotReady as exc:
        outcome.status = _status(body, False, exc.reason, str(exc), now)
        return outcome
    extra = {"secret": secret, "access_generation": synced.generation}
    if name not in synced.users:
        outcome.status = _status(
            body, False, "NotInAccessDocument",
            f"the access document of {spec.store} does not hold this user (is its token "
            "shared with another user?)", now, **extra,
        )  # fmt: skip
    elif not store_spec.auth.enabled:
        outcome.status = _status(
            body, False, "StoreAuthDisabled",
            f"MessageStore {spec.store} has spec.auth.enabled false: it lets every client do "
            "everything, so these rules restrict nobody", now, **extra,
        )  # fmt: skip
    else:
        outcome.status = _status(
            body, True, "Ready",
            f"credential in Secret {secret}; rules in effect from access document generation "
            f"{synced.generation} of {spec.store}", now, **extra,
        )  # fmt: skip
    return outcome
