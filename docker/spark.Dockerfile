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
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    UV_PYTHON_INSTALL_DIR=/opt/python UV_NO_CACHE=1
# msgstore needs Python 3.11, newer than the Ubuntu release under Spark's image ships, so the
# jobs get their own interpreter (a relocatable CPython build installed by uv) and venv.
RUN python3 -m pip install uv==0.13.8 \
 && uv python install 3.11 \
 && uv venv --python 3.11 /opt/msgstore
WORKDIR /opt/msgstore-src
COPY pyproject.toml README.md ./
COPY storage_node ./storage_node
COPY operator ./operator
COPY spark ./spark
RUN uv pip install --python /opt/msgstore/bin/python . \
 && cp -r spark/jobs /opt/msgstore/jobs \
 && /opt/msgstore/bin/python -m compileall -q /opt/msgstore/jobs \
 && rm -rf /opt/msgstore-src
WORKDIR /opt/spark/work-dir
# Driver and executors start Python workers with this interpreter.
ENV PYSPARK_PYTHON=/opt/msgstore/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/msgstore/bin/python \
    MSGSTORE_SPARK_JOBS=/opt/msgstore/jobs
# Spark's image runs as the unprivileged user "spark" (uid 185).
USER 185
