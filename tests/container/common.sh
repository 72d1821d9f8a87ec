# SPDX-License-Identifier: MIT
# Sourced by the container tests: installs what they need, points podman at
# tests/container/containers.conf (the machine's /etc/containers stays as
# it is), makes the Debian base images when missing, and builds the
# images with podman's layer cache, so a second run rebuilds only what
# changed. Image builds are serialized across concurrent runs by a lock.
# shellcheck shell=bash

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export CONTAINERS_CONF=$here/containers.conf
cache_dir=${OUTBOX_CONTAINER_CACHE:-/var/cache/pgoutbox-container}
image=localhost/pgoutbox:test
pg_image=localhost/pgoutbox-test-postgres:15
nats_image=localhost/pgoutbox-test-nats:2.9
prom_image=localhost/pgoutbox-prometheus:test

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
fail() {
  log "FAIL: $*"
  exit 1
}

container_setup() {
  if [ "$(id -u)" -ne 0 ]; then
    log "SKIP: the container tests run podman as root (rootless podman is not set up here)"
    exit 77
  fi
  "$repo/scripts/install-deps" container
  mkdir -p "$cache_dir"
}

# Builds the images under one lock; podman's cache makes repeat builds quick.
# --with-prometheus: deploy/prometheus's too.
build_images() {
  local t0=$SECONDS
  exec 9>"$cache_dir/build.lock"
  flock 9
  "$here/base-images.sh"
  podman build -q --format docker --network=host -f "$repo/deploy/Dockerfile" -t "$image" \
    "$repo" >/dev/null || fail "podman build deploy/Dockerfile"
  podman build -q --format docker --network=host -t "$pg_image" \
    "$repo/deploy/test-images/postgres" >/dev/null || fail "podman build test postgres image"
  podman build -q --format docker --network=host -t "$nats_image" \
    "$repo/deploy/test-images/nats" >/dev/null || fail "podman build test nats image"
  if [ "${1:-}" = --with-prometheus ]; then # compose.yaml's; the testcontainers example has none
    podman build -q --format docker --network=host -t "$prom_image" \
      "$repo/deploy/prometheus" >/dev/null || fail "podman build deploy/prometheus"
  fi
  flock -u 9
  log "images built in $((SECONDS - t0)) s"
}
