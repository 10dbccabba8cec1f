"""Status never hides a failure: one rule per failure kind, each naming object and reason."""

from __future__ import annotations

import datetime

from msgstore_operator.status import (
    Problem,
    claim_problems,
    compaction_problems,
    compute_health,
    pod_problem_of,
    statefulset_problems,
)

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.UTC)
T = "2026-11-24T12:00:00Z"
FORBIDDEN = (
    'create Pod orders-0 in StatefulSet orders failed error: pods "orders-0" is forbidden: '
    'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false'
)


def at(seconds_ago):
    return (NOW - datetime.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def sts(replicas=3, created=0, conditions=None):
    return {
        "metadata": {"name": "orders", "generation": 1},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": 1, "replicas": created, "conditions": conditions or []},
    }


def event(reason, message, seconds_ago, kind="StatefulSet", name="orders", **extra):
    return {
        "involvedObject": {"kind": kind, "name": name},
        "reason": reason,
        "message": message,
        "type": "Warning" if reason.startswith("Failed") else "Normal",
        "lastTimestamp": at(seconds_ago),
        **extra,
    }


def conds(result):
    return {c["type"]: c for c in result["conditions"]}


def test_failed_create_names_the_statefulset_and_the_admission_message():
    problems = statefulset_problems(sts(), [event("FailedCreate", FORBIDDEN, 5)])
    assert problems == [Problem("StatefulSet", "orders", "FailedCreate", FORBIDDEN)]
    result = compute_health(sts(), [], 1, 1, [], T, problems)
    degraded = conds(result)["Degraded"]
    assert result["phase"] == "Degraded" and degraded["status"] == "True"
    assert degraded["reason"] == "FailedCreate"
    assert "StatefulSet orders" in degraded["message"] and "PodSecurity" in degraded["message"]
    assert conds(result)["Progressing"]["reason"] == "Stuck"


def test_quota_failure_and_a_later_success():
    quota = 'pods "orders-2" is forbidden: exceeded quota: pods, requested: pods=1, limited: pods=0'
    events = [event("SuccessfulCreate", "create Pod orders-0", 60), event("FailedCreate", quota, 5)]
    (problem,) = statefulset_problems(sts(created=2), events)
    assert "exceeded quota" in problem.message
    # The cause went away: a pod was created after the last failure.
    events.append(event("SuccessfulCreate", "create Pod orders-2", 1))
    assert statefulset_problems(sts(created=2), events) == []
    # All pods exist: an old FailedCreate is history.
    assert statefulset_problems(sts(created=3), [event("FailedCreate", quota, 5)]) == []


def test_event_series_time_counts_and_other_objects_are_ignored():
    old_fail = event("FailedCreate", "old", 300)
    old_fail["series"] = {"lastObservedTime": at(1)}  # still happening
    newer_success = event("SuccessfulCreate", "ok", 10)
    (problem,) = statefulset_problems(sts(created=1), [old_fail, newer_success])
    assert problem.message == "old"
    other = event("FailedCreate", "x", 1, name="another")
    assert statefulset_problems(sts(), [other]) == []
    assert statefulset_problems(None, [old_fail]) == []


def test_replica_failure_condition():
    cond = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "m"}
    assert statefulset_problems(sts(conditions=[cond]), []) == [
        Problem("StatefulSet", "orders", "FailedCreate", "m")
    ]


def claim(name, phase, seconds_ago, cls=None):
    spec = {"storageClassName": cls} if cls else {}
    return {
        "metadata": {"name": name, "creationTimestamp": at(seconds_ago)},
        "spec": spec,
        "status": {"phase": phase},
    }


def test_pending_claim_after_the_grace_period_names_its_class():
    young = claim("data-orders-0", "Pending", 30, "fast")
    assert claim_problems([young], [], NOW, 120) == []
    stuck = claim("data-orders-1", "Pending", 600, "fast")
    ev = event(
        "ProvisioningFailed",
        'storageclass.storage.k8s.io "fast" not found',
        3,
        kind="PersistentVolumeClaim",
        name="data-orders-1",
    )
    (problem,) = claim_problems([stuck, claim("data-orders-2", "Bound", 600)], [ev], NOW, 120)
    assert problem.kind == "PersistentVolumeClaim" and problem.name == "data-orders-1"
    assert problem.reason == "ClaimPending"
    assert "StorageClass 'fast'" in problem.message and "not found" in problem.message
    (nameless,) = claim_problems([claim("data-orders-3", "Pending", 600)], [], NOW, 120)
    assert "the cluster has no default" in nameless.message
    (lost,) = claim_problems([claim("data-orders-4", "Lost", 1)], [], NOW, 120)
    assert lost.reason == "ClaimLost"


def pod(name, waiting=None, init_waiting=None, message=""):
    status = {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}
    if waiting:
        status["containerStatuses"] = [
            {"name": "node", "state": {"waiting": {"reason": waiting, "message": message}}}
        ]
    if init_waiting:
        status["initContainerStatuses"] = [
            {"name": "init", "state": {"waiting": {"reason": init_waiting}}}
        ]
    return {"metadata": {"name": name}, "status": status}


def test_pod_image_and_crash_problems_are_named():
    for reason in ("CrashLoopBackOff", "ImagePullBackOff", "ErrImageNeverPull", "ErrImagePull"):
        problem = pod_problem_of(pod("orders-1", reason, message="Container image not present"))
        assert problem is not None and problem.reason == reason, reason
        assert problem.kind == "Pod" and problem.name == "orders-1"
    assert pod_problem_of(pod("orders-1", init_waiting="CrashLoopBackOff")).reason == (
        "CrashLoopBackOff"
    )
    assert pod_problem_of(pod("orders-1", "ContainerCreating")) is None
    result = compute_health(sts(created=3), [pod("orders-0", "ErrImageNeverPull")], 1, 1, [], T)
    degraded = conds(result)["Degraded"]
    assert degraded["reason"] == "ErrImageNeverPull" and "Pod orders-0" in degraded["message"]


def job(name, seconds_ago, failed=False, succeeded=False):
    conditions = []
    if failed:
        conditions.append(
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
            }
        )
    if succeeded:
        conditions.append({"type": "Complete", "status": "True"})
    return {
        "metadata": {"name": name, "creationTimestamp": at(seconds_ago)},
        "status": {"conditions": conditions},
    }


def test_last_compaction_job_failed():
    assert compaction_problems([]) == []
    (problem,) = compaction_problems([job("c-1", 7200, succeeded=True), job("c-2", 60, True)])
    assert problem == Problem(
        "Job",
        "c-2",
        "CompactionJobFailed",
        "BackoffLimitExceeded: Job has reached the specified backoff limit",
    )
    # A later success supersedes the failure.
    assert compaction_problems([job("c-2", 3600, True), job("c-3", 60, succeeded=True)]) == []
    assert compaction_problems([job("c-4", 5)]) == []  # still running


def test_several_problems_first_reason_every_message():
    problems = [
        Problem("StatefulSet", "orders", "FailedCreate", "quota"),
        Problem("Job", "c-2", "CompactionJobFailed", "boom"),
    ]
    result = compute_health(
        sts(created=1), [pod("orders-0", "CrashLoopBackOff")], 1, 1, [], T, problems
    )
    degraded = conds(result)["Degraded"]
    assert degraded["reason"] == "FailedCreate"
    for text in ("StatefulSet orders: FailedCreate: quota", "Job c-2", "Pod orders-0"):
        assert text in degraded["message"], degraded
    healthy = compute_health(sts(created=0), [], 1, 1, result["conditions"], T)
    assert conds(healthy)["Degraded"]["status"] == "False"
