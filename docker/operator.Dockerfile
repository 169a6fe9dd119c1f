# The operator image: `antidote operator` (and the rest of the CLI), non-root.
#   docker build -f docker/operator.Dockerfile -t antidote-operator:0.1.0 .
# Built from the repository root (see .dockerignore). The base is a build argument so that
# machines without Docker build it with buildah on a local stand-in (`antidote dev build
# --images`, docs/images.md); with Docker, the default is Docker Hub's image.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY consumer/ consumer/
# The operator does not run Spark, but the distribution depends on pyspark (one package for
# every command); the wheel is pure Python, no JVM is needed to import the operator.
RUN pip install --no-compile . && rm -rf /src

RUN groupadd --gid 10001 antidote && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin antidote
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["antidote"]
CMD ["operator", "--help"]
