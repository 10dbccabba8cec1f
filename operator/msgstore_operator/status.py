"""Status of a MessageStore computed from its StatefulSet and pods (pure functions).

Readiness comes from the pods' own Ready condition as the kubelet reports it; the operator
never calls the nodes, so it works the same whether it runs inside or outside the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
SCALE_DOWN_BLOCKED = "ScaleDownBlocked"
CONDITION_TYPES = (READY, PROGRESSING, DEGRADED, SCALE_DOWN_BLOCKED)

# Container states that will not fix themselves without a change to the spec or the cluster.
BAD_WAITING_REASONS = {
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
}


def _conditions_of(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}


def pod_ready(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return (_conditions_of(pod).get("Ready") or {}).get("status") == "True"


def pod_problem(pod: Mapping[str, Any]) -> str | None:
    """Why a pod is stuck, in words, or None when it is fine or merely starting."""
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return f"pod {name} failed: {status.get('reason') or status.get('message') or 'unknown'}"
    scheduled = _conditions_of(pod).get("PodScheduled") or {}
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return f"pod {name} cannot be scheduled: {scheduled.get('message', '')}".rstrip(": ")
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in BAD_WAITING_REASONS:
            return f"pod {name}: container {cs.get('name')} {waiting['reason']}"
    return None


def rollout_complete(sts: Mapping[str, Any]) -> bool:
    """The StatefulSet controller has seen the latest template and every pod runs it."""
    meta, spec, st = sts.get("metadata") or {}, sts.get("spec") or {}, sts.get("status") or {}
    replicas = int(spec.get("replicas", 1))
    return (
        st.get("observedGeneration") == meta.get("generation")
        and int(st.get("updatedReplicas") or 0) == replicas
        and int(st.get("replicas") or 0) == replicas
        and (not st.get("updateRevision") or st.get("currentRevision") == st.get("updateRevision"))
    )


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    ctype: str,
    status: bool,
    reason: str,
    message: str,
    now: str,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """Return conditions with ``ctype`` set; lastTransitionTime moves only when status flips."""
    text = "True" if status else "False"
    result: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") != ctype:
            result.append(dict(cond))
            continue
        found = True
        since = cond.get("lastTransitionTime") if cond.get("status") == text else now
        result.append(_condition(ctype, text, reason, message, since or now, generation))
    if not found:
        result.append(_condition(ctype, text, reason, message, now, generation))
    order = {t: i for i, t in enumerate(CONDITION_TYPES)}
    return sorted(result, key=lambda c: order.get(c.get("type", ""), len(order)))


def _condition(
    ctype: str, status: str, reason: str, message: str, since: str, generation: int | None
) -> dict[str, Any]:
    cond = {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def compute_health(
    sts: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    generation: int,
    observed_generation: int | None,
    conditions: Sequence[Mapping[str, Any]],
    now: str,
) -> dict[str, Any]:
    """phase, replicas, readyReplicas and the Ready/Progressing/Degraded conditions."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    ready = sum(1 for p in live if pod_ready(p))
    problems = [msg for msg in (pod_problem(p) for p in live) if msg]
    if sts is None:
        want, complete, replicas = None, False, 0
    else:
        want = int((sts.get("spec") or {}).get("replicas", 1))
        complete = rollout_complete(sts)
        replicas = int((sts.get("status") or {}).get("replicas") or 0)
    reconciled = observed_generation == generation
    all_ready = want is not None and complete and reconciled and ready == want
    conds = list(conditions)
    if all_ready:
        conds = set_condition(
            conds, READY, True, "AllNodesReady", f"{ready}/{want} nodes ready", now, generation
        )
        conds = set_condition(
            conds,
            PROGRESSING,
            False,
            "Complete",
            "every node runs the latest spec",
            now,
            generation,
        )
    else:
        if want is None:
            why = "the StatefulSet does not exist yet"
        elif not reconciled:
            why = f"generation {generation} is being applied"
        elif not complete:
            why = f"rolling out: {int((sts.get('status') or {}).get('updatedReplicas') or 0)}/{want} nodes updated"
        else:
            why = f"{ready}/{want} nodes ready"
        conds = set_condition(conds, READY, False, "NodesNotReady", why, now, generation)
        conds = set_condition(
            conds,
            PROGRESSING,
            not problems,
            "Reconciling" if not problems else "Stuck",
            why,
            now,
            generation,
        )
    if problems:
        conds = set_condition(
            conds, DEGRADED, True, "PodProblems", "; ".join(problems[:5]), now, generation
        )
    else:
        conds = set_condition(
            conds, DEGRADED, False, "NoProblems", "no pod reports a problem", now, generation
        )
    if problems:
        phase = "Degraded"
    elif all_ready:
        phase = "Ready"
    elif sts is None:
        phase = "Pending"
    else:
        phase = "Progressing"
    return {"phase": phase, "replicas": replicas, "readyReplicas": ready, "conditions": conds}


def changed_fields(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """Only the status fields that differ, so an unchanged status sends no patch."""
    return {k: v for k, v in wanted.items() if current.get(k) != v}
