#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs examples/testcontainers (Node, testcontainers@10) as users would,
# against podman's Docker-API socket: a `podman system service` of its own
# on a socket in a scratch directory, the images built from deploy/ (the
# pgoutbox image from deploy/Dockerfile, PostgreSQL and NATS from
# deploy/test-images/), host networking on loopback. The example is copied
# out, so `npm ci` never writes into the source tree; npm's own cache makes
# repeat runs quick. Stops the service and any container it left behind.
set -euo pipefail
# shellcheck source=tests/container/common.sh
. "$(dirname "$0")/common.sh"

work=$(mktemp -d /tmp/pgoutbox-tc.XXXXXX)
started=$SECONDS
service_pid=
before=

cleanup() {
  local code=$?
  if [ -n "$before" ]; then
    # Containers testcontainers made in this run and did not stop.
    comm -13 <(echo "$before") <(podman ps -aq --filter label=org.testcontainers=true | sort) |
      xargs -r podman rm -f -t 0 >/dev/null 2>&1 || true
  fi
  if [ -n "$service_pid" ]; then
    kill "$service_pid" 2>/dev/null || true
    wait "$service_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  log "testcontainers test took $((SECONDS - started)) s, exit $code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

container_setup
build_images

cp -r "$repo/examples/testcontainers" "$work/example"
rm -rf "$work/example/node_modules"
(cd "$work/example" && npm ci --no-audit --no-fund --prefer-offline --loglevel=error) ||
  fail "npm ci"

before=$(podman ps -aq --filter label=org.testcontainers=true | sort)
podman system service --time=0 "unix://$work/podman.sock" 2>"$work/service.log" &
service_pid=$!
for _ in $(seq 1 100); do
  [ -S "$work/podman.sock" ] && break
  sleep 0.1
done
[ -S "$work/podman.sock" ] || fail "podman system service did not create its socket"

export DOCKER_HOST=unix://$work/podman.sock TESTCONTAINERS_RYUK_DISABLED=true
export OUTBOX_IMAGE=$image POSTGRES_IMAGE=$pg_image NATS_IMAGE=$nats_image
export OUTBOX_TEST_HOST_NETWORK=1
(cd "$work/example" && node --test --test-reporter=spec) || fail "the testcontainers example failed"
log "PASS: testcontainers example against podman's Docker API"
