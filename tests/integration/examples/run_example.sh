#!/usr/bin/env bash
# Builds one example from examples/NAME into WORK_DIR (once: later runs
# reuse it; a lock keeps parallel tests from building at the same time) and
# runs it with the caller's environment (DATABASE_URL, the consumers'
# OUTBOX_* settings, PORT and the like for an endpoint).
#   run_example.sh python|go|java|node|go-consumer|node-consumer WORK_DIR [writer]
#   run_example.sh python|java WORK_DIR endpoint
# The writers are examples/LANG; the consumers examples/LANG-consumer; the
# endpoints examples/LANG's endpoint program.
# The toolchains come from scripts/install-deps stacks; everything builds
# offline: Go from Debian's /usr/share/gocode, Java with javac against
# Debian's JDBC jar, Node from the example's package-lock.json.
set -euo pipefail
lang=$1
work=$2/$lang
program=${3:-writer}
src=$(cd "$(dirname "$0")/../../../examples/$lang" && pwd)
jdbc=/usr/share/java/postgresql.jar
fail() {
  echo "run_example.sh: $*" >&2
  exit 1
}
need() {
  command -v "$1" >/dev/null || [ -e "$1" ] || fail "$lang example needs $1: run scripts/install-deps stacks"
}

case $lang/$program in
*/writer | python/endpoint | java/endpoint) ;;
*) fail "no $program example for $lang" ;;
esac

mkdir -p "$work"
exec 9>"$work.lock"
flock 9
case $lang in
python)
  need /usr/bin/python3
  /usr/bin/python3 -c 'import psycopg' 2>/dev/null || fail "no psycopg: run scripts/install-deps stacks"
  flock -u 9
  exec /usr/bin/python3 "$src/$program.py"
  ;;
go | go-consumer)
  need go
  [ "$lang" = go ] || [ -d /usr/share/gocode/src/github.com/nats-io/nats.go ] ||
    fail "no nats.go: run scripts/install-deps stacks"
  # GOPATH mode: pgx v4, nats.go and their dependencies from Debian's
  # packages, no network. One build cache for both Go examples: pgx is
  # compiled once (a cold build takes a minute on a busy machine).
  (cd "$src" && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$2/go-cache" GOFLAGS="" \
    go build -o "$work/example" .)
  flock -u 9
  exec "$work/example"
  ;;
java)
  need javac
  need "$jdbc"
  class=ReviewWriter
  [ "$program" = writer ] || class=ReviewEndpoint
  if [ ! -e "$work/$class.class" ] || [ "$src/$class.java" -nt "$work/$class.class" ]; then
    javac -d "$work" -cp "$jdbc" "$src/$class.java"
  fi
  flock -u 9
  exec java -cp "$work:$jdbc" "$class"
  ;;
node | node-consumer)
  need npm
  # A copy, so npm never writes into the source tree; npm's cache makes it quick.
  if ! cmp -s "$src/package-lock.json" "$work/package-lock.json"; then
    cp "$src/package.json" "$src/package-lock.json" "$work/"
    (cd "$work" && npm ci --no-audit --no-fund --prefer-offline --loglevel=error >&2)
  fi
  main=$([ "$lang" = node ] && echo writer.mjs || echo consumer.mjs)
  cp "$src/$main" "$work/"
  flock -u 9
  exec node "$work/$main"
  ;;
*) fail "unknown example $lang (python, go, java, node, go-consumer, node-consumer)" ;;
esac
