#!/usr/bin/env bash
# Prints the Java classpath of Apache Kafka's broker and tools (bench/java/pom.xml: kafka_2.13,
# kafka-tools, kafka-clients), fetching the jars from Maven Central into the local Maven
# repository (~/.m2) on first use. bench/kafka.py and the Java client tests
# (tests/integration/kafka) run their JVMs with it. The resolved classpath is cached beside the
# jars' repository, keyed by the pom's checksum, and checked (every jar present) on each call.
# Needs Java 17 and Maven (scripts/setup-system.sh installs both).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$here/bench/java/pom.xml"
repo="${MAVEN_REPO_LOCAL:-$HOME/.m2/repository}"
sum="$(sha256sum "$pom" | cut -c1-16)"
cache="$repo/.msgstore-kafka-classpath-$sum"
valid() {
  [ -s "$cache" ] || return 1
  local jar
  IFS=: read -r -a jars < "$cache"
  for jar in "${jars[@]}"; do [ -f "$jar" ] || return 1; done
}
if ! valid; then
  command -v mvn >/dev/null || { echo "maven is not installed: run scripts/setup-system.sh" >&2; exit 1; }
  mkdir -p "$repo"
  tmp="$(mktemp)"
  mvn -B -q -f "$pom" -Dmaven.repo.local="$repo" dependency:build-classpath \
    -Dmdep.includeScope=runtime -Dmdep.outputFile="$tmp" >&2
  mv "$tmp" "$cache"
fi
cat "$cache"
echo
