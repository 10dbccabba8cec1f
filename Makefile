# msgstore: every target sets itself up on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: run test kafka-jars test-unit test-fast lint typecheck bench system controlplane clean images kind-up kind-down kind-binaries kind-node-image

$(STAMP): pyproject.toml setup.py storage_node/kafka/record_codec.pyx storage_node/formats/read_kernel.pyx
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip==25.3
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

system:
	bash scripts/setup-system.sh

venv: $(STAMP)

## make kafka-jars: Apache Kafka's broker and tools from Maven Central (bench/java/pom.xml), for
## the Java client tests and bench/kafka.py, and Spark's Kafka source (spark/java/kafka-source/pom.xml)
## for tests/integration/spark; cached in ~/.m2
kafka-jars: system
	bash scripts/kafka-jars.sh >/dev/null
	bash scripts/spark-kafka-jars.sh >/dev/null

## make run: a local 3-node cluster, sample data through Spark, compaction, example queries
run: system $(STAMP)
	$(PY) -m storage_node.demo

## make test: lint (ruff check and format, mypy), then every test from unit to Kubernetes end to
## end, in three pytest processes side by side: the kind cluster's, the Kafka client, console and
## Spark tests, and the rest (scripts/test.sh)
test: system $(STAMP)
	PY=$(PY) bash scripts/test.sh

## make test-unit: the quick loop, tests/unit only (in-process, no server, no build; docs/TESTING.md)
test-unit: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

## make test-fast: every test that needs no Go or image build, no Spark and is not slow
test-fast: $(STAMP)
	$(PY) -m pytest -q -x -m "not k8s and not spark and not slow and not e2e and not images and not kind and not s3"

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

## make typecheck: mypy over the product code (the packages and settings in pyproject [tool.mypy])
typecheck: $(STAMP)
	$(PY) -m mypy

bench: system $(STAMP) kafka-jars
	$(PY) bench/engine.py
	$(PY) bench/node.py
	$(PY) bench/spark.py
	$(PY) bench/kafka.py

controlplane:
	bash tests/integration/controlplane/build.sh

## make images [IMAGES=node|spark|all]: the node+operator and Spark job images, built
## locally without a registry (docs/IMAGES.md)
IMAGES ?= all
images: system $(STAMP)
	bash scripts/build-images.sh $(IMAGES)

## make kind-binaries / kind-node-image: kind, kubelet, containerd, ... built from Go modules and a
## kind node image assembled without a registry (docs/KIND.md); cached outside the repository
kind-binaries:
	bash scripts/kind/build-binaries.sh

kind-node-image:
	bash scripts/kind/node-image.sh

## make kind-up / kind-down: msgstore on a local kind cluster (docs/KIND.md); starts a container
## engine, builds the pinned kind and, without a registry, a local node image
kind-up:
	bash scripts/kind-up.sh

kind-down:
	bash scripts/kind-down.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
