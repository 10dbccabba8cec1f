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

from . import naming, routing
from .assignment import AssignmentError, assign_partitions, describe_blockers, effective_replicas
from .children import Owner, build_token_secret, desired_children
from .kube import Kube
from .spec import StoreSpec, parse_spec
from .status import SCALE_DOWN_BLOCKED, compute_health, set_condition


class SpecProblem(Exception):
    """The spec cannot be applied as it is; retrying will not help until it changes."""


class NotYet(Exception):
    """Something the spec refers to is missing; retry later."""


@dataclass
class Outcome:
    status: dict[str, Any]
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, reason, message)
    changed: list[str] = field(default_factory=list)


def _owner(body: Mapping[str, Any]) -> Owner:
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


def _owned_by(obj: Mapping[str, Any], owner: Owner) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner.uid for ref in refs)


def reconcile(
    kube: Kube,
    body: Mapping[str, Any],
    domain: str,
    now: str,
    default_images: tuple[str | None, str | None] = (None, None),
) -> Outcome:
    """Apply the children of ``body``; ``default_images`` are the node and Spark images used
    when the spec names none."""
    owner = _owner(body)
    spec = parse_spec(body.get("spec"), *default_images)
    generation = int(body["metadata"].get("generation") or 1)
    old_status = dict(body.get("status") or {})
    outcome = Outcome(status={})

    published = _published(kube, owner)
    existing = published.owners if published else {}
    current = published.node_count if published else None
    replicas, blockers = effective_replicas(spec.replicas, current, existing)
    try:
        owners = assign_partitions(spec.topics, replicas, existing)
    except AssignmentError as exc:
        raise SpecProblem(str(exc)) from exc
    previous_topics = (published.document.get("topics") if published else None) or {}
    doc = routing.build_routing_document(
        owner.name, owner.namespace, spec, replicas, owners, 0, domain, previous_topics
    )
    doc = routing.with_generation(doc, published)

    _check_secrets(kube, owner, spec, outcome)
    desired = desired_children(owner, spec, replicas, routing.dumps(doc), domain)
    for obj in desired.objects:
        _, sent = kube.apply(obj)
        if sent:
            outcome.changed.append(f"{obj['kind']}/{obj['metadata']['name']}")
    for ref in desired.absent:
        live = kube.get(ref.api_version, ref.kind, owner.namespace, ref.name)
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
    sts = kube.get("apps/v1", "StatefulSet", owner.namespace, naming.statefulset_name(owner.name))
    pods = kube.list("v1", "Pod", owner.namespace, naming.label_selector_string(owner.name))
    health = compute_health(sts, pods, generation, generation, conditions, now)
    outcome.status = {
        **health,
        "observedGeneration": generation,
        "labelSelector": naming.label_selector_string(owner.name),
        "routingConfigMap": naming.routing_config_map_name(owner.name),
        "routingGeneration": doc["generation"],
        "configHash": desired.config_hash,
        "endpoints": {
            "service": naming.service_address(owner.name, owner.namespace, spec.port, domain),
            "nodes": [node["address"] for node in doc["nodes"]],
        },
    }
    return outcome
