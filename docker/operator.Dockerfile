# The operator image: `antidote operator` (and the rest of the CLI), non-root.
#   docker build -f docker/operator.Dockerfile -t antidote-operator:0.1.0 .
# Built from the repository root (see .dockerignore). The base is a build argument so that
# machines without Docker build it with buildah on a local stand-in (`antidote dev build
# --images`, docs/images.md); with Docker, the default is Docker Hub's image.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# What the last stage starts from: the `deps` stage below. `antidote dev build` builds that
# stage on its own (`--target deps`, cached by what it copies) and passes its image here, so
# that a change to Antidote's sources rebuilds only the last stage.
ARG DEPS=deps

# Everything but Antidote itself: the Python dependencies, the user.
FROM ${PYTHON_IMAGE} AS deps
# Bytecode is compiled at install (pip's default), so a pod's start does not compile its
# imports (measured: +0.4 s of CPU for the operator's, +0.2 s for pyspark's); the running
# process writes none (a non-root user, an image's files).
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The operator does not run Spark: the `consumer` extra (pyspark, pyarrow, pandas: ~800 MB)
# stays out. Names from pyproject.toml's dependencies, exact versions from constraints.txt
# (the versions tested); setuptools and wheel build Antidote in the last stage.
WORKDIR /deps
COPY pyproject.toml constraints.txt ./
RUN python3 -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" > deps.txt \
 && pip install -c constraints.txt setuptools wheel -r deps.txt \
 && rm -rf /deps
RUN groupadd --gid 10001 antidote && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin antidote

# Antidote itself (its dependencies are in place: nothing else is fetched): the folders of
# what runs here (docs/architecture.md), never dev/. The contracts, the operator, the CLI, and
# the data plane's pure-Python half that the on-call commands read the ledger and the poison
# topics with (its Spark half stays unimported: no pyspark here).
FROM ${DEPS}
WORKDIR /src
COPY README.md pyproject.toml ./
COPY api/ api/
COPY operator/ operator/
COPY consumer/ consumer/
COPY cli/ cli/
RUN pip install --no-deps --no-build-isolation . && rm -rf /src
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["antidote"]
CMD ["operator", "--help"]
