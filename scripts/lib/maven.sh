# shellcheck shell=bash
# The jars of a pom's runtime classpath, fetched from Maven Central into the local Maven
# repository (~/.m2, or MAVEN_REPO_LOCAL) on first use, the way scripts/kafka-jars.sh (Apache
# Kafka's broker and tools) and scripts/spark-kafka-jars.sh (Spark's Kafka source) do it. The
# list is cached beside the jars' repository, keyed by the pom's checksum, and checked (every
# jar present) on each call.
#
# Source it; it defines functions only. Needs Java 17 and Maven (scripts/setup-system.sh).

# maven_jars_present CACHE SEP: whether CACHE lists jars, separated by SEP, that all exist.
maven_jars_present() {
  local cache=$1 sep=$2 jar
  local -a jars
  [ -s "$cache" ] || return 1
  IFS="$sep" read -r -a jars < "$cache"
  for jar in "${jars[@]}"; do [ -f "$jar" ] || return 1; done
}

# maven_jars POM NAME SEP [PICK]: prints the jars of POM's runtime classpath separated by SEP
# (then an empty line), from the cache `.msgstore-NAME-<checksum>` when its jars are all
# present; else asks Maven for the classpath (colon-separated), passes it through the command
# PICK (default `cat`; stdin to stdout, it picks and joins the jars by SEP and exits the script
# when they are not what it expects) and caches what PICK printed.
maven_jars() {
  local pom=$1 name=$2 sep=$3 pick=${4:-cat} repo sum cache tmp
  repo="${MAVEN_REPO_LOCAL:-$HOME/.m2/repository}"
  sum="$(sha256sum "$pom" | cut -c1-16)"
  cache="$repo/.msgstore-$name-$sum"
  if ! maven_jars_present "$cache" "$sep"; then
    command -v mvn >/dev/null || { echo "maven is not installed: run scripts/setup-system.sh" >&2; exit 1; }
    mkdir -p "$repo"
    tmp="$(mktemp)"
    mvn -B -q -f "$pom" -Dmaven.repo.local="$repo" dependency:build-classpath \
      -Dmdep.includeScope=runtime -Dmdep.outputFile="$tmp" >&2
    "$pick" < "$tmp" > "$tmp.jars"
    rm -f "$tmp"
    mv "$tmp.jars" "$cache"
  fi
  cat "$cache"
  echo
}
