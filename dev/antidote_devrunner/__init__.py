"""The dev runner: on the local stack (an API server with no kubelet), runs each consumer
Deployment's driver as a local process while its replicas are >= 1.

It plays kubelet and Deployment controller for exactly one kind of object, so the whole
loop (QueueConsumer -> Deployment -> running consumer -> metrics -> status -> disable)
runs on `antidote dev up`. It is off unless `antidote operator --dev-runner` is given, and
refuses to start when the operator runs in a pod, the API server is not on loopback, or
the cluster has a Node (a kubelet would run the same Deployment: two drivers, one queue).

What it does to the container's command, and nothing else:
- `antidote ...` runs as this Python's `antidote` (same venv);
- `--settings <mounted file>` points at a copy of the ConfigMap's settings;
- `--metrics-port` gets a free loopback port; `--master` becomes a local master; with a
  targets folder (`--dev-runner-targets`) that port is written there for Prometheus
  (targets.py) while the process runs;
- env: the operator's own, plus the container's literal `value`s except SPARK_CONF_DIR
  (the cluster-mode spark-defaults.conf does not apply to a local master);
- Secret volumes (the Kafka credentials of `secretRef`): read through the API and written to
  a private directory (0700, files 0600) that ANTIDOTE_SECRETS_DIR points at, removed when
  the process ends.

It reports back on the Deployment, as a kubelet and the Deployment controller would:
`status.availableReplicas` (once /metrics answers, like the readiness probe), and
annotations `antidote.dev/dev-runner*`: pid, metrics URL, log file, and the last exit
(`{"exitCode": 4, "finishedAt": ..., "generation": ...}`), from which the operator learns
why a consumer stopped after its /metrics went away with it.

Poison-reader Jobs get the same treatment: each runs once as a local `antidote reader`
(`--settings` a copy of the ConfigMap, `--report-file` a local file instead of the
termination log), and the runner writes what the Job controller would (status.startTime,
active, succeeded/failed, the Complete or Failed condition, completionTime) plus the
report as annotation `antidote.dev/dev-runner-report`, where a kubelet would have put it
in the pod's termination message.
"""

# The package: `runner.DevRunner` (the operator's ChildRunner, made by `runner.factory`), `deployments` and `jobs` (one local
# run each), `local` (whether it may run; a container's command, env and Secrets here),
# `annotations` (what it writes back, read back through DevRunner), `targets` (Prometheus
# file_sd). The production operator never imports this package.
