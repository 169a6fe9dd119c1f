# The consumer image: Spark driver and executors of a QueueConsumer (`antidote consumer`),
# Java 17, Python 3.11, pyspark 4.2.0, the Kafka connector jars and S3A (hadoop-aws 3.5.0 and
# the AWS SDK v2 bundle 2.35.4, for `s3a://` checkpoints, sinks and archives).
#   docker build -f docker/consumer.Dockerfile -t antidote-consumer:0.1.0 .
# Your handler goes into an image derived from this one (docs/images.md). The bases are build
# arguments so that machines without Docker build it with buildah on local stand-ins
# (`antidote dev build --images`); with Docker, the defaults are Docker Hub's images.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG MAVEN_IMAGE=maven:3.9-eclipse-temurin-17
# What the last stage starts from: the `deps` stage below. `antidote dev build` builds that
# stage on its own (`--target deps`, cached by what it copies) and passes its image here, so
# that a change to Antidote's sources rebuilds only the last stage.
ARG DEPS=deps

# The connector jars, exactly the versions of hack/spark/pom.xml, and S3A's, exactly those of
# hack/s3/pom.xml (the same poms the dev stack uses).
FROM ${MAVEN_IMAGE} AS jars
COPY hack/spark/pom.xml /build/pom.xml
RUN mvn -q -f /build/pom.xml dependency:copy-dependencies -DoutputDirectory=/jars
COPY hack/s3/pom.xml /build/s3/pom.xml
RUN mvn -q -f /build/s3/pom.xml dependency:copy-dependencies -DoutputDirectory=/jars

# Everything but Antidote itself: Java, the Python dependencies, the jars, the user.
FROM ${PYTHON_IMAGE} AS deps
# Bytecode is compiled at install (pip's default), so a pod's start does not compile its
# imports (measured: +0.4 s of CPU for the operator's, +0.2 s for pyspark's); the running
# process writes none (a non-root user, an image's files).
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
 && rm -rf /var/lib/apt/lists/* \
 && ln -sfn "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17-openjdk
# The dependencies' names come from pyproject.toml (its dependencies and the `consumer`
# extra: Spark and Arrow), their exact versions from constraints.txt (the versions tested;
# pyspark 4.2.0 is pinned in pyproject.toml too); setuptools and wheel build Antidote in the
# last stage.
WORKDIR /deps
COPY pyproject.toml constraints.txt ./
RUN python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print(*p['dependencies'], *p['optional-dependencies']['consumer'], sep='\n')" > deps.txt \
 && pip install -c constraints.txt setuptools wheel -r deps.txt \
 && rm -rf /deps
# The jars go where Spark puts its own: on the classpath of driver and executors alike.
ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark
COPY --from=jars /jars/ ${SPARK_HOME}/jars/
COPY docker/spark-entrypoint.sh /opt/antidote/entrypoint.sh
RUN groupadd --gid 10001 antidote && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin antidote

# Antidote itself (its dependencies are in place: nothing else is fetched).
FROM ${DEPS}
WORKDIR /src
# The folders of what runs here (docs/architecture.md): the contracts, the data plane and the
# handlers' API, and the CLI its pods start (`antidote consumer`, `antidote reader`); never
# the operator or dev/.
COPY README.md pyproject.toml ./
COPY api/ api/
COPY consumer/ consumer/
COPY cli/ cli/
RUN pip install --no-deps --no-build-isolation . && rm -rf /src
USER 10001:10001
WORKDIR /home/antidote
ENV PYSPARK_PYTHON=python3 SPARK_USER=antidote
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/antidote/entrypoint.sh"]
CMD ["antidote", "consumer", "--help"]
