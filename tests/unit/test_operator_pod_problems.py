"""Why a driver pod does not run, read from its status (pure), and what Ready and the
operator's readiness gauge make of it."""

from __future__ import annotations

from datetime import timedelta

from antidote_api.conditions import CONSUMER_READY_REASONS, DriverReason
from antidote_operator.metrics import OperatorMetrics
from antidote_operator.observations import DeploymentView, Termination
from antidote_operator.pod_problems import PodProblem, PodProblems, driver_pod_problem
from antidote_operator.state import Registry
from antidote_operator.status import decide

from .test_operator_status import T0, cond, inputs

IMAGE = "registry.example/team/handler:1.0"


def pod(container_status: dict | None = None, phase: str = "Pending", conditions: list | None = None,
        **meta) -> dict:
    status: dict = {"phase": phase, "conditions": conditions or []}
    if container_status is not None:
        status["containerStatuses"] = [{"name": "driver", "restartCount": 0, "ready": False,
                                        **container_status}]
    return {"metadata": {"name": "orders-driver-abc", "namespace": "shop", **meta},
            "spec": {"containers": [{"name": "driver", "image": IMAGE}]}, "status": status}


def waiting(reason: str, message: str = "", **extra) -> dict:
    return {"state": {"waiting": {"reason": reason, "message": message}}, **extra}


def test_image_pull_failures_are_one_reason_with_one_message() -> None:
    # The kubelet alternates ErrImagePull and ImagePullBackOff: Ready must not flap between them.
    problems = {driver_pod_problem(pod(waiting(r, f"{r}: rpc error {n}")))
                for n, r in enumerate(["ErrImagePull", "ImagePullBackOff", "InvalidImageName"])}
    (p,) = problems
    assert p.reason == "ImagePullBackOff"
    assert IMAGE in p.message and "spec.spark.imagePullSecrets" in p.message
    assert "kubectl describe pod -n shop orders-driver-abc" in p.message


def test_a_crash_loop_is_seen_waiting_and_while_started_again() -> None:
    last = {"lastState": {"terminated": {"exitCode": 1}}, "restartCount": 3}
    backoff = driver_pod_problem(pod(waiting("CrashLoopBackOff", "back-off 40s", **last), phase="Running"))
    started = driver_pod_problem(pod({"state": {"running": {}}, **last}, phase="Running"))
    assert backoff == started  # the same message: no status write per restart
    assert backoff is not None and backoff.reason == "CrashLoopBackOff"
    assert "last exit code 1" in backoff.message and "--previous" in backoff.message
    # Up again: no problem; the same restarts with the container ready are history.
    assert driver_pod_problem(pod({"state": {"running": {}}, **last, "ready": True}, phase="Running")) is None


def test_unschedulable_names_the_schedulers_answer() -> None:
    p = driver_pod_problem(pod(conditions=[{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}]))
    assert p is not None and p.reason == "Unschedulable"
    assert "didn't match Pod's node affinity/selector" in p.message and "tolerations" in p.message


def test_a_missing_secret_is_a_container_config_error() -> None:
    p = driver_pod_problem(pod(waiting("CreateContainerConfigError", 'secret "db" not found')))
    assert p == PodProblem("CreateContainerConfigError",
                           'The driver pod orders-driver-abc cannot create its container: secret "db" not found.')


def test_no_problem_while_starting_running_or_going_away() -> None:
    assert driver_pod_problem(pod()) is None  # just created
    assert driver_pod_problem(pod(waiting("ContainerCreating"))) is None
    assert driver_pod_problem(pod({"state": {"running": {}}, "ready": True}, phase="Running")) is None
    gone = pod(waiting("ImagePullBackOff"), deletionTimestamp="2026-11-28T08:00:00Z")
    assert driver_pod_problem(gone) is None


def test_the_index_keeps_one_problem_per_pod_and_says_when_it_changed() -> None:
    idx = PodProblems()
    bad = PodProblem("ImagePullBackOff", "m")
    assert idx.put("shop", "orders", "b-pod", bad) is True
    assert idx.put("shop", "orders", "b-pod", bad) is False  # no change, no sync
    assert idx.put("shop", "orders", "a-pod", None) is False
    assert idx.of("shop", "orders") == bad and idx.of("shop", "other") is None
    assert idx.put("shop", "orders", "b-pod", None) is True  # deleted, or fixed
    assert idx.of("shop", "orders") is None
    idx.put("shop", "orders", "b-pod", bad)
    idx.forget("shop", "orders")
    assert idx.of("shop", "orders") is None


BACKOFF = PodProblem("ImagePullBackOff", 'The driver pod x cannot pull its image "y".')


def test_ready_carries_the_pods_reason_with_one_event() -> None:
    d = decide(inputs(pod_problem=BACKOFF, deployment=DeploymentView(replicas=1, available=0)))
    assert cond(d, "Ready") == ("False", "ImagePullBackOff")
    assert [(e.type, e.reason, e.message) for e in d.events if e.reason == "ImagePullBackOff"] == [
        ("Warning", "ImagePullBackOff", BACKOFF.message)]
    # The same reason with another text (a scheduler's node count): rewritten, not re-announced.
    other = PodProblem("ImagePullBackOff", "other text")
    again = decide(inputs(status=d.status, pod_problem=other, now=T0 + timedelta(minutes=1)))
    assert cond(again, "Ready") == ("False", "ImagePullBackOff") and again.events == []
    # Fixed: Running (and a lingering problem of an old pod does not hide a running driver).
    fixed = decide(inputs(status=d.status, pod_problem=other, deployment=DeploymentView(1, 1)))
    assert cond(fixed, "Ready") == ("True", "Running")


