#!/usr/bin/env bash
# Prints, comma-separated (Spark's spark.jars form), the jars of Spark's Kafka source for the
# project's PySpark (spark/java/kafka-source/pom.xml: spark-sql-kafka-0-10 and, of its
# runtime classpath, the jars Spark does not ship: spark-token-provider-kafka-0-10,
# kafka-clients, commons-pool2), fetching them from Maven Central into the local Maven
# repository (~/.m2) on first use (scripts/lib/maven.sh). Needs Java 17 and Maven
# (scripts/setup-system.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/maven.sh
source "$here/scripts/lib/maven.sh"

# The four jars Spark does not ship, of the classpath Maven resolved (stdin), comma-separated.
spark_kafka_pick() {
  local jars
  jars="$(tr ':' '\n' \
    | grep -E '/(spark-sql-kafka-0-10|spark-token-provider-kafka-0-10)_2\.13-[^/]*\.jar$|/(kafka-clients|commons-pool2)-[^/]*\.jar$' \
    | paste -sd, -)"
  [ "$(tr ',' '\n' <<< "$jars" | wc -l)" -eq 4 ] || { echo "expected 4 jars, got: $jars" >&2; exit 1; }
  echo "$jars"
}

maven_jars "$here/spark/java/kafka-source/pom.xml" spark-kafka-jars , spark_kafka_pick
