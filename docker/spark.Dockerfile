# syntax=docker/dockerfile:1
# The Spark job image: Spark's official image plus msgstore (its Spark data source and the
# ingest and compact jobs). `spark-submit --master k8s://... --deploy-mode cluster` runs its
# driver and executors from this image.
#
#   docker build -f docker/spark.Dockerfile -t msgstore-spark:0.1.0 .
#
# The Spark version must equal the pyspark pin of pyproject.toml: driver, executors and the
# Python workers then run one Spark release.

ARG SPARK_VERSION=4.3.0
ARG SPARK_IMAGE=apache/spark:${SPARK_VERSION}-scala2.13-java17-python3-ubuntu

FROM ${SPARK_IMAGE}
USER root
# PIP_BREAK_SYSTEM_PACKAGES: uv goes into the system Python on newer Ubuntu bases too.
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 \
    UV_PYTHON_INSTALL_DIR=/opt/python UV_NO_CACHE=1
# msgstore needs Python 3.11, newer than the Ubuntu release under Spark's image ships, so the
# jobs get their own interpreter (a relocatable CPython build installed by uv) and venv.
RUN python3 -m pip install uv==0.13.8 \
 && uv python install 3.11 \
 && uv venv --python 3.11 /opt/venv
WORKDIR /opt/msgstore-src
COPY pyproject.toml README.md ./
COPY storage_node ./storage_node
COPY operator ./operator
COPY spark ./spark
# The jobs go where spark-submit finds them (local:///opt/msgstore/spark/jobs/<job>.py), and
# a deterministic sample of order events (the demo's generator) for a first ingest.
RUN uv pip install --python /opt/venv/bin/python . \
 && mkdir -p /opt/msgstore/spark /opt/msgstore/data \
 && cp -r spark/jobs /opt/msgstore/spark/jobs \
 && /opt/venv/bin/python -m compileall -q /opt/msgstore/spark/jobs \
 && /opt/venv/bin/python -c "from storage_node.sample_data import ensure_sample_file; ensure_sample_file('/opt/msgstore/data/orders-sample.jsonl', 100000)" \
 && rm -rf /opt/msgstore-src
WORKDIR /opt/spark/work-dir
# Driver and executors start Python workers with this interpreter.
ENV PATH=/opt/venv/bin:$PATH \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python
# Spark's image runs as the unprivileged user "spark" (uid 185).
USER 185
