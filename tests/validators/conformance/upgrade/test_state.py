"""upgrade_state.compare on hand-made snapshots: every loss is named, and what a release may drop
(an object only it rendered, that nothing stands in) is not."""

from __future__ import annotations

from gpucatalog.validators.conformance.upgrade import state as us

CQ = us.queue_key("ClusterQueue", "vision")
LQ = us.queue_key("LocalQueue", "vision", "vision")
SPEC = {"cohortName": "research", "resourceGroups": [{"flavors": [{"resources": [{"nominalQuota": 4}]}]}]}


def _before() -> us.Snapshot:
    return us.Snapshot(
        pods={"vision/a": us.PodState("u1", "n1", 0, "Running")},
        workloads={"vision/job-a": us.WorkloadState("w1", True, "vision", "vision/vision", 0)},
        queues={CQ: ("q1", SPEC), LQ: ("q2", {"clusterQueue": "vision"}),
                us.queue_key("ClusterQueue", "mine"): ("q3", {"x": 1})})


def _same() -> us.Snapshot:
    b = _before()
    return us.Snapshot(dict(b.pods), dict(b.workloads), dict(b.queues))


TARGET = {CQ: SPEC, LQ: {"clusterQueue": "vision"}}


def test_nothing_lost() -> None:
    assert us.compare(_before(), _same(), TARGET, TARGET, "b@2") == []


def test_each_loss_is_named() -> None:
    after = _same()
    after.pods["vision/a"] = us.PodState("u1", "n1", 1, "Running")
    after.workloads["vision/job-a"] = us.WorkloadState("w1", False, "", "vision/vision", 1)
    del after.queues[us.queue_key("ClusterQueue", "mine")]
    after.queues[CQ] = ("q1", {**SPEC, "resourceGroups": [{"flavors": [{"resources": [{"nominalQuota": 2}]}]}]})
    problems = us.compare(_before(), after, TARGET, TARGET, "b@2")
    assert any("pod vision/a restarted (0 -> 1)" in p for p in problems)
    assert any("Workload vision/job-a is no longer admitted" in p for p in problems)
    assert any(p.startswith("ClusterQueue mine did not survive") for p in problems)
    assert any(p.startswith("ClusterQueue vision spec is not what b@2 renders") for p in problems)


def test_renamed_queue_held_by_work_is_a_loss_even_while_a_finalizer_keeps_it() -> None:
    renamed = {LQ: {"clusterQueue": "vision-v2"}, us.queue_key("ClusterQueue", "vision-v2"): SPEC}
    after = _same()
    after.queues[LQ] = ("q2", {"clusterQueue": "vision-v2"})
    after.deleting.add(CQ)
    problems = us.compare(_before(), after, renamed, TARGET, "b@3")
    assert problems == ["ClusterQueue vision is being deleted by the upgrade to b@3; admitted Workloads stand in it, "
                        "so a finalizer holds it"]
    del after.queues[CQ]
    assert "while admitted Workloads stood in it" in us.compare(_before(), after, renamed, TARGET, "b@3")[0]


def test_an_object_only_the_old_release_rendered_may_go_when_nothing_stands_in_it() -> None:
    before = _before()
    speech = us.queue_key("ClusterQueue", "speech")
    before.queues[speech] = ("q9", {"cohortName": "research"})
    previous = {**TARGET, speech: {"cohortName": "research"}}
    assert us.compare(before, _same(), TARGET, previous, "b@1") == []


def test_rendered_quantities_match_the_servers_strings() -> None:
    assert us.contains({"nominalQuota": "4", "extra": 1}, {"nominalQuota": 4})
    assert not us.contains({"nominalQuota": "5"}, {"nominalQuota": 4})


def test_a_renamed_cohort_above_admitted_work_is_a_loss() -> None:
    before = _before()
    research = us.queue_key("Cohort", "research")
    before.queues[research] = ("c1", {"parentName": "all"})
    before.queues[us.queue_key("Cohort", "all")] = ("c0", {})
    assert {research, us.queue_key("Cohort", "all")} <= us.held(before)
    after = _same()
    after.queues[us.queue_key("Cohort", "all")] = ("c0", {})
    previous = {**TARGET, research: {"parentName": "all"}}
    problems = us.compare(before, after, TARGET, previous, "b@3")
    assert problems == ["Cohort research did not survive the upgrade to b@3 (not in its rendering) while admitted "
                        "Workloads stood in it; its spec was {'parentName': 'all'}"]
