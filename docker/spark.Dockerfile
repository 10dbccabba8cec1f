# The Spark job image: `spark-submit --master k8s://... --deploy-mode cluster` runs its driver
# and executors from this image (entrypoint roles `driver` and `executor`, see
# docker/spark-entrypoint.sh), and the operator's compaction CronJob and the ingest Job run
# /opt/spark/bin/spark-submit in it. It holds:
#   /opt/venv                        Python 3.11 venv: the pinned pyspark, pyarrow, pandas,
#                                    numpy and the rest of msgstore's pins, plus msgstore
#   /opt/spark                       SPARK_HOME: bin/, jars/, sbin/ of the pyspark package
#                                    (links), conf/ (Spark mounts its ConfigMap there), work-dir/
#   /opt/spark/jars/msgstore-spark-reader.jar  the JVM batch reader (msgstore_spark.load)
#   /opt/msgstore/spark/jobs/        the jobs (operator/msgstore_operator/spark_job.py: local:///opt/msgstore/spark/jobs)
#   /opt/msgstore/data/orders-sample.jsonl   100,000 sample order events (scripts/kind-up.sh)
# and runs as uid/gid 185 ("spark"), the uid of Apache Spark's images.
#
# Built by scripts/build-images.sh (`make images`) from a context it stages (wheels/,
# requirements.txt, msgstore/, entrypoint.sh, jobs/) with the classic builder and
# `--network none`. The Spark version is pyspark's pin in pyproject.toml: driver, executors
# and Python workers run one Spark release.
#
# SPARK_BASE_IMAGE is the base. The default is the local Debian bookworm base the script
# makes with mmdebstrap (python3.11, python3-venv, openjdk-17-jre-headless, procps, tini,
# bash, libnss-wrapper). With a registry at hand,
#   SPARK_BASE_IMAGE=python:3.11-slim-bookworm scripts/build-images.sh spark
# builds on the public Python image, and the Java runtime and tools come from Debian's
# packages (that build needs the network). Why not apache/spark: its published 4.x images
# are Ubuntu 22.04 (eclipse-temurin:17-jammy) with Python 3.10, and msgstore needs 3.11;
# Spark itself comes from the pyspark wheel anyway, so a Python 3.11 base plus a JRE is the
# simplest base with the same contents.
#
# What invalidates what (docker's layer cache): a new base -> everything; other pins -> the
# dependency venv and all after it; a changed source tree (a new msgstore wheel) -> the
# msgstore install, the sample data and the layers after them; the entrypoint and the jobs
# -> only their own layers.

ARG SPARK_BASE_IMAGE=msgstore-base:spark-bookworm

FROM ${SPARK_BASE_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY wheels/ /wheels/
COPY requirements.txt /wheels/requirements.txt
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install -q --no-index --find-links /wheels -r /wheels/requirements.txt

FROM ${SPARK_BASE_IMAGE}
LABEL org.opencontainers.image.title="msgstore-spark" \
      org.opencontainers.image.description="msgstore Spark jobs: PySpark driver and executors on Kubernetes"
# Only on a public base without them: Java 17, ps, tini, bash and nss_wrapper from Debian.
# The man1 directory: openjdk's postinst links java.1.gz there and fails without it on
# images that exclude manuals.
RUN command -v java >/dev/null && command -v tini >/dev/null && command -v ps >/dev/null \
 || { mkdir -p /usr/share/man/man1 && apt-get update \
      && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini bash libnss-wrapper \
      && rm -rf /var/lib/apt/lists/*; }
# JAVA_HOME independent of the architecture's directory name.
RUN mkdir -p /opt/java \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java/openjdk \
 && groupadd --system --gid 185 spark \
 && useradd --system --uid 185 --gid 185 --no-create-home --home-dir /opt/spark/work-dir \
      --shell /usr/sbin/nologin spark
ENV JAVA_HOME=/opt/java/openjdk \
    SPARK_HOME=/opt/spark \
    PATH=/opt/venv/bin:/opt/spark/bin:$PATH \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYSPARK_PYTHON=/opt/venv/bin/python3 \
    PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python3
COPY --from=deps /opt/venv /opt/venv
# SPARK_HOME is laid out like Apache Spark's images, its programs and jars from the wheel.
RUN pyspark_dir=/opt/venv/lib/python3.11/site-packages/pyspark \
 && test -x "$pyspark_dir/bin/spark-submit" && test -d "$pyspark_dir/jars" \
 && mkdir -p /opt/spark/conf /opt/spark/work-dir \
 && ln -s "$pyspark_dir/bin" /opt/spark/bin \
 && ln -s "$pyspark_dir/sbin" /opt/spark/sbin \
 && ln -s "$pyspark_dir/jars" /opt/spark/jars \
 && chown 185:185 /opt/spark/work-dir \
 && chmod 0775 /opt/spark/work-dir
COPY msgstore/ /opt/msgstore/dist/
# msgstore, then the sample data (its generator is part of msgstore and deterministic).
RUN pip install -q --no-index --find-links /opt/msgstore/dist 'msgstore[spark]' \
 && python3 -c "from storage_node.demo.sample_data import ensure_sample_file; ensure_sample_file('/opt/msgstore/data/orders-sample.jsonl', 100000)" \
 && chmod -R a+rX /opt/msgstore
# The JVM batch reader (msgstore_spark.load) joins Spark's own jars: on every driver's and
# executor's classpath without a --jars.
COPY jars/ /opt/venv/lib/python3.11/site-packages/pyspark/jars/
COPY jobs/ /opt/msgstore/spark/jobs/
RUN python3 -m compileall -q /opt/msgstore/spark/jobs && chmod -R a+rX /opt/msgstore/spark
COPY entrypoint.sh /opt/entrypoint.sh
RUN chmod 0755 /opt/entrypoint.sh
WORKDIR /opt/spark/work-dir
USER 185:185
ENTRYPOINT ["/opt/entrypoint.sh"]
