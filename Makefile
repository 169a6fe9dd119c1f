# The two set-up commands of the README start here; both run hack/install.sh first.
.PHONY: install demo dev-up dev-down test unit chaos

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
	@.venv/bin/python -m pytest -n 2 --dist worksteal; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests; that is a failure" >&2; fi; \
	  exit $$rc

unit: install
	.venv/bin/python -m pytest tests/unit

# Chaos for the consumer (benchmark-style, not part of `make test`, which runs a small
# version): 100 SIGKILLs at random moments over 20,000 messages, some with the checkpoint
# lost; prints lost / duplicated quarantine / wrong attempts (goal 0 / 0 / 0).
chaos: install
	.venv/bin/antidote dev build
	.venv/bin/python benchmarks/chaos.py
