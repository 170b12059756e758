#!/usr/bin/env bash
# Resolve the Apache Kafka broker's runtime jars from Maven Central into a
# cache dir: the embedded broker of `mnemoflow up` and the integration tests run it without Docker.
# Idempotent: a marker keyed by the pom's hash skips the work when the cache
# is already complete. Prints the cache dir (its jars are in <cache>/libs).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
pom="$here/pom.xml"
cache="${MNEMOFLOW_KAFKA_CACHE:-$repo/.cache/kafka}"
libs="$cache/libs"
marker="$cache/.complete"

want="$(sha256sum "$pom" | cut -d' ' -f1)"
if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]] && compgen -G "$libs/kafka_2.13-*.jar" >/dev/null; then
  echo "$cache"
  exit 0
fi

command -v mvn >/dev/null || { echo "fetch.sh: mvn not found (need Maven 3.8+ and Java 17+)" >&2; exit 1; }
command -v java >/dev/null || { echo "fetch.sh: java not found (need Java 17+)" >&2; exit 1; }

mkdir -p "$cache"
# Copy into a fresh staging dir, then swap it in: a half-finished run never
# leaves a mixed or partial libs dir behind a valid marker.
rm -f "$marker"
staging="$(mktemp -d "$cache/libs.tmp.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
mvn -B -q -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$staging" >&2 </dev/null
rm -rf "$libs"
mv "$staging" "$libs"
trap - EXIT
echo "$want" > "$marker"
echo "$cache"
