"""The real path, on the stack's node: the chart's operator pod reconciles QueueConsumers
whose Spark drivers run as pods with `--master k8s://https://kubernetes.default.svc` and
create their executors as pods, in a namespace labelled `pod-security.kubernetes.io/enforce:
restricted` (the API server's Pod Security admission judges every pod Antidote creates).

Handlers come from an image derived from the consumer image (tests/integration/
handlers_image/, the way docs/images.md tells users to ship theirs), named in
`spec.spark.image`. The chart is installed with hack/local-images.values.yaml, the file
hack/kind-up.sh installs it with. Each test creates its consumer and deletes it (with its
pods) before the next: the node has two CPUs and a driver asks for one.

Markers `node` and `images` (`make test-node`; why it is not in `make test`:
docs/testing.md, "What make test leaves out"); root only, one node per machine.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections import Counter

import yaml
from kubernetes import client

from antidote_api.autoscale import NO_LAG_YET

from antidote_testkit import consumers as cu
from antidote_testkit.kafka_io import produce, read_all
from .jvm_archive import C1_ONLY
from .node_cluster import EXECUTORS, MASTER, NODE_IMAGES, RELEASE, ROOT, Cluster, _run
from .node_util import RESTRICTED, phase, pod, restricted_container, restricted_namespace, wait

pytestmark = NODE_IMAGES


def test_consumer_image_runs_a_consumer_as_a_restricted_pod(cluster: Cluster) -> None:
    """The consumer image alone, as docs/images.md tells users to derive it (the test
    handlers' image): `antidote consumer --until-idle --master local[1]` through the image's
    own entrypoint (tini, then spark-entrypoint.sh) as a plain pod, with only what the image
    brings (no ANTIDOTE_SPARK_JARS, no checkout, no venv), no operator."""
    c = cluster
    ns = restricted_namespace(c.core, "images")
    # Ten messages, one of them poison: no retries, so it is quarantined at once.
    source = f"images-{uuid.uuid4().hex[:6]}"
    sink = f"{source}-out"
    c.topics(source, sink)
    produce(c.bootstrap, source, [(b"k%d" % i, b"poison" if i == 4 else b"m%d" % i, None)
                                  for i in range(10)])
    qc = {"apiVersion": "antidote.dev/v1alpha1", "kind": "QueueConsumer",
          "metadata": {"name": "img", "namespace": ns},
          "spec": {"policyRef": {"name": "pp"},
                   "source": {"kafka": {"bootstrapServers": c.bootstrap, "topic": source}},
                   "handler": "antidote_test_handlers:upper",
                   "sink": {"kafka": {"topic": sink}},
                   "checkpoint": {"location": "/tmp/checkpoint"},
                   "spark": {"conf": {"spark.driver.extraJavaOptions": C1_ONLY}}}}
    pp = {"apiVersion": "antidote.dev/v1alpha1", "kind": "PoisonPolicy",
          "metadata": {"name": "pp", "namespace": ns},
          "spec": {"retries": {"immediate": 0, "cycles": 0}}}
    c.core.create_namespaced_config_map(ns, {
        "metadata": {"name": "manifests"},
        "data": {"qc.yaml": yaml.safe_dump(qc), "pp.yaml": yaml.safe_dump(pp)}})
    container = restricted_container("consumer", c.image)
    container["args"] = ["antidote", "consumer", "--consumer", "/manifests/qc.yaml",
                         "--policy", "/manifests/pp.yaml", "--until-idle",
                         "--master", "local[1]", "--trigger-interval", "0.5"]
    container["volumeMounts"] = [{"name": "manifests", "mountPath": "/manifests"}]
    spec = pod("consumer", container)
    spec["spec"]["volumes"] = [{"name": "manifests", "configMap": {"name": "manifests"}}]
    c.core.create_namespaced_pod(ns, spec)
    try:
        result = wait("consumer pod finished", phase(c.core, ns, "consumer", {"Succeeded", "Failed"}), 420)
        log = c.core.read_namespaced_pod_log("consumer", ns)
        assert result == "Succeeded", f"consumer pod {result}; log:\n{log[-4000:]}"
    finally:
        # A pod left running by a failure would hold the CPU the next test's driver asks for.
        c.core.delete_namespace(ns)

    # Its outcome, in Kafka: nine handled, the poison quarantined once with its headers.
    outputs = sorted(r.value for r in read_all(c.bootstrap, sink))
    assert outputs == sorted(b"M%d" % i for i in range(10) if i != 4), outputs
    poison = cu.quarantined(c.bootstrap, f"{source}.poison")
    assert list(poison) == [(0, 4)], poison
    record, headers = poison[(0, 4)]
    assert record.value == b"poison" and headers["antidote.attempts"] == "1", headers


def test_driver_and_executors_run_as_restricted_pods_then_a_reader_job(cluster: Cluster) -> None:
    """The driver pod runs Spark against the API server, Spark creates the executor pods;
    messages flow source -> handler (on the executors) -> sink, poison lands in
    `<source>.poison` with its headers; `antidote drain` starts a reader Job that the Job
    controller runs as a pod, and its report reaches status from the termination message."""
    c = cluster
    # Step 1: the chart's operator runs as a pod under the chart's ServiceAccount (its RBAC,
    # not system:masters), Ready by the chart's own probes.
    (operator,) = c.core.list_namespaced_pod(c.system, label_selector="app.kubernetes.io/component=operator").items
    assert operator.spec.service_account_name == RELEASE, operator.spec.service_account_name
    assert [x.status for x in operator.status.conditions if x.type == "Ready"] == ["True"], operator.status
    source = f"flow-{uuid.uuid4().hex[:6]}"
    sink = f"{source}-out"
    c.topics(source, sink, partitions=2)
    produce(c.bootstrap, source, [(b"k%d" % i, b"poison" if i == 7 else b"m%d" % i, None)
                                  for i in range(40)])
    started = time.monotonic()
    with c.consumer("orders", source, "antidote_test_handlers:upper",
                    {"retries": {"immediate": 0, "cycles": 0}}, sink={"kafka": {"topic": sink}}):
        executors = wait(f"{EXECUTORS} executor pods Running",
                         lambda: c.running("orders", "executor", EXECUTORS), 300)
        (driver,) = wait("the driver pod Running", lambda: c.running("orders", "driver", 1), 60)
        assert MASTER in driver.spec.containers[0].args, driver.spec.containers[0].args
        assert driver.spec.service_account_name == "orders-driver"
        for p in executors:
            # Owned by the driver pod (they go with it), under the tokenless executor account.
            assert [o.name for o in p.metadata.owner_references] == [driver.metadata.name]
            assert p.spec.service_account_name == "orders-executor"
            assert p.spec.automount_service_account_token is False
            assert p.spec.containers[0].image == c.image
            # The RPC secret comes from the mounted file, never from the pod's environment.
            assert "SPARK_AUTHENTICATE_SECRET" not in {e.name for e in p.spec.containers[0].env}

        outputs = wait("39 outputs in the sink",
                       lambda: (r := read_all(c.bootstrap, sink)) and len(r) >= 39 and r, 300)
        assert sorted(r.value for r in outputs) == sorted(b"M%d" % i for i in range(40) if i != 7)
        poison = wait("the poison record", lambda: read_all(c.bootstrap, f"{source}.poison",
                                                            missing_ok=True), 60)
        assert [r.value for r in poison] == [b"poison"]
        headers = {k: v.decode() for k, v in poison[0].headers}
        assert headers["antidote.original.topic"] == source
        assert headers["antidote.attempts"] == "1" and headers["antidote.error.class"] == "ValueError"
        assert headers["antidote.consumer"] == f"{c.ns}/orders"
        flowed = time.monotonic() - started
        # The handler ran on the executors (tasks there), not in the driver.
        logs = [c.core.read_namespaced_pod_log(p.metadata.name, c.ns) for p in executors]
        assert any("Finished task" in log for log in logs), logs[0][-2000:]
        # The operator (a pod) scraped the driver's /metrics through its Service's DNS name.
        wait("status counts", lambda: c.counts("orders").get("processed") == 39
             and c.counts("orders").get("poisoned") == 1, 120)
        # Ready follows the driver pod's readiness probe, which may pass after the counts.
        wait("Ready=True (Running)", lambda: c.condition("orders", "Ready") == ("True", "Running"), 120)
        # The driver's RoleBinding to the chart's ClusterRole is all it needed: no API call
        # of Spark's was refused.
        driver_log = c.core.read_namespaced_pod_log(driver.metadata.name, c.ns)
        assert "Forbidden" not in driver_log and " 403 " not in driver_log, driver_log[-3000:]

        # A drain: a reader Job, run by the Job controller as a pod, to completion.
        c.antidote("drain", "orders", "-n", c.ns, "--action", "Hold", "--wait", "--timeout", "300")
        jobs = client.BatchV1Api(c.api).list_namespaced_job(
            c.ns, label_selector="antidote.dev/consumer=orders").items
        assert len(jobs) == 1 and jobs[0].status.succeeded == 1, jobs
        (reader,) = c.core.list_namespaced_pod(c.ns, label_selector=f"job-name={jobs[0].metadata.name}").items
        assert reader.status.phase == "Succeeded"
        report = json.loads(reader.status.container_statuses[0].state.terminated.message)
        (recorded,) = c.qc("orders")["status"]["readerJobs"]
        assert recorded["name"] == jobs[0].metadata.name and recorded["phase"] == "Succeeded", recorded
        assert recorded["messages"] == 1 == report["messages"], (recorded, report)
        c.no_pod_security_refusals()
    print(f"node path: 40 messages through 2 executors in {flowed:.0f}s from apply")


def _audit(c: Cluster, source: str, sink: str) -> tuple[dict, Counter, Counter]:
    """Every source offset's outcomes: the sink by the outputs' keys (an output keeps its
    input's key), the poison topic by its original partition and offset headers."""
    src = {(r.partition, r.offset): r for r in read_all(c.bootstrap, source)}
    by_key = {r.key: where for where, r in src.items()}
    outputs = Counter(by_key[r.key] for r in read_all(c.bootstrap, sink))
    quarantined: Counter = Counter()
    for r in read_all(c.bootstrap, f"{source}.poison", missing_ok=True):
        h = {k: v.decode() for k, v in r.headers}
        quarantined[(int(h["antidote.original.partition"]), int(h["antidote.original.offset"]))] += 1
    return src, outputs, quarantined


def test_driver_pod_killed_mid_stream_loses_nothing_and_quarantines_nothing_twice(cluster: Cluster) -> None:
    c = cluster
    source = f"kill-{uuid.uuid4().hex[:6]}"
    sink = f"{source}-out"
    c.topics(source, sink, partitions=2)
    n = 3000
    produce(c.bootstrap, source, [(b"k%d" % i, b"poison-%d" % i if i % 300 == 150 else b"m%d" % i, None)
                                  for i in range(n)])
    # 10 ms a message and batches of 250: the stream takes long enough to be killed in,
    # after its first batches. One retry cycle 20 s away: the driver is killed while poison
    # messages wait in retry-1, so the new driver must run each of them once more, no more.
    retry = f"{source}.retry-1"
    with c.consumer("kill", source, "antidote_test_handlers:slow_upper",
                    {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "20s"}},
                    sink={"kafka": {"topic": sink}}, max_batch=250):
        (driver,) = wait("the driver pod Running", lambda: c.running("kill", "driver", 1), 300)
        written = wait("500 outputs in the sink and a retry record waiting",
                       lambda: (k := len(read_all(c.bootstrap, sink))) >= 500
                       and read_all(c.bootstrap, retry, missing_ok=True) and k, 300)
        waiting = len(read_all(c.bootstrap, retry))
        c.kubectl("delete", "pod", driver.metadata.name, "-n", c.ns, "--grace-period=0", "--force")
        assert written < n - 10, f"the stream had ended ({written} outputs) before the kill"
        wait("a new driver pod Running", lambda: (p := c.running("kill", "driver", 1))
             and p[0].metadata.name != driver.metadata.name, 300)

        def settled() -> bool:
            src, outputs, quarantined = _audit(c, source, sink)
            return all(w in outputs or w in quarantined for w in src)

        wait("every source offset in the sink or the poison topic", settled, 600)
    src, outputs, quarantined = _audit(c, source, sink)
    poison = {w for w, r in src.items() if r.value.startswith(b"poison")}
    assert len(src) == n
    assert set(quarantined) == poison, sorted(set(quarantined) ^ poison)
    assert [w for w, k in quarantined.items() if k > 1] == [], "quarantined twice"
    # Exact attempts across the kill: the first delivery and the one retry cycle, (0+1)(1+1).
    attempts = [dict(r.headers)["antidote.attempts"] for r in read_all(c.bootstrap, f"{source}.poison")]
    assert attempts == [b"2"] * len(poison), attempts
    assert not set(outputs) & poison
    lost = [w for w in src if w not in outputs and w not in quarantined]
    assert lost == []
    # The sink is exactly-once (read_committed): the driver pod's kill wrote nothing twice.
    assert [w for w, k in outputs.items() if k > 1] == [], "in the sink twice"
    print(f"driver killed after {written} of {n} outputs, {waiting} retry record(s) waiting; "
          "sink duplicates: 0")


def _executors(c: Cluster, name: str) -> dict:
    return c.qc(name).get("status", {}).get("executors") or {}


def _scale_events(c: Cluster) -> list[str]:
    """Every Event of the consumer, in order, for a failure's message."""
    return [f"{e.last_timestamp or e.event_time} {e.reason} x{e.count}: {e.message}"
            for e in sorted(c.events("scale"), key=lambda e: str(e.last_timestamp or e.event_time))]


def _scaled(c: Cluster, driver: client.V1Pod, reason: str, before: int, after: int) -> client.V1Pod:
    """The count written to status, one `reason` Event (posted after the status), then a new
    driver pod whose executor pods number `after`; returns that driver pod."""
    t0 = time.monotonic()
    st = wait(f"the count {after} in status", lambda: (e := _executors(c, "scale")).get("current") == after
              and e, 120)
    decided = time.monotonic() - t0
    # By the time this reads status, the operator may have moved past `reason`: the restarted
    # driver has not reported its partitions yet (NoLagReading), or it has (Steady, LagBlocked).
    assert st["lastScaleTime"] and st["reason"] in (reason, NO_LAG_YET, "Steady", "LagBlocked"), st
    events = wait(f"the {reason} Event", lambda: [e for e in c.events("scale") if e.reason == reason], 30)
    assert len(events) == 1, _scale_events(c)
    direction = "up" if after > before else "down"
    assert f"Scaled {direction} from {before} to {after}" in events[0].message, events[0].message
    wait(f"a new driver pod with {after} executor pod(s)", lambda: (d := c.running("scale", "driver", 1))
         and d[0].metadata.name != driver.metadata.name and len(c.executor_pods("scale")) == after, 300)
    (new,) = c.running("scale", "driver", 1)
    print(f"{reason}: decided after {decided:.0f}s, a new driver pod with {after} executor pod(s) "
          f"{time.monotonic() - t0 - decided:.0f}s later")
    return new


def test_autoscale_scales_executor_pods_up_and_down(cluster: Cluster) -> None:
    """`spec.spark.autoscale` on the node: the operator pod reads the driver pod's partition
    lag (its /metrics at the headless Service), decides, and the driver pod restarts with
    the new `spark.executor.instances`, for which Spark creates executor pods.
    1. A backlog on both partitions scales the consumer up to 2: Spark's executor pods reach 2;
    2. with the backlog worked off, after the scale-down cool-down, back to 1 executor pod.
    A hanging message holding the lag (`LagBlocked`, no scale-up) is the same operator code
    on any cluster: test_operator_autoscale.py proves it on the API server, without the 40-s
    hang and a driver pod's restart here."""
    c = cluster
    source = f"scale-{uuid.uuid4().hex[:6]}"
    sink = f"{source}-out"
    c.topics(source, sink, partitions=2)
    backlog = 1500  # per partition; at 10 ms a message, tens of seconds of work
    policy = {"retries": {"immediate": 0, "cycles": 1, "cycleDelay": "1h"}}
    # The scale-down cool-down outlasts a driver pod's restart (9-11 s measured; 38-45 s while
    # the old driver ran on through the backlog after its SIGTERM): the test must see the
    # 2-executor driver before the count goes back down.
    autoscale = {"min": 1, "max": 2, "targetLagPerExecutor": 200,
                 "scaleUpCooldown": "0s", "scaleDownCooldown": "60s"}
    produce(c.bootstrap, source, [(b"w0", b"warm-up", None)], partition=0)
    produce(c.bootstrap, source, [(b"w1", b"warm-up", None)], partition=1)
    with c.consumer("scale", source, "antidote_test_handlers:slow_or_hang", policy,
                    sink={"kafka": {"topic": sink}}, max_batch=200,
                    spark={"executor": {"instances": 1, "memory": "512m"}, "autoscale": autoscale}):
        wait("the warm-up processed", lambda: c.counts("scale").get("processed") == 2, 300)
        st = wait("status.executors from the first reading",
                  lambda: (e := _executors(c, "scale")).get("reason") == "Steady" and e, 60)
        assert (st["current"], st["desired"]) == (1, 1), st
        (driver,) = c.running("scale", "driver", 1)
        assert len(wait("1 executor pod", lambda: c.executor_pods("scale"), 60)) == 1

        # 1. A backlog on both partitions: 3,000 records at 200 per executor ask for the
        # maximum, 2.
        for p in (0, 1):
            produce(c.bootstrap, source, [(b"p%d-%d" % (p, i), b"m%d" % i, None) for i in range(backlog)],
                    partition=p)
        driver = _scaled(c, driver, "ScaledUp", 1, 2)

        # 2. The backlog worked off, then down.
        t0 = time.monotonic()
        wait("the backlog processed", lambda: c.counts("scale").get("processed") == 2 + 2 * backlog, 300)
        print(f"the backlog processed after {time.monotonic() - t0:.0f}s more")
        _scaled(c, driver, "ScaledDown", 2, 1)
        assert not c.counts("scale").get("retried")
        assert read_all(c.bootstrap, f"{source}.poison", missing_ok=True) == []
        c.no_pod_security_refusals()


def test_the_demo_on_the_node_runs_to_a_balanced_ledger(cluster: Cluster, tmp_path) -> None:
    """`antidote demo --node` (what `make demo` runs as root) on this stack: the chart's
    operator pod (the demo finds the release installed), the driver, its executors and the
    reader Job as pods in a `restricted` namespace, the accounts service a Deployment it
    scales to 0 for the outage, the archive on a PersistentVolumeClaim read from the host."""
    c = cluster
    env = {**c.env, "ANTIDOTE_STACK_DIR": str(c.stack.dir)}
    proc = subprocess.run([str(ROOT / ".venv/bin/antidote"), "demo", "--node", "--workdir", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=1200)
    out = proc.stdout
    assert proc.returncode == 0, f"demo exited {proc.returncode}\n{out[-5000:]}\n{proc.stderr[-3000:]}"
    assert "ledger: BALANCED" in out and "reports produced            450" in out
    assert "Using the chart already installed: release antidote" in out
    for reason in ("PoisonDetected", "QueueDisabled", "Resumed", "ReaderJobSucceeded"):
        assert reason in out, f"no {reason} Event in the demo's report"
    # Step 3 of the real path: the outage disabled the queue (a Warning), the Deployment went
    # to 0 and its pods away (the demo waits for both), `antidote resume` brought them back.
    assert re.search(r"^\s+Warning\s+QueueDisabled\s", out, re.M), out[-3000:]
    assert "$ antidote resume expenses-" in out and "$ antidote drain expenses-" in out
    # The narration shows `kubectl get pods`: Spark's executor pods Running while the
    # reports flow, the reader Job's pod Completed after the drain.
    pods = [line.split()[:3] for line in out.splitlines() if line.strip().startswith("expenses-")]
    assert any("-exec-" in p[0] and p[2] == "Running" for p in pods), pods
    assert any("-reader-drain-" in p[0] and p[2] == "Completed" for p in pods), pods
    # The reader Job's pod wrote the archive to the claim; the host reads it from the volume.
    assert list((tmp_path / "volume" / "archive").rglob("*.parquet")), out[-3000:]
    # Nothing of the demo is left on the stack it did not start.
    assert not [n for n in c.core.list_namespace().items
                if n.metadata.name.startswith("antidote-demo-") and n.status.phase == "Active"]
    # The PersistentVolume goes once its claim has (pv-protection), with the namespace.
    wait("the demo's PersistentVolume gone", lambda: not [
        pv for pv in c.core.list_persistent_volume().items if pv.metadata.name.startswith("antidote-demo-")], 180)


def test_helm_uninstall_leaves_nothing_but_the_crds(cluster: Cluster) -> None:
    """Last: the consumers are gone (each test deleted its own), then `helm uninstall`."""
    c = cluster
    _run(c.env, "helm", "uninstall", RELEASE, "-n", c.system, "--wait", "--timeout", "180s")
    # --wait waits for the Deployment, not for its pod's graceful end.
    wait("the operator pod gone", lambda: not c.core.list_namespaced_pod(c.system).items, 120)
    left = []
    for ns in (c.system, c.ns):
        names = c.kubectl("get", "all,configmaps,secrets,serviceaccounts,roles,rolebindings,jobs,"
                          "poddisruptionbudgets,queueconsumers,poisonpolicies", "-n", ns, "-o", "name")
        # What every namespace has: its default ServiceAccount and the root CA's ConfigMap.
        left += [f"{ns}: {n}" for n in names.split()
                 if n not in ("serviceaccount/default", "configmap/kube-root-ca.crt")]
    cluster_wide = c.kubectl("get", "clusterroles,clusterrolebindings,clusterkopfpeerings",
                             "-o", "name").split()
    # The stack's own CoreDNS runs as `antidote:coredns` (docs/node.md): not the chart's.
    left += [n for n in cluster_wide if "antidote" in n and not n.endswith("/antidote:coredns")]
    assert left == [], left
    crds = c.kubectl("get", "crds", "-o", "name").split()
    assert {"customresourcedefinition.apiextensions.k8s.io/queueconsumers.antidote.dev",
            "customresourcedefinition.apiextensions.k8s.io/poisonpolicies.antidote.dev"} <= set(crds)
    assert RESTRICTED.items() <= (c.core.read_namespace(c.ns).metadata.labels or {}).items()