def test_settings_rejected_pauses_and_disables_win_over_the_pods_reason() -> None:
    crash = PodProblem("CrashLoopBackOff", "keeps exiting")
    rejected = Termination(2, T0, "pod", message="antidote consumer: spec.handler: cannot import")
    # Exit 2 then back-off: the driver's own line is the better reason.
    assert cond(decide(inputs(pod_problem=crash, termination=rejected)), "Ready") == ("False", "SettingsRejected")
    paused = decide(inputs(spec={**inputs().spec, "paused": True}, pod_problem=crash))
    assert cond(paused, "Ready") == ("False", "Paused")
    disabled = decide(inputs(pod_problem=crash, termination=Termination(4, T0, "pod")))
    assert cond(disabled, "Ready") == ("False", "SystemicFailure")


def test_a_crash_loop_from_before_a_resume_is_the_disabled_runs() -> None:
    # Exit 3 disabled the queue; resumed a minute later, that pod's back-off is old news.
    last = {"lastState": {"terminated": {"exitCode": 3, "finishedAt": "2025-03-01T12:00:00Z"}},
            "restartCount": 1}
    crash = driver_pod_problem(pod(waiting("CrashLoopBackOff", **last), phase="Running"))
    assert crash is not None and crash.since == T0
    disabled = decide(inputs(termination=Termination(3, T0, "pod")))
    resumed = decide(inputs(status=disabled.status, annotations={"antidote.dev/resume": "x"},
                            termination=Termination(3, T0, "pod"), now=T0 + timedelta(minutes=1)))
    after = decide(inputs(status=resumed.status, pod_problem=crash, now=T0 + timedelta(minutes=2)))
    assert cond(after, "Ready") == ("False", "Starting")
    # A crash after the resume is this run's.
    again = PodProblem(crash.reason, crash.message, T0 + timedelta(minutes=2))
    assert cond(decide(inputs(status=resumed.status, pod_problem=again, now=T0 + timedelta(minutes=3))),
                "Ready") == ("False", "CrashLoopBackOff")


def test_the_readiness_gauge_is_one_series_per_consumer_from_a_closed_set() -> None:
    consumers = Registry()
    consumers.get("shop", "orders").ready = ("False", "ImagePullBackOff")
    consumers.get("shop", "fine").ready = ("True", "Running")
    consumers.get("shop", "odd").ready = ("False", "NotAReason")
    consumers.get("shop", "new")  # not reconciled yet: no series
    m = OperatorMetrics(consumers)
    name = "antidote_operator_consumer_ready"

    def value(consumer: str, reason: str) -> float | None:
        return m.registry.get_sample_value(name, {"namespace": "shop", "consumer": consumer, "reason": reason})

    assert value("orders", "ImagePullBackOff") == 0 and value("fine", "Running") == 1
    assert value("odd", "Unknown") == 0
    series = [s for fam in m.registry.collect() if fam.name == name for s in fam.samples]
    assert len(series) == 3
    consumers.get("shop", "orders").ready = ("True", "Running")
    assert value("orders", "ImagePullBackOff") is None and value("orders", "Running") == 1
    consumers.forget("shop", "orders")  # deleted: its series goes
    assert value("orders", "Running") is None
    assert {r.value for r in DriverReason} <= CONSUMER_READY_REASONS
    assert {"SettingsRejected", "Starting", "Paused", "SystemicFailure"} <= CONSUMER_READY_REASONS


def test_before_the_pod_list_is_read_ready_keeps_the_pods_reason() -> None:
    # An operator's start: the consumer may be synced before its Pod watch listed the pods.
    d = decide(inputs(pod_problem=BACKOFF))
    restarted = decide(inputs(status=d.status, pod_problem=None, pods_listed=False, now=T0 + timedelta(minutes=5)))
    assert cond(restarted, "Ready") == ("False", "ImagePullBackOff") and restarted.events == []
    assert restarted.status == d.status  # nothing to write
    # Listed, and no pod has a problem any more: Starting.
    assert cond(decide(inputs(status=d.status, pod_problem=None)), "Ready") == ("False", "Starting")
    # Not listed, but Ready had another reason: nothing is held.
    assert cond(decide(inputs(pod_problem=None, pods_listed=False)), "Ready") == ("False", "Starting")


def test_the_index_is_listed_once_every_pod_watch_read_its_list() -> None:
    class Watch:
        lists = 0

    idx, a, b = PodProblems(), Watch(), Watch()
    assert idx.listed  # nothing watches (a unit test, or before the operator starts them)
    idx.watches = [a, b]
    assert not idx.listed
    a.lists = 1
    assert not idx.listed
    b.lists = 2
    assert idx.listed
