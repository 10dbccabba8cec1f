"""One reconcile pass: make the children match the spec and say what happened.

Idempotent by design: children whose applied hash matches are not touched, the routing
table keeps its generation when nothing changed, so running it again (after an operator
restart, on every status timer tick) sends no writes and posts no events.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.rest import ApiException

from . import ca_rotation, naming, routing
from .assignment import AssignmentError, assign_partitions, describe_blockers, effective_replicas
from .children import Owner, build_token_secret, desired_children
from .children import tls as tls_children
from .children.desired import ChildRef
from .kube import Kube
from .spec import SecurityDefaults, StoreSpec, parse_spec, replication_problem
from .status import (
    CLAIM_GRACE_S,
    DEGRADED,
    SCALE_DOWN_BLOCKED,
    Problem,
    claim_problems,
    compaction_problems,
    compute_health,
    parse_time,
    set_condition,
    statefulset_problems,
)


class SpecProblem(Exception):
    """The spec cannot be applied as it is; retrying will not help until it changes."""


class NotYet(Exception):
    """Something the spec refers to is missing; retry later."""


@dataclass
class Outcome:
    status: dict[str, Any]
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, reason, message)
    changed: list[str] = field(default_factory=list)
    spec: StoreSpec | None = None
    routing: dict[str, Any] = field(default_factory=dict)  # the published document


def owner_of(body: Mapping[str, Any]) -> Owner:
    """The store a MessageStore body names (its children's owner)."""
    meta = body["metadata"]
    return Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])


def _published(kube: Kube, owner: Owner) -> routing.PublishedTable | None:
    cm = kube.get("v1", "ConfigMap", owner.namespace, naming.routing_config_map_name(owner.name))
    text = ((cm or {}).get("data") or {}).get(naming.ROUTING_KEY)
    try:
        return routing.read_published(owner.name, text)
    except (ValueError, KeyError) as exc:
        raise SpecProblem(
            f"the routing table in ConfigMap {naming.routing_config_map_name(owner.name)} "
            f"is invalid ({exc}); fix it, or delete it to have partitions assigned afresh"
        ) from exc


def _check_secrets(kube: Kube, owner: Owner, spec: StoreSpec, outcome: Outcome) -> None:
    if spec.auth.enabled and not spec.auth.token_secret:
        token = secrets.token_urlsafe(32)
        secret = build_token_secret(owner, token, spec.auth.token_key)
        _, created = kube.create_if_missing(secret)
        if created:
            name = naming.token_secret_name(owner.name)
            outcome.events.append(("info", "TokenCreated", f"generated API token in Secret {name}"))
    needed = []
    if spec.auth.enabled and spec.auth.token_secret:
        needed.append(spec.auth.token_secret)
    if spec.tiering.enabled and spec.tiering.credentials_secret:
        needed.append(spec.tiering.credentials_secret)
    for name in needed:
        if kube.get("v1", "Secret", owner.namespace, name) is None:
            raise NotYet(f"Secret {name} named in the spec does not exist in {owner.namespace}")


def _ensure_tls(
    kube: Kube,
    owner: Owner,
    spec: StoreSpec,
    replicas: int,
    domain: str,
    now: str,
    outcome: Outcome,
) -> list[Problem]:
    """The CA, the node certificates (issued and renewed here) or the cert-manager
    Certificate, and the CA ConfigMap for clients. Returns problems to report."""
    if not spec.tls.enabled:
        return []
    moment = parse_time(now)
    assert moment is not None
    ns = owner.namespace
    if spec.tls.issuer_ref is not None:
        cert = tls_children.build_certificate(owner, spec, replicas, domain)
        try:
            _, sent = kube.apply(cert)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return [
                Problem(
                    "Certificate",
                    cert["metadata"]["name"],
                    "CertManagerMissing",
                    "spec.tls.issuerRef names a cert-manager issuer but the cluster has no "
                    "Certificate resource (cert-manager.io/v1): install cert-manager or remove "
                    "issuerRef to use the operator's own CA",
                )
            ]
        if sent:
            outcome.changed.append(f"Certificate/{cert['metadata']['name']}")
        secret_name = naming.certificate_secret_name(owner.name)
        ca_pem = tls_children.ca_from_certificate_secret(kube.get("v1", "Secret", ns, secret_name))
        if ca_pem is None:
            return [
                Problem(
                    "Certificate",
                    cert["metadata"]["name"],
                    "CertificateNotReady",
                    f"waiting for cert-manager to write Secret {secret_name} with ca.crt",
                )
            ]
    else:
        ca_name = naming.ca_secret_name(owner.name)
        live = kube.get("v1", "Secret", ns, ca_name)
        ca = tls_children.ca_from_secret(live)
        if ca is None:
            fresh = tls_children.new_store_ca(owner, moment)
            live, created = kube.create_if_missing(tls_children.build_ca_secret(owner, fresh))
            ca = tls_children.ca_from_secret(live)
            if ca is None:
                return [Problem("Secret", ca_name, "InvalidCA", "has no ca.crt and ca.key")]
            if created:
                outcome.events.append(
                    ("info", "CACreated", f"created the store's CA in Secret {ca_name}")
                )
        # a CA rotation asked for on the Secret: both CAs trusted meanwhile (ca_rotation.py)
        rotation = ca_rotation.step(
            kube, owner, spec, replicas, domain, live or {}, ca, moment, outcome.events
        )
        certs_name = naming.node_certs_secret_name(owner.name)
        live_certs = kube.get("v1", "Secret", ns, certs_name)
        plan = tls_children.plan_node_certs(
            owner,
            spec,
            replicas,
            domain,
            rotation.issuing(),
            (live_certs or {}).get("data") or {},
            moment,
        )
        if plan.changed or live_certs is None:
            kube.apply(tls_children.build_node_certs_secret(owner, plan.data))
            outcome.changed.append(f"Secret/{certs_name}")
            issued = [f"{pod} ({why})" for pod, why in plan.issued if why != "removed"]
            if issued:
                outcome.events.append(
                    ("info", "CertificatesIssued", "issued node certificates: " + ", ".join(issued))
                )
        ca_pem = rotation.bundle()
    _, sent = kube.apply(tls_children.build_ca_config_map(owner, ca_pem))
    if sent:
        outcome.changed.append(f"ConfigMap/{naming.ca_config_map_name(owner.name)}")
    return []


