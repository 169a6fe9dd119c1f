# The consumer image: Spark driver and executors of a QueueConsumer (`antidote consumer`),
# Java 17, Python 3.11, pyspark 4.2.0 and the Kafka connector jars.
#   docker build -f docker/consumer.Dockerfile -t antidote-consumer:0.1.0 .
# Your handler goes into an image derived from this one (docs/images.md). The bases are build
# arguments so that machines without Docker build it with buildah on local stand-ins
# (`antidote dev build --images`); with Docker, the defaults are Docker Hub's images.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG MAVEN_IMAGE=maven:3.9-eclipse-temurin-17

# The connector jars, exactly the versions of hack/spark/pom.xml (the same pom the dev stack uses).
FROM ${MAVEN_IMAGE} AS jars
COPY hack/spark/pom.xml /build/pom.xml
RUN mvn -q -f /build/pom.xml dependency:copy-dependencies -DoutputDirectory=/jars

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
 && rm -rf /var/lib/apt/lists/* \
 && ln -sfn "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17-openjdk

WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY consumer/ consumer/
# pyspark==4.2.0 comes pinned from pyproject.toml.
RUN pip install --no-compile . && rm -rf /src

# The jars go where Spark puts its own: on the classpath of driver and executors alike.
ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark
COPY --from=jars /jars/ ${SPARK_HOME}/jars/
COPY docker/spark-entrypoint.sh /opt/antidote/entrypoint.sh

RUN groupadd --gid 10001 antidote && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin antidote
USER 10001:10001
WORKDIR /home/antidote
ENV PYSPARK_PYTHON=python3 SPARK_USER=antidote
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/antidote/entrypoint.sh"]
CMD ["antidote", "consumer", "--help"]
