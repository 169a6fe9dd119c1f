# The two set-up commands of the README start here; both run hack/install.sh first.
.PHONY: install demo dev-up dev-down test test-slow test-node test-images test-kind test-all unit chaos images

install:
	@bash hack/install.sh

# The whole story on the embedded stack (starts it, stops it); exits 0 only if the ledger balances.
# As root on its node (the operator, the Spark driver, its executors and the reader Job as
# pods; the first run builds the node and the images); otherwise with the dev runner.
demo: install
	.venv/bin/antidote demo $$([ "$$(id -u)" = 0 ] && echo --node)

dev-up: install
	.venv/bin/antidote dev up

dev-down:
	.venv/bin/antidote dev down

# Builds (or finds cached) the stack's binaries and jars (a warm build does nothing), then
# runs unit and integration tests on 2 pytest-xdist workers; each worker starts its own real
# stack once, for its session. The node modules (marker `node`: the chart's operator, Spark
# drivers and executors as pods, the demo on the node) are left out: with them a warm run
# took 24 min and a cold one 48 on the CI machine, over the 20 and 40 the project keeps
# (docs/testing.md); they are `make test-node`. --dist loadgroup: every test is a unit of its
# own, handed out one or two at a time to whichever worker runs low ("load" handed out large
# batches and left one worker alone with a queue of slow tests for minutes).
test: install
	.venv/bin/antidote dev build --s3
	@.venv/bin/python -m pytest -n 2 --dist loadgroup -m "not node and not kind and not slow"; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests; that is a failure" >&2; fi; \
	  exit $$rc

# The slowest stack checks (marker `slow`, ~4 minutes of tests), out of `make test` since a
# warm fresh-clone run reached 20 min 10 s (docs/testing.md): the autoscaler and a hanging
# message, the liveness of a frozen batch, key order through a SIGKILL. In `make test-all`.
test-slow: install
	.venv/bin/antidote dev build
	.venv/bin/python -m pytest -n 2 --dist loadgroup -m slow

# The node modules (root): the node, the project's images built with buildah, the chart's
# operator, Spark drivers and executors as restricted pods, the demo on the node
# (docs/node.md, "The real path on the node"). Run it after a change to the images, the
# chart, the builders or the node; `make test-all` is both suites.
test-node: install
	@[ "$$(id -u)" = 0 ] || { echo "make test-node: the node needs root (docs/node.md)" >&2; exit 1; }
	.venv/bin/antidote dev build --node --images
	.venv/bin/python -m pytest -m node

test-images: test-node

# The operator and consumer images built from docker/*.Dockerfile with docker (its daemon
# up), podman or buildah, whichever is here, and pushed as $(REGISTRY)/antidote-operator:$(TAG)
# and $(REGISTRY)/antidote-consumer:$(TAG) (docs/images.md). TAG defaults to the version;
# IMAGES_FLAGS passes more (--tool, --local-bases, --tls-verify false, --no-push).
images:
	@[ -n "$(REGISTRY)" ] || { echo "make images: give REGISTRY=host[:port][/path] (and TAG=...)" >&2; exit 2; }
	@$(MAKE) --no-print-directory install
	.venv/bin/antidote dev images --registry "$(REGISTRY)" $(if $(TAG),--tag "$(TAG)") $(IMAGES_FLAGS)

# hack/kind-up.sh for real, on podman with the node image built here, then the node's
# real-path checks on that cluster and `kind delete cluster` leaving nothing (root; docs/kind.md).
# Its own target, not in `make test`: docs/testing.md says why.
test-kind: install
	@[ "$$(id -u)" = 0 ] || { echo "make test-kind: podman and the node image need root (docs/kind.md)" >&2; exit 1; }
	.venv/bin/antidote dev build --kind
	.venv/bin/python -m pytest -m kind

test-all: test test-slow test-node

unit: install
	.venv/bin/python -m pytest tests/unit

# Chaos (benchmark-style, not part of `make test`, which runs small versions): 100 SIGKILLs
# of the consumer at random moments over 20,000 messages, some with the checkpoint lost;
# 20 SIGKILLs of the operator between pauses, resumes, drains and reconciles; the broker
# and the API server crashed and restarted under a running consumer and operator. Prints
# each part's figures (goal: 0 lost / 0 duplicated quarantine / 0 wrong attempts, 0
# duplicate Jobs, 0 Events beyond transitions, recovered by itself).
chaos: install
	.venv/bin/antidote dev build
	.venv/bin/python benchmarks/chaos.py