def _observe(
    kube: Kube, owner: Owner, spec: StoreSpec, now: str, claim_grace_s: float
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[Problem]]:
    """Read the StatefulSet, pods, claims, events and compaction Jobs; the problems found."""
    ns, name = owner.namespace, naming.statefulset_name(owner.name)
    sts = kube.get("apps/v1", "StatefulSet", ns, name)
    selector = naming.label_selector_string(owner.name)
    pods = kube.list("v1", "Pod", ns, selector)
    sts_events = kube.list(
        "v1",
        "Event",
        ns,
        field_selector=f"involvedObject.kind=StatefulSet,involvedObject.name={name}",
    )
    claims = [
        c
        for c in kube.list("v1", "PersistentVolumeClaim", ns, selector)
        if (c.get("metadata") or {}).get("name", "").startswith(f"{naming.DATA_VOLUME}-{name}-")
    ]
    claim_events = (
        kube.list("v1", "Event", ns, field_selector="involvedObject.kind=PersistentVolumeClaim")
        if any((c.get("status") or {}).get("phase") != "Bound" for c in claims)
        else []
    )
    moment = parse_time(now)
    assert moment is not None
    problems = statefulset_problems(sts, sts_events)
    problems += claim_problems(claims, claim_events, moment, claim_grace_s)
    if spec.compaction.mode == "spark":
        jobs = kube.list(
            "batch/v1",
            "Job",
            ns,
            f"app.kubernetes.io/instance={owner.name},app.kubernetes.io/component=compaction",
        )
        problems += compaction_problems(jobs)
    return sts, pods, problems


def _owned_by(obj: Mapping[str, Any], owner: Owner) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner.uid for ref in refs)


def _check_replication_change(spec: StoreSpec, published: routing.PublishedTable | None) -> None:
    """A published store keeps its replication factor, and a replicated one its node count:
    moving logs between pods is not built (a new store with the wanted shape is the way)."""
    if published is None:
        return
    factor = int((published.document.get("replication") or {}).get("factor", 1))
    if factor != spec.replication_factor:
        raise SpecProblem(
            f"replicationFactor cannot change on a published store (it is {factor}); "
            "create a new MessageStore to change it"
        )
    if factor > 1 and spec.replicas != published.node_count:
        raise SpecProblem(
            f"a replicated store keeps its {published.node_count} nodes: "
            "changing the node count of replicated logs is not supported"
        )


