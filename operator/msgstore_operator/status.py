"""Status of a MessageStore computed from its StatefulSet, pods, claims, events and Jobs
(pure functions).

Readiness comes from the pods' own Ready condition as the kubelet reports it; the operator
never calls the nodes, so it works the same whether it runs inside or outside the cluster.

A failure is never hidden: each rule below turns one kind of failure into a ``Problem``
naming the object, the reason and the message (pods that cannot be created, claims that
stay Pending, pods in a crash loop or with image problems, a failed compaction Job, TLS
material that cannot be issued); any problem sets ``Degraded=True`` with the first one's
reason and every problem's text, and the operator posts the same as Events.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
    "ErrImageNeverPull",
    "PreCreateHookError",
    "PreStartHookError",
}
# Claims may stay Pending this long (provisioning takes a moment) before it is a problem.
CLAIM_GRACE_S = 120.0


@dataclass(frozen=True)
class Problem:
    """One failure, named: ``StatefulSet orders: FailedCreate: pods "orders-0" is forbidden...``"""

    kind: str
    name: str
    reason: str
    message: str

    def text(self) -> str:
        message = " ".join(self.message.split())
        return f"{self.kind} {self.name}: {self.reason}: {message}"[:600]


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        value = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)


def event_time(event: Mapping[str, Any]) -> datetime.datetime:
    """When an event (core/v1, possibly a series) was last seen."""
    series = event.get("series") or {}
    for text in (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        found = parse_time(text)
        if found is not None:
            return found
    return datetime.datetime.min.replace(tzinfo=datetime.UTC)


def _events_about(
    events: Sequence[Mapping[str, Any]], kind: str, name: str
) -> list[Mapping[str, Any]]:
    found = [
        e
        for e in events
        if (e.get("involvedObject") or {}).get("kind") == kind
        and (e.get("involvedObject") or {}).get("name") == name
    ]
    return sorted(found, key=event_time)


def statefulset_problems(
    sts: Mapping[str, Any] | None, events: Sequence[Mapping[str, Any]]
) -> list[Problem]:
    """Pods the StatefulSet controller cannot create (admission, quota, a bad template...).

    The controller reports them as FailedCreate events (and a ReplicaFailure condition on
    versions that set one). A FailedCreate counts while pods are missing and no pod was
    created since: a later SuccessfulCreate means the cause went away.
    """
    if sts is None:
        return []
    name = (sts.get("metadata") or {}).get("name", "?")
    problems = []
    for cond in (sts.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            problems.append(
                Problem(
                    "StatefulSet",
                    name,
                    cond.get("reason") or "ReplicaFailure",
                    cond.get("message") or "",
                )
            )
    want = int((sts.get("spec") or {}).get("replicas", 1))
    have = int((sts.get("status") or {}).get("replicas") or 0)
    if have < want and not problems:
        creations = [
            e
            for e in _events_about(events, "StatefulSet", name)
            if e.get("reason") in ("FailedCreate", "SuccessfulCreate")
        ]
        if creations and creations[-1].get("reason") == "FailedCreate":
            last = creations[-1]
            problems.append(
                Problem("StatefulSet", name, "FailedCreate", str(last.get("message") or ""))
            )
    return problems


def claim_problems(
    claims: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    now: datetime.datetime,
    grace_s: float = CLAIM_GRACE_S,
) -> list[Problem]:
    """Volume claims Pending past the grace period (naming their StorageClass), or Lost."""
    problems = []
    for claim in claims:
        meta = claim.get("metadata") or {}
        name = meta.get("name", "?")
        phase = (claim.get("status") or {}).get("phase")
        if phase == "Lost":
            problems.append(
                Problem("PersistentVolumeClaim", name, "ClaimLost", "its volume is gone")
            )
            continue
        if phase != "Pending" or meta.get("deletionTimestamp"):
            continue
        created = parse_time(meta.get("creationTimestamp")) or now
        age = (now - created).total_seconds()
        if age < grace_s:
            continue
        cls = (claim.get("spec") or {}).get("storageClassName")
        where = (
            f"StorageClass {cls!r}"
            if cls
            else "no StorageClass (none named and the cluster has no default)"
        )
        message = f"Pending for {int(age)}s with {where}"
        about = [e for e in _events_about(events, "PersistentVolumeClaim", name)]
        if about:
            last = about[-1]
            message += f"; last event {last.get('reason')}: {last.get('message', '')}"
        problems.append(Problem("PersistentVolumeClaim", name, "ClaimPending", message))
    return problems


def compaction_problems(jobs: Sequence[Mapping[str, Any]]) -> list[Problem]:
    """The compaction CronJob's most recent Job failed (an older failure was superseded)."""
    if not jobs:
        return []
    latest = max(
        jobs,
        key=lambda j: (
            parse_time((j.get("metadata") or {}).get("creationTimestamp"))
            or datetime.datetime.min.replace(tzinfo=datetime.UTC),
            (j.get("metadata") or {}).get("name", ""),
        ),
    )
    for cond in (latest.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            reason = cond.get("reason") or "Failed"
            return [
                Problem(
                    "Job",
                    (latest.get("metadata") or {}).get("name", "?"),
                    "CompactionJobFailed",
                    f"{reason}: {cond.get('message') or 'the compaction job failed'}",
                )
            ]
    return []


def _conditions_of(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}


def pod_ready(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return (_conditions_of(pod).get("Ready") or {}).get("status") == "True"


def pod_problem_of(pod: Mapping[str, Any]) -> Problem | None:
    """Why a pod is stuck, or None when it is fine or merely starting."""
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return Problem(
            "Pod",
            name,
            status.get("reason") or "Failed",
            status.get("message") or "the pod failed",
        )
    scheduled = _conditions_of(pod).get("PodScheduled") or {}
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return Problem(
            "Pod", name, "Unschedulable", f"cannot be scheduled: {scheduled.get('message', '')}"
        )
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in BAD_WAITING_REASONS:
            detail = waiting.get("message") or ""
            return Problem(
                "Pod",
                name,
                waiting["reason"],
                f"container {cs.get('name')}" + (f": {detail}" if detail else ""),
            )
    return None


def pod_problem(pod: Mapping[str, Any]) -> str | None:
    """``pod_problem_of`` as text."""
    problem = pod_problem_of(pod)
    return problem.text() if problem else None


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
    cond: dict[str, Any] = {
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
    other_problems: Sequence[Problem] = (),
) -> dict[str, Any]:
    """phase, replicas, readyReplicas and the Ready/Progressing/Degraded conditions.

    ``other_problems`` come from the rules above (StatefulSet, claims, Jobs, TLS); pod
    problems are found here."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    ready = sum(1 for p in live if pod_ready(p))
    found = list(other_problems) + [p for p in (pod_problem_of(p) for p in live) if p]
    problems = [p.text() for p in found]
    if sts is None:
        want, complete, replicas, updated = None, False, 0, 0
    else:
        want = int((sts.get("spec") or {}).get("replicas", 1))
        complete = rollout_complete(sts)
        replicas = int((sts.get("status") or {}).get("replicas") or 0)
        updated = int((sts.get("status") or {}).get("updatedReplicas") or 0)
    reconciled = observed_generation == generation
    all_ready = want is not None and complete and reconciled and ready == want
    conds: Sequence[Mapping[str, Any]] = conditions
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
            why = f"rolling out: {updated}/{want} nodes updated"
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
            conds, DEGRADED, True, found[0].reason, "; ".join(problems[:5]), now, generation
        )
    else:
        conds = set_condition(
            conds,
            DEGRADED,
            False,
            "NoProblems",
            "no pod, claim, StatefulSet or Job reports a problem",
            now,
            generation,
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
