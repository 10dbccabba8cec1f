#!/usr/bin/env bash
# Prints, comma-separated (Spark's spark.jars form), the jars of Spark's Kafka source for the
# project's PySpark (spark/java/kafka-source/pom.xml: spark-sql-kafka-0-10 and, of its
# runtime classpath, the jars Spark does not ship: spark-token-provider-kafka-0-10,
# kafka-clients, commons-pool2), fetching them from Maven Central into the local Maven
# repository (~/.m2) on first use. Needs Java 17 and Maven (scripts/setup-system.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$here/spark/java/kafka-source/pom.xml"
repo="${MAVEN_REPO_LOCAL:-$HOME/.m2/repository}"
sum="$(sha256sum "$pom" | cut -c1-16)"
cache="$repo/.msgstore-spark-kafka-jars-$sum"
valid() {
  [ -s "$cache" ] || return 1
  local jar
  IFS=, read -r -a jars < "$cache"
  for jar in "${jars[@]}"; do [ -f "$jar" ] || return 1; done
}
if ! valid; then
  command -v mvn >/dev/null || { echo "maven is not installed: run scripts/setup-system.sh" >&2; exit 1; }
  mkdir -p "$repo"
  tmp="$(mktemp)"
  mvn -B -q -f "$pom" -Dmaven.repo.local="$repo" dependency:build-classpath \
    -Dmdep.includeScope=runtime -Dmdep.outputFile="$tmp" >&2
  tr ':' '\n' < "$tmp" \
    | grep -E '/(spark-sql-kafka-0-10|spark-token-provider-kafka-0-10)_2\.13-[^/]*\.jar$|/(kafka-clients|commons-pool2)-[^/]*\.jar$' \
    | paste -sd, - > "$tmp.jars"
  rm -f "$tmp"
  [ "$(tr ',' '\n' < "$tmp.jars" | wc -l)" -eq 4 ] || { echo "expected 4 jars, got: $(cat "$tmp.jars")" >&2; exit 1; }
  mv "$tmp.jars" "$cache"
fi
cat "$cache"
echo
