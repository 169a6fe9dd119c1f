"""`decide`: conditions, replicas and Events from what the operator observes — pure."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from antidote_api.conditions import find_condition
from antidote_api.consumer import QueueConsumerStatus
from antidote_operator.observations import DeploymentView, LastPoisonSample, PoisonMemory, Sample, Termination
from antidote_operator.policy_status import policy_status
from antidote_operator.status import Inputs, decide, status_patch

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
SPEC = {"policyRef": {"name": "p"},
        "source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": "orders"}},
        "handler": "shop.handlers:charge", "checkpoint": {"location": "/ckpt"}}


def inputs(**over) -> Inputs:
    base = dict(name="orders", namespace="shop", generation=1, spec=SPEC, annotations={}, status={},
                policy={}, now=T0)
    base.update(over)
    return Inputs(**base)


def cond(d, type_: str):
    c = find_condition(QueueConsumerStatus.model_validate(d.status).conditions or [], type_)
    return (c.status, c.reason) if c else None


def reasons(d) -> list[str]:
    return [e.reason for e in d.events]


def test_a_new_consumer_gets_every_condition_and_one_driver() -> None:
    d = decide(inputs())
    assert d.settings is not None and d.settings.consumer == "orders" and d.replicas == 1
    assert [c["type"] for c in d.status["conditions"]] == ["Ready", "Paused", "QueueDisabled", "PoisonDetected"]
    assert cond(d, "Ready") == ("False", "Starting")
    assert cond(d, "QueueDisabled") == ("False", "QueueEnabled")
    assert d.status["observedGeneration"] == 1 and d.events == []
    running = decide(inputs(status=d.status, deployment=DeploymentView(replicas=1, available=1)))
    assert cond(running, "Ready") == ("True", "Running")


def test_missing_policy_is_reported_once_and_recovers() -> None:
    d = decide(inputs(policy=None))
    assert (d.settings, d.replicas) == (None, None)  # nothing is created or changed
    assert cond(d, "Ready") == ("False", "PolicyNotFound")
    assert reasons(d) == ["PolicyNotFound"] and d.events[0].type == "Warning"
    assert 'PoisonPolicy "p" does not exist in namespace "shop"' in d.events[0].message
    again = decide(inputs(policy=None, status=d.status, now=T0 + timedelta(minutes=1)))
    assert again.events == [] and status_patch(d.status, again.status) == {}
    found = decide(inputs(status=d.status))
    assert found.replicas == 1 and cond(found, "Ready") == ("False", "Starting")


def test_invalid_policy_names_the_field() -> None:
    d = decide(inputs(policy={"validation": {"format": "json", "jsonSchema": {"type": 12}}}))
    assert cond(d, "Ready") == ("False", "PolicyInvalid")
    assert "spec.validation.jsonSchema" in d.events[0].message and "not a valid JSON Schema" in d.events[0].message


def test_spec_that_cannot_resolve_is_invalid_with_a_hint() -> None:
    spec = {**SPEC, "source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": "t" * 245}}}
    d = decide(inputs(spec=spec))
    assert cond(d, "Ready") == ("False", "InvalidSpec") and d.settings is None
    assert "spec.topics" in d.events[0].message


def test_invalid_spec_lists_the_fields() -> None:
    d = decide(inputs(spec={**SPEC, "handler": "no colon"}))
    assert cond(d, "Ready") == ("False", "InvalidSpec")
    assert d.events[0].message.startswith("The QueueConsumer is invalid: spec.handler")


def test_pause_and_unpause() -> None:
    d = decide(inputs(spec={**SPEC, "paused": True}))
    assert d.replicas == 0 and cond(d, "Paused") == ("True", "UserRequested")
    assert cond(d, "Ready") == ("False", "Paused") and reasons(d) == ["Paused"]
    assert decide(inputs(spec={**SPEC, "paused": True}, status=d.status)).events == []
    back = decide(inputs(status=d.status))
    assert back.replicas == 1 and cond(back, "Paused") == ("False", "NotPaused") and reasons(back) == ["Resumed"]


def test_pause_needs_no_valid_configuration() -> None:
    d = decide(inputs(spec={**SPEC, "paused": True}, policy=None))
    assert d.replicas == 0 and d.settings is None


def disabled_sample(reason: str = "SystemicFailure", at: datetime = T0) -> Sample:
    return Sample(at=at, counts={"processed": 3}, consecutive=0, disabled=reason)


def test_metrics_disable_the_queue_once() -> None:
    d = decide(inputs(sample=disabled_sample()))
    assert d.replicas == 0 and d.disabled == "SystemicFailure" and d.newly_disabled
    assert cond(d, "QueueDisabled") == ("True", "SystemicFailure")
    assert cond(d, "Paused") == ("True", "QueueDisabled")
    assert cond(d, "Ready") == ("False", "SystemicFailure")  # the Reason column says why
    (e,) = d.events
    assert (e.type, e.reason) == ("Warning", "QueueDisabled")
    assert "antidote.dev/resume" in e.message and "failureRatio" in e.message
    assert d.status["counts"]["processed"] == 3
    # Restarted operator: the same evidence, the stored status -> nothing new.
    again = decide(inputs(status=d.status, sample=disabled_sample(), now=T0 + timedelta(seconds=30)))
    assert again.events == [] and again.replicas == 0 and status_patch(d.status, again.status) == {}


def test_exit_codes_disable_the_queue() -> None:
    for code, reason in ((3, "ConsecutiveBatchFailures"), (4, "SystemicFailure"), (5, "Fault")):
        d = decide(inputs(termination=Termination(code, T0, "dev-runner")))
        assert (d.disabled, d.replicas, reasons(d)) == (reason, 0, ["QueueDisabled"])
        assert f"exited with code {code}" in d.events[0].message
    crash = decide(inputs(termination=Termination(1, T0, "pod")))
    assert crash.disabled is None and crash.replicas == 1


def test_resume_by_annotation_ignores_evidence_from_before_it() -> None:
    off = decide(inputs(sample=disabled_sample(), termination=Termination(4, T0, "pod")))
    later = T0 + timedelta(minutes=5)
    on = decide(inputs(status=off.status, annotations={"antidote.dev/resume": "x"}, now=later,
                       sample=disabled_sample(), termination=Termination(4, T0, "pod")))
    assert on.consume_resume and on.resumed and on.replicas == 1 and on.disabled is None
    assert cond(on, "QueueDisabled") == ("False", "Resumed") and reasons(on) == ["Resumed"]
    # The stopped driver's last words predate the resume: no re-disable.
    stale = decide(inputs(status=on.status, now=later + timedelta(seconds=10),
                          sample=disabled_sample(at=later), termination=Termination(4, T0, "pod")))
    assert stale.disabled is None and stale.events == []
    fresh = decide(inputs(status=on.status, now=later + timedelta(seconds=20),
                          termination=Termination(3, later + timedelta(seconds=15), "pod")))
    assert fresh.disabled == "ConsecutiveBatchFailures" and reasons(fresh) == ["QueueDisabled"]
    # The consumer's ledger says "disabled" until a driver starts with a token it has not
    # honored: the resume's time, the same in every later reconcile (no needless restart).
    assert off.settings.resume_token is None
    assert on.settings.resume_token == stale.settings.resume_token == "2025-03-01T12:05:00Z"
    assert fresh.settings.resume_token == "2025-03-01T12:05:00Z"


def test_a_driver_started_before_the_resume_exiting_late_is_old_news() -> None:
    off = decide(inputs(sample=disabled_sample()))
    later = T0 + timedelta(minutes=5)
    on = decide(inputs(status=off.status, annotations={"antidote.dev/resume": "x"}, now=later))
    # The disabled run's driver took 1.5 s to stop, longer than the resume took.
    stale = Termination(4, later + timedelta(seconds=1.5), "dev-runner", started_at=T0 - timedelta(minutes=1))
    d = decide(inputs(status=on.status, now=later + timedelta(seconds=2), termination=stale))
    assert d.disabled is None and d.replicas == 1 and d.events == []
    new = Termination(4, later + timedelta(seconds=30), "dev-runner", started_at=later + timedelta(seconds=2))
    d = decide(inputs(status=on.status, now=later + timedelta(seconds=31), termination=new))
    assert d.disabled == "SystemicFailure" and reasons(d) == ["QueueDisabled"]


def test_resume_annotation_without_a_disabled_queue_is_just_removed() -> None:
    d = decide(inputs(annotations={"antidote.dev/resume": "now"}))
    assert d.consume_resume and not d.resumed and d.events == []


def poison_sample(n: int, at: datetime) -> Sample:
    return Sample(at=at, counts={"processed": 10, "moved": n}, consecutive=0, disabled=None,
                  last_poison=LastPoisonSample(time=at, reason="max-attempts", error_class="ValueError",
                                               topic="orders", partition=0, offset=41 + n,
                                               disposition="Move"),
                  depths={"poison": n, "dlq": 0})


def test_poison_is_counted_and_announced_at_a_limited_rate() -> None:
    d = decide(inputs(sample=poison_sample(2, T0), poison_event_interval=60))
    assert d.status["counts"] == {"processed": 10, "retried": 0, "moved": 2, "rejected": 0, "dropped": 0,
                                  "poisoned": 2}
    assert d.status["lastPoison"]["offset"] == 43 and d.status["lastPoison"]["errorClass"] == "ValueError"
    assert cond(d, "PoisonDetected") == ("True", "MaxAttempts")
    assert reasons(d) == ["PoisonDetected"] and d.events[0].message.startswith("2 new poison message(s)")
    # More poison 10 s later: no Event yet, but a reminder to decide again when one is due.
    t1 = T0 + timedelta(seconds=10)
    d2 = decide(inputs(status=d.status, sample=poison_sample(5, t1), now=t1, poison=d.poison))
    assert d2.events == [] and d2.recheck_at == T0 + timedelta(seconds=60)
    t2 = T0 + timedelta(seconds=61)
    d3 = decide(inputs(status=d2.status, sample=poison_sample(5, t1), now=t2, poison=d2.poison))
    assert reasons(d3) == ["PoisonDetected"] and d3.events[0].message.startswith("3 new poison message(s)")


def test_a_restarted_operator_does_not_reannounce_old_poison() -> None:
    d = decide(inputs(sample=poison_sample(2, T0)))
    restarted = decide(inputs(status=d.status, sample=poison_sample(2, T0), poison=PoisonMemory(),
                              now=T0 + timedelta(seconds=5)))
    assert restarted.events == []


def test_drained_poison_topic() -> None:
    s = poison_sample(2, T0)
    drained = Sample(at=T0, counts=s.counts, consecutive=0, last_poison=s.last_poison, depths={"poison": 0, "dlq": 0})
    assert cond(decide(inputs(sample=drained)), "PoisonDetected") == ("False", "Drained")
    none = decide(inputs(sample=Sample(at=T0, counts={"processed": 1})))
    assert cond(none, "PoisonDetected") == ("False", "NoPoison")


AUTO = {"queueDisable": {"autoResume": {"after": "10m", "probeMessages": 5}}}


def test_auto_resume_probes_with_a_hair_trigger_then_goes_back_to_normal() -> None:
    off = decide(inputs(policy=AUTO, sample=disabled_sample()))
    assert off.recheck_at == T0 + timedelta(minutes=10)
    early = decide(inputs(policy=AUTO, status=off.status, now=T0 + timedelta(minutes=9)))
    assert early.disabled == "SystemicFailure" and early.recheck_at == T0 + timedelta(minutes=10)
    t = T0 + timedelta(minutes=10)
    probe = decide(inputs(policy=AUTO, status=off.status, now=t))
    assert probe.resumed and probe.replicas == 1 and probe.probe == "3"  # processed count at the start
    assert cond(probe, "QueueDisabled") == ("False", "Probing") and reasons(probe) == ["Resumed"]
    s = probe.settings
    assert s is not None and s.queue_disable.consecutive_batch_failures == 1
    assert s.queue_disable.failure_ratio.min_messages == 5 and s.source.max_messages_per_batch == 5
    # Still probing: 4 of 5 processed.
    ann = {"antidote.dev/probe": "3"}
    t1 = t + timedelta(seconds=30)
    busy = decide(inputs(policy=AUTO, status=probe.status, annotations=ann, now=t1,
                         sample=Sample(at=t1, counts={"processed": 7})))
    assert busy.probe is False and busy.settings.queue_disable.consecutive_batch_failures == 1
    passed = decide(inputs(policy=AUTO, status=busy.status, annotations=ann, now=t1,
                           sample=Sample(at=t1, counts={"processed": 8})))
    assert passed.probe is None and cond(passed, "QueueDisabled") == ("False", "ProbeSucceeded")
    assert passed.settings.queue_disable.consecutive_batch_failures == 5  # normal again
    failed = decide(inputs(policy=AUTO, status=busy.status, annotations=ann, now=t1,
                           termination=Termination(4, t1, "pod")))
    assert failed.disabled == "SystemicFailure" and failed.probe is None


def test_status_patch_sends_only_what_changed() -> None:
    d = decide(inputs(sample=poison_sample(1, T0)))
    assert status_patch(d.status, d.status) == {}
    old = {**d.status, "consecutiveBatchFailures": 2}
    new = {k: v for k, v in d.status.items() if k != "consecutiveBatchFailures"}
    assert status_patch(old, new) == {"consecutiveBatchFailures": None}
    assert set(status_patch({}, d.status)) == set(d.status)


def test_policy_status_feeds_the_attempts_column() -> None:
    status, event = policy_status({"retries": {"immediate": 2, "cycles": 3}}, {}, 4, now=T0)
    assert status["maxAttempts"] == 12 and status["observedGeneration"] == 4 and event is None
    assert status["conditions"][0]["reason"] == "Valid"
    bad, event = policy_status({"validation": {"format": "json", "jsonSchema": {"type": 1}}}, status, 5, now=T0)
    assert bad["conditions"][0]["reason"] == "PolicyInvalid" and event is not None
    assert bad["maxAttempts"] == 12  # the last valid value stays
    _, again = policy_status({"validation": {"format": "json", "jsonSchema": {"type": 1}}}, bad, 5, now=T0)
    assert again is None


def test_an_exit_in_the_second_the_consumer_was_created_counts() -> None:
    new = decide(inputs())
    d = decide(inputs(status=new.status, termination=Termination(3, T0, "pod")))
    assert d.disabled == "ConsecutiveBatchFailures"


def test_a_driver_that_refuses_its_settings_says_why_in_ready_until_one_runs() -> None:
    line = ("antidote consumer: spec.handler 'shop.handlers:charge': cannot import shop.handlers: "
            "No module named 'shop'")
    term = Termination(2, T0, "pod", message=f"some earlier log line\n{line}\n")
    d = decide(inputs(termination=term, deployment=DeploymentView(replicas=1, available=0)))
    assert d.replicas == 1  # the driver keeps restarting with back-off: a fixed image is picked up
    assert cond(d, "Ready") == ("False", "SettingsRejected")
    [event] = d.events
    assert (event.type, event.reason) == ("Warning", "SettingsRejected")
    assert event.message == ("The driver refused its settings and exited with code 2: spec.handler "
                             "'shop.handlers:charge': cannot import shop.handlers: No module named 'shop'")
    assert cond(d, "QueueDisabled") == ("False", "QueueEnabled")  # not a disabled queue
    again = decide(inputs(status=d.status, termination=term, now=T0 + timedelta(minutes=1)))
    assert again.events == []
    fixed = decide(inputs(status=d.status, termination=term,
                          deployment=DeploymentView(replicas=1, available=1)))
    assert cond(fixed, "Ready") == ("True", "Running")
    assert cond(decide(inputs(termination=Termination(2, T0, "dev-runner"))), "Ready") == (
        "False", "SettingsRejected")
    later_spark_line = Termination(2, T0, "pod", message=f"{line}\n26/11/23 WARN SparkContext: stopped\n")
    assert later_spark_line.rejected_settings().startswith("spec.handler 'shop.handlers:charge'")
