#!/usr/bin/env bash
# Antidote on kind: with Docker, or with podman and what `antidote dev build --kind` built
# (`. ~/.cache/antidote/kind/env.sh` first; `make test-kind` runs it so). Docs: docs/kind.md.
#   hack/kind-up.sh            # cluster "antidote", images, helm install, examples
#   KIND_CLUSTER=foo hack/kind-up.sh
# The chart is installed with hack/local-images.values.yaml, the values the local stack's
# node installs it with too (docs/node.md): images named localhost/antidote/*, tagged with
# the chart's appVersion, never pulled.
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=${KIND_CLUSTER:-antidote}
tag=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/antidote/Chart.yaml)
# Without Docker (docs/kind.md): KIND_NODE_IMAGE names the node image and
# ANTIDOTE_IMAGE_ARCHIVES the images' OCI archives, as `antidote dev build --kind` writes them.
archives=${ANTIDOTE_IMAGE_ARCHIVES:-}
for tool in $([ -n "$archives" ] || echo docker) kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "kind-up: $tool is required" >&2; exit 1; }
done

kind get clusters | grep -qx "$cluster" || kind create cluster --name "$cluster" --wait 120s \
  ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
if [ -n "$archives" ]; then
  for archive in $archives; do kind load image-archive --name "$cluster" "$archive"; done
else
  docker build -f docker/operator.Dockerfile -t "localhost/antidote/operator:$tag" .
  docker build -f docker/consumer.Dockerfile -t "localhost/antidote/consumer:$tag" .
  kind load docker-image --name "$cluster" "localhost/antidote/operator:$tag" "localhost/antidote/consumer:$tag"
fi

helm upgrade --install antidote charts/antidote -n antidote --create-namespace --wait \
  --kube-context "kind-$cluster" -f hack/local-images.values.yaml

# The examples' policies apply as they are; their consumers name a Kafka and handlers you
# provide (docs/kind.md), so they are applied paused.
kubectl --context "kind-$cluster" apply -f examples/poisonpolicy-minimal.yaml -f examples/poisonpolicy-full.yaml
# POSIX awk, not GNU sed's `\n` in a replacement (BSD sed on macOS writes an `n`): each
# `spec:` gets `paused: true` as its first field, and a `paused:` already there is left out.
for f in examples/queueconsumer-*.yaml; do
  awk '/^  paused:/ { next } { print } /^spec:$/ { print "  paused: true" }' "$f" \
    | kubectl --context "kind-$cluster" apply -f -
done
kubectl --context "kind-$cluster" get poisonpolicies,queueconsumers
echo "kind-up: done. Next: docs/kind.md (a Kafka, your handler image, unpause a consumer)."
