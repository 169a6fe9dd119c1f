#!/bin/sh
# Entry point of the consumer image. Spark on Kubernetes starts executor pods from this
# image with the single argument `executor` and describes the executor in environment
# variables; anything else runs as given (the driver Deployment runs `antidote consumer`).
set -e
if [ "$1" != "executor" ]; then
  exec "$@"
fi
# SPARK_JAVA_OPT_<n>: the executor's Java options, in order.
set --
for i in $(env | sed -n 's/^SPARK_JAVA_OPT_\([0-9]*\)=.*/\1/p' | sort -n); do
  eval "set -- \"\$@\" \"\$SPARK_JAVA_OPT_$i\""
done
# spark.master: Spark reads the RPC secret from spark.authenticate.secret.file (which the
# driver passes in SPARK_JAVA_OPT_<n>) only when the master is a k8s:// one, and does not
# pass the master itself to executors; without it an executor cannot authenticate to the
# driver ("A secret key must be specified via the spark.authenticate.secret config").
exec "$JAVA_HOME/bin/java" -Dspark.master=k8s://https://kubernetes.default.svc "$@" \
  -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
  -cp "$SPARK_HOME/jars/*:${SPARK_CLASSPATH:-}:${SPARK_DIST_CLASSPATH:-}" \
  org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
  --driver-url "$SPARK_DRIVER_URL" \
  --executor-id "$SPARK_EXECUTOR_ID" \
  --cores "$SPARK_EXECUTOR_CORES" \
  --app-id "$SPARK_APPLICATION_ID" \
  --hostname "$SPARK_EXECUTOR_POD_IP" \
  --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
  --podName "$SPARK_EXECUTOR_POD_NAME"
