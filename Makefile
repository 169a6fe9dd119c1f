# The two set-up commands of the README start here; both run hack/install.sh first.
.PHONY: install demo dev-up dev-down test test-images unit chaos

install:
	@bash hack/install.sh

# The whole story on the embedded stack (starts it, stops it); exits 0 only if the ledger balances.
demo: install
	.venv/bin/antidote demo

dev-up: install
	.venv/bin/antidote dev up

dev-down:
	.venv/bin/antidote dev down

# Builds (or finds cached) binaries and jars (as root also the node's, for
# tests/integration/test_node.py, which needs root), then runs unit and integration tests on 2
# pytest-xdist workers; each worker starts its own real stack once, for its session. With
# worksteal a worker that runs out of tests takes half of the other's queue: "load" left
# one worker alone with its queue of slow tests for minutes.
test: install
	.venv/bin/antidote dev build $$([ "$$(id -u)" = 0 ] && echo --node)
	@.venv/bin/python -m pytest -n 2 --dist worksteal -m "not images"; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests; that is a failure" >&2; fi; \
	  exit $$rc

# The project's images built with buildah and run on the node, and the real path with them
# (the chart's operator pod, drivers and executors as pods, reader Jobs; root; minutes cold,
# so not in `make test`: docs/node.md, "The real path on the node"; docs/images.md).
test-images: install
	.venv/bin/antidote dev build --node --images
	.venv/bin/python -m pytest -m images

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
