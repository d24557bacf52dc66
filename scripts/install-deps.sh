#!/usr/bin/env bash
# Installs everything the interop tests need, and nothing twice:
#   - Debian packages kcat, openssl, socat and haproxy (and a JDK, Maven, python3-venv when those are
#     missing); socat is the plain TCP relay of scripts/bench-proxy.sh
#   - .venv with pytest, pytest-xdist, kafka-python, confluent-kafka, prometheus-client, PyYAML, matplotlib
#   - Apache Kafka 4.1.1 broker, tools and client jars in build/kafka-jars/ (from tests/java/pom.xml)
#   - kafka-clients and kafka-server-common of each release in data/kafka/, with slf4j-api
#     (build/kafka-releases/)
#   - the Kafka 4.0.2, 4.2.2, 4.3.2 and 4.4.0 brokers in build/kafka-jars-<release>/ (the same
#     pom at other versions)
#   - the Go modules of tests/interop/go, when that directory has a go.mod, and its programs
#     (kshim-go-probe, kshim-go-client) built into build/bin/, and Toxiproxy 2.5.0 (the network
#     lab's links, tests/interop/netlab.py) into build/bin/toxiproxy-server
#   - a C++ compiler, for libFuzzer (built by the fuzz targets' libfuzzer-sys), and a C compiler
#     for the SNI tests' test resolver
# Safe to run again: each step checks first and skips what is already in place.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="$ROOT/.venv"
POM="$ROOT/tests/java/pom.xml"
JARS="$ROOT/build/kafka-jars"
STAMP="$JARS/.pom.sha256"
GO_DIR="$ROOT/tests/interop/go"

# pytest 8: pytest-xdist 3.8 keeps a test's --dist loadgroup group in its node id, which
# pytest 9 no longer lets a plugin change; under pytest 9 every test is a group of its own.
PY_PACKAGES=(
  "pytest==8.4.2"
  "pytest-xdist==3.8.0"
  "kafka-python==3.0.12"
  "confluent-kafka==2.16.1"
  "prometheus-client==0.26.0"
  "pyyaml==6.0.3"
  "matplotlib==3.10.7"
)

