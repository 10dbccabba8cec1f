"""Status from the StatefulSet and pods: phase, ready counts, conditions."""

from msgstore_operator.status import (
    changed_fields,
    compute_health,
    pod_problem,
    pod_ready,
    rollout_complete,
    set_condition,
)

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"


def pod(name, phase="Running", ready=True, waiting=None, unschedulable=False, deleting=False):
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if unschedulable:
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes",
            }
        )
    status = {"phase": phase, "conditions": conditions}
    if waiting:
        status["containerStatuses"] = [{"name": "node", "state": {"waiting": {"reason": waiting}}}]
    meta = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = T0
    return {"metadata": meta, "status": status}


def sts(replicas=3, ready=3, updated=3, observed=2, generation=2, current="r1", update="r1"):
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "replicas": replicas,
            "readyReplicas": ready,
            "updatedReplicas": updated,
            "currentRevision": current,
            "updateRevision": update,
        },
    }


def conds(result):
    return {c["type"]: c for c in result["conditions"]}


def test_pod_ready_and_problems():
    assert pod_ready(pod("a"))
    assert not pod_ready(pod("a", ready=False))
    assert not pod_ready(pod("a", phase="Pending"))
    assert not pod_ready(pod("a", deleting=True))
    assert pod_problem(pod("a")) is None
    assert "CrashLoopBackOff" in pod_problem(pod("a", ready=False, waiting="CrashLoopBackOff"))
    assert "cannot be scheduled" in pod_problem(
        pod("a", phase="Pending", ready=False, unschedulable=True)
    )
    assert pod_problem(pod("a", phase="Pending", ready=False, waiting="ContainerCreating")) is None


def test_rollout_complete():
    assert rollout_complete(sts())
    assert not rollout_complete(sts(observed=1))
    assert not rollout_complete(sts(updated=2))
    assert not rollout_complete(sts(update="r2"))


def test_all_ready():
    result = compute_health(sts(), [pod(f"d-{i}") for i in range(3)], 4, 4, [], T0)
    assert result["phase"] == "Ready" and result["readyReplicas"] == 3 and result["replicas"] == 3
    c = conds(result)
    assert c["Ready"]["status"] == "True" and c["Progressing"]["status"] == "False"
    assert c["Degraded"]["status"] == "False"


def test_not_yet_reconciled_is_not_ready():
    result = compute_health(sts(), [pod(f"d-{i}") for i in range(3)], 5, 4, [], T0)
    assert result["phase"] == "Progressing" and conds(result)["Ready"]["status"] == "False"


def test_starting_pods_progress():
    pods = [pod("d-0"), pod("d-1", phase="Pending", ready=False)]
    result = compute_health(sts(ready=1), pods, 1, 1, [], T0)
    assert result["phase"] == "Progressing" and result["readyReplicas"] == 1
    assert conds(result)["Progressing"]["status"] == "True"


def test_stuck_pod_degrades():
    pods = [pod("d-0"), pod("d-1"), pod("d-2", ready=False, waiting="ImagePullBackOff")]
    result = compute_health(sts(ready=2), pods, 1, 1, [], T0)
    assert result["phase"] == "Degraded"
    assert "d-2" in conds(result)["Degraded"]["message"]


def test_no_statefulset_yet():
    result = compute_health(None, [], 1, 1, [], T0)
    assert result["phase"] == "Pending" and result["replicas"] == 0


def test_transition_time_moves_only_on_flips():
    first = set_condition([], "Ready", False, "NodesNotReady", "0/3", T0)
    same = set_condition(first, "Ready", False, "NodesNotReady", "1/3", T1)
    assert same[0]["lastTransitionTime"] == T0 and same[0]["message"] == "1/3"
    flipped = set_condition(same, "Ready", True, "AllNodesReady", "3/3", T1)
    assert flipped[0]["lastTransitionTime"] == T1 and flipped[0]["status"] == "True"


def test_scale_down_condition_is_kept():
    blocked = set_condition(
        [], "ScaleDownBlocked", True, "PartitionsOwned", "node d-3 owns 1 partition", T0
    )
    result = compute_health(sts(), [pod(f"d-{i}") for i in range(3)], 1, 1, blocked, T1)
    assert conds(result)["ScaleDownBlocked"]["status"] == "True"
    assert [c["type"] for c in result["conditions"]] == [
        "Ready",
        "Progressing",
        "Degraded",
        "ScaleDownBlocked",
    ]


def test_changed_fields():
    assert changed_fields({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 4}) == {"b": 3, "c": 4}