def reconcile(
    kube: Kube,
    body: Mapping[str, Any],
    domain: str,
    now: str,
    default_images: tuple[str | None, str | None] = (None, None),
    defaults: SecurityDefaults | None = None,
    operator_namespace: str | None = None,
    claim_grace_s: float = CLAIM_GRACE_S,
) -> Outcome:
    """Apply the children of ``body``; ``default_images`` are the node and Spark images used
    when the spec names none, ``defaults`` the operator's TLS/NetworkPolicy/Pod Security
    defaults, ``operator_namespace`` lets the operator's pods through the NetworkPolicy."""
    owner = owner_of(body)
    spec = parse_spec(body.get("spec"), *default_images, defaults=defaults)
    problem = replication_problem(spec)
    if problem is not None:
        raise SpecProblem(problem)
    generation = int(body["metadata"].get("generation") or 1)
    old_status = dict(body.get("status") or {})
    outcome = Outcome(status={}, spec=spec)

    published = _published(kube, owner)
    _check_replication_change(spec, published)
    existing = published.owners if published else {}
    current = published.node_count if published else None
    replicas, blockers = effective_replicas(spec.replicas, current, existing)
    try:
        owners = assign_partitions(spec.topics, replicas, existing)
    except AssignmentError as exc:
        raise SpecProblem(str(exc)) from exc
    previous_topics = (published.document.get("topics") if published else None) or {}
    previous_logs = (published.document.get("logs") if published else None) or {}
    doc = routing.build_routing_document(
        owner.name, owner.namespace, spec, replicas, owners, 0, domain, previous_topics,
        previous_logs,
    )  # fmt: skip
    doc = routing.with_generation(doc, published)
    outcome.routing = doc

    _check_secrets(kube, owner, spec, outcome)
    tls_problems = _ensure_tls(kube, owner, spec, replicas, domain, now, outcome)
    desired = desired_children(
        owner, spec, replicas, routing.dumps(doc), domain, operator_namespace
    )
    if spec.tls.issuer_ref is None:
        desired.absent.append(
            ChildRef("cert-manager.io/v1", "Certificate", naming.certificate_name(owner.name))
        )
    for obj in desired.objects:
        _, sent = kube.apply(obj)
        if sent:
            outcome.changed.append(f"{obj['kind']}/{obj['metadata']['name']}")
    for ref in desired.absent:
        try:
            live = kube.get(ref.api_version, ref.kind, owner.namespace, ref.name)
        except ApiException as exc:  # e.g. no cert-manager: nothing of that kind exists
            if exc.status in (403, 404):
                continue
            raise
        if live is not None and _owned_by(live, owner):
            kube.delete(ref.api_version, ref.kind, owner.namespace, ref.name)
            outcome.changed.append(f"-{ref.kind}/{ref.name}")
    if outcome.changed:
        outcome.events.append(("info", "Applied", "applied " + ", ".join(outcome.changed)))
    if published is None or published.generation != doc["generation"]:
        outcome.events.append(
            (
                "info",
                "RoutingPublished",
                f"routing table generation {doc['generation']}: {replicas} nodes, "
                f"{sum(len(p) for p in owners.values())} partitions in {len(owners)} topics",
            )
        )

    conditions = list(old_status.get("conditions") or [])
    was_blocked = any(
        c.get("type") == SCALE_DOWN_BLOCKED and c.get("status") == "True" for c in conditions
    )
    if blockers:
        message = (
            f"cannot scale down to {spec.replicas} nodes: "
            f"{describe_blockers(blockers, lambda n: naming.pod_name(owner.name, n))}; "
            f"staying at {replicas}"
        )
        conditions = set_condition(
            conditions, SCALE_DOWN_BLOCKED, True, "PartitionsOwned", message, now, generation
        )
        if not was_blocked:
            outcome.events.append(("warning", "ScaleDownBlocked", message))
    else:
        conditions = set_condition(
            conditions, SCALE_DOWN_BLOCKED, False, "NotBlocked", "no scale-down is pending", now
        )
    sts, pods, problems = _observe(kube, owner, spec, now, claim_grace_s)
    problems = tls_problems + problems
    health = compute_health(sts, pods, generation, generation, conditions, now, problems)
    _report_new_problems(old_status, health, outcome)
    outcome.status = {
        **health,
        "observedGeneration": generation,
        "labelSelector": naming.label_selector_string(owner.name),
        "routingConfigMap": naming.routing_config_map_name(owner.name),
        "routingGeneration": doc["generation"],
        "configHash": desired.config_hash,
        "endpoints": {
            "service": naming.service_address(
                owner.name, owner.namespace, spec.port, domain, spec.scheme
            ),
            "nodes": [node["address"] for node in doc["nodes"]],
        },
        "security": {
            "tls": spec.tls.enabled,
            "caConfigMap": naming.ca_config_map_name(owner.name) if spec.tls.enabled else "",
            "networkPolicy": spec.network_policy.enabled,
            "clientLabel": f"{naming.CLIENT_LABEL}={owner.name}",
        },
    }
    return outcome


def _report_new_problems(
    old_status: Mapping[str, Any], health: Mapping[str, Any], outcome: Outcome
) -> None:
    """A Warning event whenever Degraded turns true or says something new (a status pass
    repeats every few seconds; an unchanged problem is not posted again)."""

    def degraded(conditions: Any) -> Mapping[str, Any]:
        for cond in conditions or []:
            if cond.get("type") == DEGRADED and cond.get("status") == "True":
                return cond
        return {}

    new = degraded(health.get("conditions"))
    if new and new.get("message") != degraded(old_status.get("conditions")).get("message"):
        outcome.events.append(
            ("warning", str(new.get("reason", "Degraded")), str(new.get("message", "")))
        )