step() { printf '==> %s\n' "$*"; }
die() { printf 'install-deps: FAILED: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; [ $rc -eq 0 ] || printf "install-deps: FAILED (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2' EXIT

# ---------------------------------------------------------------------------- Debian packages
missing=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
have_pkg kcat || missing+=(kcat)
have_pkg openssl || missing+=(openssl)
have_pkg socat || missing+=(socat)
# HAProxy: test_deploy.py runs docker/load-balancer's haproxy.cfg in front of two kshims.
have_pkg haproxy || missing+=(haproxy)
# GNU time: the test command measures the fuzzing's CPU time with it.
[ -x /usr/bin/time ] || missing+=(time)
# A C++ compiler: libfuzzer-sys builds libFuzzer (scripts/fuzz.sh).
command -v c++ >/dev/null 2>&1 || missing+=(g++)
# A C compiler: the SNI tests build a getaddrinfo() for their clients (tests/interop/native).
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
if [ -f "$GO_DIR/go.mod" ] && ! command -v go >/dev/null 2>&1; then missing+=(golang-go); fi

if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || die "Debian packages missing (${missing[*]}) and not running as root"
  step "apt-get update (needed for: ${missing[*]})"
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get update -q \
    || die "apt-get update failed"
  step "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive timeout 1200 apt-get install -y -q --no-install-recommends "${missing[@]}" \
    || die "apt-get install ${missing[*]} failed"
else
  step "Debian packages: kcat, openssl, socat, JDK, Maven already installed"
fi
command -v kcat >/dev/null 2>&1 || die "kcat is not on PATH after installing Debian package kcat"
command -v openssl >/dev/null 2>&1 || die "openssl is not on PATH after installing Debian package openssl"
command -v socat >/dev/null 2>&1 || die "socat is not on PATH after installing Debian package socat"

# ---------------------------------------------------------------------------- Python venv
if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV"
  python3 -m venv "$VENV" || die "python3 -m venv $VENV failed"
fi
if "$VENV/bin/python" - "${PY_PACKAGES[@]}" <<'EOF' >/dev/null 2>&1
import sys
from importlib.metadata import version, PackageNotFoundError
for spec in sys.argv[1:]:
    name, _, want = spec.partition("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
then
  step "Python packages already installed in .venv: ${PY_PACKAGES[*]}"
else
  step "pip install ${PY_PACKAGES[*]}"
  timeout 900 "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_PACKAGES[@]}" \
    || die "pip install ${PY_PACKAGES[*]} into $VENV failed"
fi

# ---------------------------------------------------------------------------- Kafka jars
# Every set of jars that is missing is fetched by one Maven run: a reactor (build/mvn-fetch/)
# with a module per set, each copying its dependencies into a directory of its own. One JVM
# and one plugin load instead of one per set (about twenty on a fresh clone, 3-4 CPU-seconds
# each). Each set lands in a temporary directory and is moved into place once Maven succeeded.
[ -f "$POM" ] || die "$POM not found"
pom_hash="$(sha256sum "$POM" | cut -d' ' -f1)"
FETCH="$ROOT/build/mvn-fetch"
rm -rf "$FETCH"
fetch_modules=()  # module name
declare -A fetch_target=()  # module -> final directory

# fetch_module NAME TARGET DEPENDENCIES_XML TRANSITIVE: a module that copies DEPENDENCIES_XML
# (with their own dependencies when TRANSITIVE is true) into TARGET.
fetch_module() {
  local name="$1" target="$2" deps="$3" transitive="$4"
  mkdir -p "$FETCH/$name"
  cat >"$FETCH/$name/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.kshim.fetch</groupId>
  <artifactId>$name</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
$deps
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <configuration>
          <outputDirectory>$target.tmp.$$</outputDirectory>
          <excludeTransitive>$([ "$transitive" = true ] && echo false || echo true)</excludeTransitive>
          <useBaseVersion>true</useBaseVersion>
        </configuration>
      </plugin>
    </plugins>
  </build>
</project>
POM
  rm -rf "$target.tmp.$$"
  fetch_modules+=("$name")
  fetch_target[$name]="$target"
}

dep() { printf '    <dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version></dependency>\n' "$@"; }

# The suite's Kafka 4.1.1 broker, tools and clients: tests/java/pom.xml's dependencies.
broker_deps() {
  sed -n '/<dependencies>/,/<\/dependencies>/p' "$POM" | sed '1d;$d' | sed "s/\${kafka.version}/$1/g"
}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$pom_hash" ] \
   && ls "$JARS"/kafka_2.13-*.jar "$JARS"/kafka-tools-*.jar "$JARS"/kafka-clients-*.jar >/dev/null 2>&1; then
  step "Kafka jars in build/kafka-jars are up to date with tests/java/pom.xml"
else
  fetch_module suite "$JARS" "$(broker_deps "$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")")" true
fi

# Brokers of other releases: the interop suite runs one broker of each beside the 4.1.1
# cluster (tests/interop/test_kafka_releases.py), and the soak runs the newest.
OTHER_BROKER_RELEASES=(4.0.2 4.2.2 4.3.2 4.4.0)
for release in "${OTHER_BROKER_RELEASES[@]}"; do
  dir="$ROOT/build/kafka-jars-$release"
  ls "$dir"/kafka_2.13-"$release".jar "$dir"/kafka-clients-"$release".jar >/dev/null 2>&1 && continue
  fetch_module "broker-$release" "$dir" "$(broker_deps "$release")" true
done
# Kafka Streams 4.4.0 beside its broker, for the Streams application of the interop suite
# (a stateless topology: RocksDB, which Kafka Streams loads only for state stores, is left out).
for release in 4.4.0; do
  dir="$ROOT/build/kafka-jars-$release"
  [ -f "$dir/kafka-streams-$release.jar" ] && continue
  fetch_module "streams-$release" "$dir.streams" "$(dep org.apache.kafka kafka-streams "$release")" false
done

# Each Kafka release's data jars: data/kafka/<major.minor>.json names the release it was
# generated from; its kafka-clients and kafka-server-common jars let the tests regenerate it
# (slf4j-api: server-common's config classes log as they load).
RELEASE_JARS="$ROOT/build/kafka-releases"
SLF4J_VERSION="2.0.17"
for data in "$ROOT"/data/kafka/*.json; do
  release="$(sed -n 's/^ "release": "\(.*\)",\{0,1\}$/\1/p' "$data")"
  [ -n "$release" ] || die "$data names no release"
  dir="$RELEASE_JARS/$release"
  if [ -f "$dir/kafka-clients-$release.jar" ] && [ -f "$dir/kafka-server-common-$release.jar" ] \
    && [ -f "$dir/slf4j-api-$SLF4J_VERSION.jar" ]; then
    continue
  fi
  fetch_module "data-$release" "$dir" "$(dep org.apache.kafka kafka-clients "$release"; \
    dep org.apache.kafka kafka-server-common "$release"; dep org.slf4j slf4j-api "$SLF4J_VERSION")" false
done

if [ ${#fetch_modules[@]} -gt 0 ]; then
  step "fetching with Maven: ${fetch_modules[*]}"
  {
    echo '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
    echo '<groupId>dev.kshim.fetch</groupId><artifactId>fetch</artifactId><version>0</version><packaging>pom</packaging><modules>'
    printf '<module>%s</module>\n' "${fetch_modules[@]}"
    echo '</modules></project>'
  } >"$FETCH/pom.xml"
  timeout 1200 mvn -q -B -Dstyle.color=never -f "$FETCH/pom.xml" dependency:copy-dependencies \
    || { for m in "${fetch_modules[@]}"; do rm -rf "${fetch_target[$m]}.tmp.$$"; done
         die "mvn dependency:copy-dependencies of ${fetch_modules[*]} failed (build/mvn-fetch/)"; }
  for m in "${fetch_modules[@]}"; do
    target="${fetch_target[$m]}"
    case "$m" in
      streams-*)  # beside the broker of its release
        mkdir -p "${target%.streams}"
        mv "$target.tmp.$$"/*.jar "${target%.streams}/"
        rm -rf "$target.tmp.$$" ;;
      *)
        rm -rf "$target"
        mkdir -p "$(dirname "$target")"
        mv "$target.tmp.$$" "$target" ;;
    esac
  done
  [ -z "${fetch_target[suite]:-}" ] || echo "$pom_hash" >"$JARS/.pom.sha256"
  rm -rf "$FETCH"
fi
ls "$JARS"/kafka_2.13-*.jar "$JARS"/kafka-tools-*.jar "$JARS"/kafka-clients-*.jar >/dev/null 2>&1 \
  || die "build/kafka-jars has no kafka_2.13, kafka-tools or kafka-clients jar after Maven ran"

# ---------------------------------------------------------------------------- Go modules
if [ -f "$GO_DIR/go.mod" ]; then
  step "go mod download in tests/interop/go"
  (cd "$GO_DIR" && timeout 900 go mod download) || die "go mod download in $GO_DIR failed"
  # go build is incremental: rebuilding an up-to-date program costs a second or two.
  mkdir -p "$ROOT/build/bin"
  for cmd in "$GO_DIR"/cmd/*/; do
    name="$(basename "$cmd")"
    step "go build build/bin/$name"
    (cd "$GO_DIR" && timeout 900 go build -o "$ROOT/build/bin/$name" "./cmd/$name") \
      || die "go build of tests/interop/go/cmd/$name failed"
    [ -x "$ROOT/build/bin/$name" ] || die "go build did not produce build/bin/$name"
  done
  # Toxiproxy, the network lab's links (tests/interop/netlab.py): a tool of the module (go.mod's
  # `tool` line pins the version).
  step "go build build/bin/toxiproxy-server (Toxiproxy 2.5.0)"
  (cd "$GO_DIR" && timeout 900 go build -o "$ROOT/build/bin/toxiproxy-server" github.com/Shopify/toxiproxy/v2/cmd/server) \
    || die "go build of Toxiproxy (github.com/Shopify/toxiproxy/v2/cmd/server, tests/interop/go/go.mod) failed"
  [ -x "$ROOT/build/bin/toxiproxy-server" ] || die "go build did not produce build/bin/toxiproxy-server"
else
  step "tests/interop/go has no go.mod; skipping go mod download"
fi

step "dependencies installed"
