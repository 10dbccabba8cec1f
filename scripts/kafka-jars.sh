#!/usr/bin/env bash
# Prints the Java classpath of Apache Kafka's broker and tools (bench/java/pom.xml: kafka_2.13,
# kafka-tools, kafka-clients), fetching the jars from Maven Central into the local Maven
# repository (~/.m2) on first use. bench/kafka.py and the Java client tests
# (tests/integration/kafka) run their JVMs with it. The resolved classpath is cached beside the
# jars' repository, keyed by the pom's checksum, and checked (every jar present) on each call
# (scripts/lib/maven.sh). Needs Java 17 and Maven (scripts/setup-system.sh installs both).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/maven.sh
source "$here/scripts/lib/maven.sh"
maven_jars "$here/bench/java/pom.xml" kafka-classpath :
