#!/usr/bin/env bash
# Idempotent set-up shared by both README commands: the Python venv in .venv/ and the
# project installed into it. Heavy artefacts (Go binaries, jars) are built by
# `antidote dev build` and cached outside the clone, in ~/.cache/antidote.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required"' \
  || { echo "install: Python >= 3.11 is required (found $("$PY" --version 2>&1))" >&2; exit 1; }
# The editable install maps top-level packages when it runs: a new package re-installs.
stamp=.venv/.installed-$( (cat pyproject.toml constraints.txt; ls -d api/*/ operator/*/ consumer/*/ cli/*/ dev/*/) | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "==> install: creating .venv and installing antidote (first run downloads pyspark, ~300 MB)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  # constraints.txt pins every package to the versions tested (hack/lock.py writes it),
  # the installer and the build backend included: Antidote is built without an isolated
  # environment, which would fetch the newest setuptools.
  .venv/bin/python -m pip install -q -c constraints.txt pip setuptools wheel
  # pip's own bytecode step compiles one file after another (a fresh install took 74 s with
  # it, 39 s without); compileall below does the same work on every core.
  # (setuptools warns about every editable install in a folder holding its packages: ours.)
  PYTHONWARNINGS="ignore:Editable installation" \
  .venv/bin/python -m pip install -q --no-compile --progress-bar off --no-build-isolation \
    -c constraints.txt -e '.[dev]'
  # Bytecode for everything installed, written now: with PYTHONDONTWRITEBYTECODE set (as
  # in many CI and container environments) Python never writes it, and every process (each
  # CLI call, operator, consumer and pyspark worker daemon) compiled its imports from
  # source again: ~1.6 s of CPU for `antidote resume` alone.
  .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null
  rm -f .venv/.installed-*
  touch "$stamp"
fi
# Antidote's own modules (editable: imported from the clone), for the same reason; only
# those changed since the last run are compiled again.
.venv/bin/python -m compileall -q -j 0 operator consumer >/dev/null
# Debian's `prometheus` package: promtool runs the alert rule tests (tests/integration/test_alerts.py),
# prometheus is `antidote dev up --prometheus` (tests/integration/test_prometheus.py).
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "==> install: installing prometheus and promtool (Debian package prometheus)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    # Only the alert rule tests and `dev up --prometheus` need it, and they fail naming it:
    # the demo runs without it.
    echo "install: warning: prometheus/promtool missing; the alert tests and 'antidote dev up --prometheus' need Debian's 'prometheus' package (sudo apt-get install prometheus)" >&2
  fi
fi
