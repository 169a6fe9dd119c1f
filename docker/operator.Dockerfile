# The operator image: `antidote operator` (and the rest of the CLI), non-root.
#   docker build -f docker/operator.Dockerfile -t antidote-operator:0.1.0 .
# Built from the repository root (see .dockerignore). Not buildable on the dev machines
# (no Docker engine); see docs/images.md.
FROM python:3.11-slim-bookworm

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
