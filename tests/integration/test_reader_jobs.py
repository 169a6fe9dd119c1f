"""Reader Jobs spawned by the operator, against the real API server (and, with the dev
runner, the real reader over a poison topic filled by a real consumer)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

from kubernetes import client
import pytest

from antidote_api.names import drain_job_name

from antidote_testkit.kafka_io import produce, read_all
from antidote_testkit.operators import (ANTIDOTE, Cluster, consumer, install_crds, operator, operator_metric, policy,
                            reconciles, wait_for, wait_settled)

pytestmark = pytest.mark.integration

REPORT = {"action": "Hold", "dryRun": False, "from": "poison", "messages": 3, "redriven": 0, "parked": 0,
          "archived": 0, "dropped": 0, "held": 3, "rejected": 0, "skippedByFilter": 0, "failed": 0,
          "archivePath": None, "faultAt": None}


@pytest.fixture
def k(api_client: client.ApiClient, namespace: str) -> Cluster:
    install_crds(api_client)
    return Cluster(api_client, namespace)


def reader_jobs(k: Cluster, consumer_name: str) -> list[str]:
    batch = client.BatchV1Api(k.core.api_client)
    return sorted(j.metadata.name for j in batch.list_namespaced_job(
        k.ns, label_selector=f"antidote.dev/consumer={consumer_name},app.kubernetes.io/component=reader").items)


def status_jobs(k: Cluster, name: str) -> dict[str, dict]:
    return {e["name"]: e for e in ((k.qc(name) or {}).get("status") or {}).get("readerJobs") or []}


def annotate(k: Cluster, name: str, value: str | None) -> None:
    k.patch("queueconsumers", name, {"metadata": {"annotations": {"antidote.dev/drain": value}}})


def finish_like_the_job_controller(k: Cluster, job: str, ok: bool) -> None:
    """What kube-controller-manager and a kubelet would write (the local stack runs neither):
    the pod's termination message (the reader's report) and the Job's final status."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    batch = client.BatchV1Api(k.core.api_client)
    body = batch.read_namespaced_job(job, k.ns)
    pod = k.core.create_namespaced_pod(k.ns, {
        "metadata": {"name": f"{job}-abcde", "labels": {**body.spec.template.metadata.labels,
                                                        "batch.kubernetes.io/job-name": job}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "reader", "image": "x"}]}})
    k.core.patch_namespaced_pod_status(pod.metadata.name, k.ns, {"status": {"phase": "Succeeded" if ok else "Failed",
        "containerStatuses": [{"name": "reader", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
                               "state": {"terminated": {"exitCode": 0 if ok else 5, "message": json.dumps(
                                   REPORT if ok else {**REPORT, "faultAt": "t/0/1", "held": 0, "failed": 1}),
                                   "startedAt": now, "finishedAt": now}}}]}})
    batch.patch_namespaced_job_status(job, k.ns, {"status": {"startTime": now, "active": 1}})
    conds = ([{"type": t, "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now}
              for t in ("SuccessCriteriaMet", "Complete")] if ok else
             [{"type": t, "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the "
               "specified backoff limit", "lastTransitionTime": now} for t in ("FailureTarget", "Failed")])
    status = {"active": 0, "succeeded": 1, "completionTime": now, "conditions": conds} if ok else \
        {"active": 0, "failed": 1, "conditions": conds}
    batch.patch_namespaced_job_status(job, k.ns, {"status": status})


def test_drain_spawns_one_job_per_request_across_restarts(k: Cluster, kubeconfig: str, kafka_bootstrap: str,
                                                          tmp_path) -> None:
    k.create(policy("p", {"reader": {"action": "Hold"}}))
    k.create(consumer("orders", "p", kafka_bootstrap, "orders", paused=True))
    first = drain_job_name("orders", "r1")
    with operator(kubeconfig, k.ns, tmp_path) as op:
        k.wait_condition("orders", "Paused", "True", "UserRequested")
        annotate(k, "orders", "r1")
        wait_for(lambda: reader_jobs(k, "orders") == [first], "the drain Job")
        wait_for(lambda: "antidote.dev/drain" not in (k.qc("orders")["metadata"].get("annotations") or {}),
                 "the drain annotation consumed")
        entry = wait_for(lambda: status_jobs(k, "orders").get(first), "status.readerJobs")
        assert (entry["trigger"], entry["action"], entry["phase"]) == ("Manual", "Hold", "Pending")
        wait_for(lambda: k.event_reasons("orders").count("ReaderJobStarted") == 1, "ReaderJobStarted")
        # Least privilege: its own ServiceAccount, no API token, and nothing bound to it.
        sa = k.core.read_namespaced_service_account("orders-reader", k.ns)
        assert sa.automount_service_account_token is False
        assert not k.rbac.list_namespaced_role(k.ns).items
        assert [b.subjects[0].name for b in k.rbac.list_namespaced_role_binding(k.ns).items] == ["orders-driver"]
        job = client.BatchV1Api(k.core.api_client).read_namespaced_job(first, k.ns)
        (ref,) = job.metadata.owner_references
        assert (ref.kind, ref.name) == ("QueueConsumer", "orders")
        pod = job.spec.template.spec
        assert pod.service_account_name == "orders-reader" and pod.automount_service_account_token is False
        assert pod.containers[0].args[:5] == ["reader", "--settings", "/etc/antidote/settings.yaml",
                                              "--report-file", "/dev/termination-log"]
        # A second request waits while the first Job is active.
        before = reconciles(op)
        annotate(k, "orders", "r2")
        wait_settled(op, reconciled_past=before)
        assert reader_jobs(k, "orders") == [first]
        assert k.qc("orders")["metadata"]["annotations"]["antidote.dev/drain"] == "r2"
        assert operator_metric(op.metrics_port, "antidote_operator_reader_jobs_started_total") == 1

    # The operator went away before r2 ran; r1 is asked for again (as if the annotation had
    # not been removed before a crash): the restarted operator adopts r1's Job, makes no
    # second one, and starts r2 only once r1 is done.
    annotate(k, "orders", "r1")
    with operator(kubeconfig, k.ns, tmp_path) as op:
        wait_for(lambda: "antidote.dev/drain" not in (k.qc("orders")["metadata"].get("annotations") or {}),
                 "the repeated drain annotation consumed")
        assert reader_jobs(k, "orders") == [first]
        before = reconciles(op)
        annotate(k, "orders", "r2")
        wait_settled(op, reconciled_past=before)
        assert reader_jobs(k, "orders") == [first]
        finish_like_the_job_controller(k, first, ok=True)
        second = drain_job_name("orders", "r2")
        wait_for(lambda: reader_jobs(k, "orders") == sorted([first, second]), "r2's Job after r1 finished")
        done = wait_for(lambda: (e := status_jobs(k, "orders").get(first)) and e["phase"] == "Succeeded" and e,
                        "r1 Succeeded in status")
        assert done["messages"] == 3 and done["message"] == "Hold of poison: 3 message(s): 3 held"
        finish_like_the_job_controller(k, second, ok=False)
        failed = wait_for(lambda: (e := status_jobs(k, "orders").get(second)) and e["phase"] == "Failed" and e,
                          "r2 Failed in status")
        assert "Fault at t/0/1" in failed["message"]
        wait_for(lambda: k.event_reasons("orders").count("ReaderJobFailed") == 1, "ReaderJobFailed")
        assert list(status_jobs(k, "orders")) == [second, first]  # newest first
    reasons = k.event_reasons("orders")
    assert reasons.count("ReaderJobStarted") == 2 and reasons.count("ReaderJobSucceeded") == 1
    (ev,) = [e for e in k.events("orders") if e.reason == "ReaderJobFailed"]
    assert ev.type == "Warning" and second in ev.message

    # An unreadable request is refused with a Warning naming the field, and removed.
    annotate(k, "orders", '{"id": "x", "action": "Move"}')
    with operator(kubeconfig, k.ns, tmp_path):
        wait_for(lambda: "DrainInvalid" in k.event_reasons("orders"), "DrainInvalid")
        (ev,) = [e for e in k.events("orders") if e.reason == "DrainInvalid"]
        assert "action must be one of Redrive, Archive, Drop, Hold" in ev.message
        wait_for(lambda: "antidote.dev/drain" not in (k.qc("orders")["metadata"].get("annotations") or {}),
                 "the bad annotation removed")
        assert len(reader_jobs(k, "orders")) == 2

        # Deleting the consumer deletes its Jobs and the reader's ServiceAccount too.
        k.delete("queueconsumers", "orders")
        wait_for(lambda: k.qc("orders") is None and reader_jobs(k, "orders") == [], "Jobs deleted with it")
        assert "orders-reader" not in [s.metadata.name for s in k.core.list_namespaced_service_account(k.ns).items]


def test_poison_depth_runs_the_real_reader_with_the_dev_runner(
        k: Cluster, stack, kubeconfig: str, kafka_bootstrap: str, topic_factory, tmp_path, calls_dir) -> None:
    source = topic_factory()
    values = [b"poison-%d" % i if i in (3, 8) else b"order-%d" % i for i in range(12)]
    produce(kafka_bootstrap, source, [(b"k%d" % i, v, None) for i, v in enumerate(values)])
    # One retry cycle: the consumer exports its topics' depths from its retry pump, which a
    # policy without retry cycles does not run.
    k.create(policy("p", {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1s"},
                          "reader": {"action": "Hold", "trigger": {"poisonDepth": 2}}}))
    k.create(consumer("orders", "p", kafka_bootstrap, source, checkpoint={"location": str(tmp_path / "ckpt")}))
    env = {**stack.env(), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "ANTIDOTE_TEST_CALLS_DIR": str(calls_dir)}
    args = ("--dev-runner", "--dev-runner-dir", str(tmp_path / "dev-runner"), "--dev-runner-master", "local[1]")
    with operator(kubeconfig, k.ns, tmp_path, *args, env=env) as op:
        # The consumer quarantines 2 messages; the poison topic's depth reaches 2 and the
        # operator starts a reader Job, which the dev runner runs as `antidote reader`.
        wait_for(lambda: ((k.qc("orders").get("status") or {}).get("counts") or {}).get("moved") == 2, "2 moved", timeout=240)
        (name,) = wait_for(lambda: reader_jobs(k, "orders"), "the poisonDepth Job", timeout=60)
        assert name.startswith("orders-reader-depth-")
        entry = wait_for(lambda: (e := status_jobs(k, "orders").get(name)) and e["phase"] in ("Succeeded", "Failed")
                         and e, "the reader Job to finish", timeout=180)
        assert entry["phase"] == "Succeeded", (entry, op.log()[-3000:])
        assert (entry["trigger"], entry["action"], entry["messages"]) == ("PoisonDepth", "Hold", 2)
        # The consumer's depth is end - start offsets: transaction markers count too.
        assert entry["poisonDepth"] >= 2
        assert "2 held" in entry["message"]
        job = client.BatchV1Api(k.core.api_client).read_namespaced_job(name, k.ns)
        report = json.loads(job.metadata.annotations["antidote.dev/dev-runner-report"])
        assert (report["action"], report["messages"], report["held"]) == ("Hold", 2, 2)
        assert job.status.succeeded == 1 and job.status.completion_time is not None
        wait_for(lambda: {"ReaderJobStarted", "ReaderJobSucceeded"} <= set(k.event_reasons("orders")), "the Events")
        # Hold changes nothing: the depth is still 2, and no new poison arrived: no second Job.
        wait_settled(op)
        assert reader_jobs(k, "orders") == [name]
        assert len(read_all(kafka_bootstrap, f"{source}.poison")) == 2
        assert operator_metric(op.metrics_port, "antidote_operator_reader_jobs_started_total") == 1

        # `antidote drain --wait`: a manual Redrive, through the operator, the dev runner and
        # the real reader; the two messages go back to the source topic.
        out = subprocess.run([ANTIDOTE, "drain", "orders", "-n", k.ns, "--kubeconfig", kubeconfig,
                              "--action", "Redrive", "--request-id", "r1", "--wait", "--timeout", "180",
                              "-o", "json"], capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr + out.stdout
        doc = json.loads(out.stdout)
        assert doc["job"] == drain_job_name("orders", "r1") and doc["phase"] == "Succeeded"
        assert (doc["report"]["action"], doc["report"]["redriven"]) == ("Redrive", 2)
        redriven = [r for r in read_all(kafka_bootstrap, source) if r.offset >= 12]
        assert sorted(r.value for r in redriven) == [b"poison-3", b"poison-8"]


def test_schedule_starts_one_job_per_slot(k: Cluster, kubeconfig: str, kafka_bootstrap: str, tmp_path) -> None:
    k.create(policy("p", {"reader": {"action": "Hold", "trigger": {"schedule": "* * * * *"}}}))
    k.create(consumer("orders", "p", kafka_bootstrap, "orders", paused=True))
    with operator(kubeconfig, k.ns, tmp_path):
        # Every minute; the first slot after the consumer was created fires within ~61 s.
        (name,) = wait_for(lambda: reader_jobs(k, "orders"), "the scheduled Job", timeout=90)
        assert name.startswith("orders-reader-sched-")
        entry = wait_for(lambda: status_jobs(k, "orders").get(name), "status.readerJobs")
        assert entry["trigger"] == "Schedule"
    with operator(kubeconfig, k.ns, tmp_path) as op:
        wait_settled(op, reconciled_past=0)  # the restarted operator's resume, then its rounds
        # No kubelet runs it, so it stays active: the next slots wait, nothing doubles.
        assert reader_jobs(k, "orders") == [name]
    assert k.event_reasons("orders").count("ReaderJobStarted") == 1
