"""Reader Jobs as data: the manifest, deterministic names, cron slots, trigger decisions,
status.readerJobs and its Events."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from antidote_api import PoisonPolicySpec, QueueConsumerSpec, resolve
from antidote_api import names
from antidote_api.consumer import QueueConsumerStatus
from antidote_api.drain import DrainRequest
from antidote_api.wire import DRAIN_ANNOTATION
from antidote_operator import cron
from antidote_operator import reader_jobs as rj
from antidote_operator.builders import reader_job
from antidote_operator.builders.driver import RenderOptions
from antidote_operator.state import JobIndex

OWNER = {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
         "metadata": {"name": "orders", "namespace": "shop", "uid": "uid-1", "labels": {"team": "pay"}}}
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)


def settings(reader: dict | None = None, **over):
    spec = {"policyRef": {"name": "strict"},
            "source": {"kafka": {"bootstrapServers": "kafka:9092", "topic": "orders",
                                 "secretRef": {"name": "kafka-creds"}}},
            "handler": "shop.handlers:charge", "checkpoint": {"location": "s3a://ckpt/orders"}}
    spec.update(over)
    return resolve(QueueConsumerSpec.model_validate(spec),
                   PoisonPolicySpec.model_validate({"reader": reader or {}}), name="orders", namespace="shop")


# --- the manifest ---------------------------------------------------------------------------

def test_job_runs_the_reader_with_the_consumer_image_settings_and_secrets() -> None:
    s = settings(spark={"image": "shop/consumer:7"})
    job = reader_job.build_reader_job(s, RenderOptions(), trigger="drain", name="orders-reader-drain-x",
                              request=DrainRequest(id="r1", action="Redrive", rate=50,
                                                      error_classes=("KeyError",)))
    reader_job.adopt(OWNER, job)
    spec = job["spec"]
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "shop/consumer:7" and c["command"] == ["antidote"]
    assert c["args"] == ["reader", "--settings", "/etc/antidote/settings.yaml", "--report-file",
                         "/dev/termination-log", "--action", "Redrive", "--rate", "50",
                         "--error-class", "KeyError"]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                    "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert {"name": "PYTHONUNBUFFERED", "value": "1"} in c["env"]
    assert not any(e["name"] == "SPARK_CONF_DIR" for e in c["env"])
    assert pod["serviceAccountName"] == "orders-reader" and pod["automountServiceAccountToken"] is False
    assert pod["restartPolicy"] == "Never"
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["settings"]["configMap"]["name"] == "orders-settings"
    assert vols["secret-0"]["secret"]["secretName"] == "kafka-creds"
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"/etc/antidote", "/etc/antidote/secrets/kafka-creds"}
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 3600
    assert spec["ttlSecondsAfterFinished"] == 7 * 86400
    meta = job["metadata"]
    assert meta["namespace"] == "shop" and meta["ownerReferences"][0]["uid"] == "uid-1"
    for labels in (meta["labels"], spec["template"]["metadata"]["labels"]):
        assert labels["antidote.dev/consumer"] == "orders"
        assert labels["app.kubernetes.io/component"] == "reader"
        assert labels["antidote.dev/reader-trigger"] == "drain"
        assert labels["team"] == "pay"
    assert meta["annotations"]["antidote.dev/reader-action"] == "Redrive"


def test_without_a_request_the_policy_decides_the_action() -> None:
    job = reader_job.build_reader_job(settings({"action": "Drop"}), RenderOptions(), trigger="sched",
                              name="n", depth=12)
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == ["--report-file", "/dev/termination-log"]
    assert job["metadata"]["annotations"] == {"antidote.dev/reader-action": "Drop", "antidote.dev/poison-depth": "12"}


def test_the_reader_service_account_has_no_token_and_no_role() -> None:
    sa = reader_job.build_reader_service_account("orders")
    assert sa["kind"] == "ServiceAccount" and sa["metadata"]["name"] == "orders-reader"
    assert sa["automountServiceAccountToken"] is False


# --- names ------------------------------------------------------------------------------------

def test_names_are_deterministic_distinct_and_fit_63() -> None:
    longest = "a" * 40
    for trig in rj.TRIGGERS:
        name = names.reader_job_name(longest, trig, "x")
        assert len(name) <= 63 and name.startswith(f"{longest}-reader-{trig}-")
    assert names.drain_job_name("orders", "r1") == names.drain_job_name("orders", "r1")
    assert names.drain_job_name("orders", "r1") != names.drain_job_name("orders", "r2")
    slot = datetime(2026, 11, 22, 10, 5, tzinfo=timezone.utc)
    assert names.schedule_job_name("orders", slot) == names.schedule_job_name("orders", slot.replace(second=30))
    assert names.schedule_job_name("orders", slot) != names.schedule_job_name("orders", slot + timedelta(minutes=1))
    with pytest.raises(ValueError):
        names.reader_job_name("orders", "manual", "x")


# --- cron ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("expr,now,want", [
    ("*/15 * * * *", "2026-11-22T10:37:12", "2026-11-22T10:30"),
    ("0 3 * * *", "2026-11-22T02:59:00", "2026-11-21T03:00"),
    ("@hourly", "2026-11-22T10:00:00", "2026-11-22T10:00"),
    ("30 9 * * mon-fri", "2026-11-22T12:00:00", "2026-11-20T09:30"),  # the 22nd is a Sunday
    ("0 0 1 jan *", "2026-11-22T00:00:00", "2026-01-01T00:00"),
    ("0 12 15 * 0", "2026-11-22T13:00:00", "2026-11-22T12:00"),  # both day fields: either
    ("5/20 1-3 * * 7", "2026-11-22T23:00:00", "2026-11-22T03:45"),
])
def test_cron_previous_slot(expr: str, now: str, want: str) -> None:
    got = cron.parse(expr).previous(datetime.fromisoformat(now).replace(tzinfo=timezone.utc))
    assert got == datetime.fromisoformat(want).replace(tzinfo=timezone.utc)


@pytest.mark.parametrize("expr,field", [("* * *", "expected 5 fields"), ("61 * * * *", "minute"),
                                        ("* 24 * * *", "hour"), ("* * 0 * *", "day of month"),
                                        ("* * * foo *", "month"), ("*/0 * * * *", "step")])
def test_cron_errors_name_the_field(expr: str, field: str) -> None:
    with pytest.raises(cron.CronError, match=field):
        cron.parse(expr)


def test_cron_matches() -> None:
    c = cron.parse("0 9 * * 1")
    assert c.matches(datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc))  # a Monday
    assert not c.matches(datetime(2026, 11, 24, 9, 0, tzinfo=timezone.utc))


# --- deciding -----------------------------------------------------------------------------------

def view(name: str, phase: str = "Succeeded", trigger: str = "drain", created: datetime = T0,
         depth: int | None = None) -> rj.JobView:
    return rj.JobView(name=name, consumer="orders", trigger=trigger, action="Hold", phase=phase,
                      created=created, start=created, completion=None, depth=depth)


def plan(reader: dict | None = None, *, annotations: dict | None = None, depth: int | None = None,
         now: datetime = T0, jobs=(), stored=(), created: datetime | None = T0 - timedelta(days=1)) -> rj.Plan:
    return rj.plan(consumer="orders", settings=settings(reader), annotations=annotations or {}, depth=depth,
                   now=now, created=created, jobs=list(jobs), stored=list(stored))


def test_drain_starts_a_job_named_for_the_request_and_is_consumed() -> None:
    p = plan(annotations={DRAIN_ANNOTATION: "r1"})
    assert p.spawn is not None and p.spawn.name == names.drain_job_name("orders", "r1") and p.consume_drain
    # After a restart, the Job exists: only the annotation goes, nothing is started.
    p = plan(annotations={DRAIN_ANNOTATION: "r1"}, jobs=[view(names.drain_job_name("orders", "r1"), "Running")])
    assert p.spawn is None and p.consume_drain


def test_one_active_job_per_consumer() -> None:
    p = plan(annotations={DRAIN_ANNOTATION: "r2"}, jobs=[view("orders-reader-drain-1", "Running")])
    assert p.spawn is None and not p.consume_drain and "waits for Job orders-reader-drain-1" in p.waiting
    p = plan({"trigger": {"poisonDepth": 5}}, depth=100, jobs=[view("j", "Pending")])
    assert p.spawn is None


def test_invalid_drain_is_reported_and_consumed() -> None:
    p = plan(annotations={DRAIN_ANNOTATION: '{"id": "x", "action": "Move"}'})
    assert p.spawn is None and p.consume_drain and "action must be one of" in p.invalid_drain


def test_poison_depth_counts_new_poison_since_the_newest_job() -> None:
    r = {"trigger": {"poisonDepth": 10}}
    assert plan(r, depth=9).spawn is None
    first = plan(r, depth=10).spawn
    assert first is not None and first.trigger == "depth"
    assert plan(r, depth=10).spawn == first  # the same instance: the same name after a restart
    # The newest Job started at depth 10: 9 more is not enough, 10 more is.
    done = [view(first.name, "Succeeded", "depth", T0, depth=10)]
    assert plan(r, depth=19, jobs=done).spawn is None
    second = plan(r, depth=20, jobs=done).spawn
    assert second is not None and second.name != first.name
    # Known only from status (the Job is gone after its TTL): the same answer.
    stored = [{"name": first.name, "trigger": "PoisonDepth", "startTime": "2026-11-22T10:00:00Z",
               "poisonDepth": 10, "phase": "Succeeded"}]
    assert plan(r, depth=20, stored=stored).spawn == second


def test_schedule_fires_the_latest_slot_once_within_its_deadline() -> None:
    r = {"trigger": {"schedule": "*/10 * * * *"}}
    now = T0 + timedelta(minutes=12)
    p = plan(r, now=now)
    slot = T0 + timedelta(minutes=10)
    assert p.spawn is not None and p.spawn.name == names.schedule_job_name("orders", slot)
    assert plan(r, now=now, jobs=[view(p.spawn.name, "Succeeded", "sched")]).spawn is None
    assert plan(r, now=now, stored=[{"name": p.spawn.name}]).spawn is None
    assert plan(r, now=slot + timedelta(minutes=6)).spawn is None  # past the 5-minute deadline
    assert plan(r, now=now, created=now - timedelta(minutes=1)).spawn is None  # slot before creation


# --- status and Events ----------------------------------------------------------------------------

REPORT = json.dumps({"action": "Redrive", "dryRun": False, "from": "poison", "messages": 5, "redriven": 4,
                     "parked": 1, "archived": 0, "dropped": 0, "held": 0, "rejected": 0, "skippedByFilter": 2,
                     "failed": 0, "archivePath": None, "faultAt": None})


def job_body(name: str, status: dict, trigger: str = "drain") -> dict:
    return {"metadata": {"name": name, "creationTimestamp": "2026-11-22T10:00:00Z",
                         "labels": {"antidote.dev/consumer": "orders", "antidote.dev/reader-trigger": trigger},
                         "annotations": {"antidote.dev/reader-action": "Redrive"}},
            "status": status}


def test_job_phase_from_the_job_controllers_status() -> None:
    assert rj.job_phase({}) == ("Pending", None)
    assert rj.job_phase({"active": 1, "startTime": "x"}) == ("Running", None)
    assert rj.job_phase({"conditions": [{"type": "Complete", "status": "True"}]}) == ("Succeeded", None)
    phase, why = rj.job_phase({"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                                               "message": "too long"}]})
    assert (phase, why) == ("Failed", "DeadlineExceeded: too long")


def test_status_entries_merge_newest_first_and_events_follow_transitions() -> None:
    running = rj.job_view(job_body("orders-reader-drain-a", {"active": 1, "startTime": "2026-11-22T10:00:05Z"}))
    entry = rj.status_entry(running, None)
    QueueConsumerStatus.model_validate({"readerJobs": [entry]})  # the API accepts it
    assert entry["phase"] == "Running" and entry["trigger"] == "Manual" and entry["action"] == "Redrive"
    new = rj.merge_status([], [entry])
    (t,) = rj.transitions([], new)
    assert (t.event.reason, t.event.type, t.result) == ("ReaderJobStarted", "Normal", "started")

    done = rj.job_view(job_body("orders-reader-drain-a", {
        "startTime": "2026-11-22T10:00:05Z", "completionTime": "2026-11-22T10:00:09Z",
        "conditions": [{"type": "Complete", "status": "True"}]}))
    entry2 = rj.status_entry(done, REPORT)
    assert entry2["messages"] == 5
    assert entry2["message"] == "Redrive of poison: 5 message(s): 4 redriven, 1 parked, 2 skippedByFilter"
    newer = rj.merge_status(new, [entry2])
    (t,) = rj.transitions(new, newer)
    assert t.event.reason == "ReaderJobSucceeded" and "4 redriven" in t.event.message
    assert rj.transitions(newer, newer) == []  # a restart re-reads the status: nothing again

    failed = rj.job_view(job_body("orders-reader-drain-b", {
        "startTime": "2026-11-22T11:00:00Z",
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "exit 5"}]}))
    fault = json.dumps({**json.loads(REPORT), "faultAt": "orders.poison/0/7", "messages": 1, "redriven": 0,
                        "parked": 0, "skippedByFilter": 0, "failed": 1})
    e3 = rj.status_entry(failed, fault)
    both = rj.merge_status(newer, [e3])
    assert [e["name"] for e in both] == ["orders-reader-drain-b", "orders-reader-drain-a"]
    reasons = [(t.event.reason, t.event.type) for t in rj.transitions(newer, both)]
    assert reasons == [("ReaderJobStarted", "Normal"), ("ReaderJobFailed", "Warning")]
    dry = rj.status_entry(done, json.dumps({**json.loads(REPORT), "dryRun": True}))
    assert dry["message"].startswith("Redrive (dry run) of poison: 5 message(s), would be 4 redriven")
    assert "Fault at orders.poison/0/7" in e3["message"] and e3["message"].startswith("Failed (BackoffLimitExceeded")


def test_a_failed_job_without_a_report_says_why() -> None:
    failed = rj.job_view(job_body("j", {"conditions": [{"type": "Failed", "status": "True",
                                                        "reason": "DeadlineExceeded", "message": "m"}]}))
    n, text = rj.summarize(failed, "Traceback ...\nKafkaException: broker down")
    assert n == 0 and text == "Failed: DeadlineExceeded: m; last log line: KafkaException: broker down"


def test_status_keeps_at_most_16() -> None:
    stored = [{"name": f"j{i:02d}", "startTime": f"2026-11-22T10:{i:02d}:00Z"} for i in range(16)]
    merged = rj.merge_status(stored, [{"name": "new", "startTime": "2026-11-22T11:00:00Z"}])
    assert len(merged) == 16 and merged[0]["name"] == "new" and merged[-1]["name"] == "j01"


def test_pod_report_is_the_reader_containers_termination_message() -> None:
    pod = {"status": {"containerStatuses": [{"name": "reader", "state": {"terminated": {"exitCode": 0,
                                                                                       "message": REPORT}}}]}}
    assert rj.pod_report(pod) == REPORT
    assert rj.pod_report({"status": {"containerStatuses": [{"name": "reader", "state": {"running": {}}}]}}) is None


def test_job_index_feeds_from_events() -> None:
    idx = JobIndex()
    body = job_body("orders-reader-drain-a", {})
    idx.put("shop", body, report=REPORT)  # a ChildRunner's report of the Job's run
    assert [j.name for j in idx.of("shop", "orders")] == ["orders-reader-drain-a"]
    assert idx.reports[("shop", "orders-reader-drain-a")] == REPORT
    idx.put("shop", body, deleted=True)
    assert idx.of("shop", "orders") == [] and ("shop", "orders-reader-drain-a") not in idx.reports
    assert idx.put("shop", {"metadata": {"name": "other", "labels": {}}}) is None


def test_dev_runner_rewrites_a_reader_jobs_command_for_a_local_process() -> None:
    from antidote_devrunner.local import translate_job

    job = reader_job.build_reader_job(settings(), RenderOptions(), trigger="drain", name="n",
                              request=DrainRequest(id="r", action="Drop", dry_run=True))
    argv, env = translate_job(job["spec"]["template"]["spec"]["containers"][0],
                              settings_path="/tmp/x/settings.yaml", report_path="/tmp/x/report.json")
    assert argv[0].endswith("antidote") or argv[1:3] == ["-m", "antidote_cli.main"]
    assert argv[-8:] == ["reader", "--settings", "/tmp/x/settings.yaml", "--report-file", "/tmp/x/report.json",
                         "--action", "Drop", "--dry-run"]
    assert "/dev/termination-log" not in argv and env == {"PYTHONUNBUFFERED": "1"}
