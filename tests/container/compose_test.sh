#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The container test (ctest label `container`): builds deploy/Dockerfile
# unchanged on Debian-made base images, checks the image (non-root, --help,
# the HEALTHCHECK passing against a running daemon, what it adds to its
# base), then runs deploy/compose.yaml with podman-compose and a generated
# host-network override (host_override.py), writes events, sees each
# handled exactly once, asks the compose file's Prometheus whether it
# scrapes every replica and loaded the alerting rules, SIGKILLs a relay
# container while it waits for an ack (nats-server paused) and sees
# nothing lost. Everything it started is removed on every exit path.
set -euo pipefail
# shellcheck source=tests/container/common.sh
. "$(dirname "$0")/common.sh"

max_added_mb=${OUTBOX_IMAGE_MAX_ADDED_MB:-60}
project=pgoutbox-ct-$$
work=$(mktemp -d /tmp/pgoutbox-ct.XXXXXX)
started=$SECONDS
compose=()

cleanup() {
  local code=$?
  if [ ${#compose[@]} -gt 0 ]; then
    if [ $code -ne 0 ]; then
      log "logs of the failed run:"
      for c in $(podman ps -a --filter "label=io.podman.compose.project=$project" \
        --format '{{.Names}}'); do
        echo "---- $c ($(podman inspect -f '{{.State.Status}} exit={{.State.ExitCode}}' "$c"))" >&2
        podman logs --tail 15 "$c" 2>&1 | sed 's/^/  /' >&2 || true
      done
    fi
    "${compose[@]}" down -v >/dev/null 2>&1 || true
  fi
  podman rm -f -t 0 "$project-image-check" >/dev/null 2>&1 || true
  # Whatever down missed (a run cut short between create and start).
  podman ps -aq --filter "label=io.podman.compose.project=$project" | xargs -r podman rm -f -t 0 \
    >/dev/null 2>&1 || true
  podman volume ls -q --filter "label=io.podman.compose.project=$project" |
    xargs -r podman volume rm -f >/dev/null 2>&1 || true
  podman network rm -f "${project}_default" >/dev/null 2>&1 || true
  rm -rf "$work"
  log "container test took $((SECONDS - started)) s, exit $code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

container_setup
build_images --with-prometheus

# ---- the image ----------------------------------------------------------------------------
run_plain() { podman run --rm --no-healthcheck "$@"; }

user=$(podman image inspect -f '{{.Config.User}}' "$image")
[ -n "$user" ] && [ "${user%%:*}" != 0 ] && [ "${user%%:*}" != root ] ||
  fail "image user is '$user', want a non-root user"
uid=$(run_plain "$image" id -u)
[ "$uid" != 0 ] || fail "the image runs as root"
help=$(run_plain "$image" outboxd --help) || fail "outboxd --help exited non-zero"
grep -q '^usage: outboxd' <<<"$help" || fail "outboxd --help printed no usage"
grep -q 'health' <<<"$help" || fail "outboxd --help does not list the health command"
run_plain "$image" sh -c 'command -v gcc || command -v cc || command -v cmake' >/dev/null &&
  fail "the runtime image carries a compiler"
[ "$(podman image inspect -f '{{json .Config.Healthcheck.Test}}' "$image")" = '["CMD","outboxd","health"]' ] ||
  fail "HEALTHCHECK is not outboxd health (built without --format docker?)"
[ "$(podman image inspect -f '{{.Config.StopSignal}}' "$image")" = SIGTERM ] || fail "STOPSIGNAL"
# Read whole before grep -q: an early exit of grep would fail the pipeline (pipefail) on SIGPIPE.
image_env=$(podman image inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$image")
grep -qx 'OUTBOX_HTTP_ADDR=0.0.0.0:9090' <<<"$image_env" || fail "OUTBOX_HTTP_ADDR default"
grep -q '"9090/tcp"' <<<"$(podman image inspect -f '{{json .Config.ExposedPorts}}' "$image")" ||
  fail "EXPOSE 9090"
base_size=$(podman image inspect -f '{{.Size}}' docker.io/library/debian:bookworm-slim)
size=$(podman image inspect -f '{{.Size}}' "$image")
added_mb=$(((size - base_size) / 1000000))
log "image: $((size / 1000000)) MB, $added_mb MB over debian:bookworm-slim ($((base_size / 1000000)) MB)"
[ "$added_mb" -le "$max_added_mb" ] || fail "the image adds $added_mb MB to its base (limit $max_added_mb)"

# ---- compose ------------------------------------------------------------------------------
python3 "$here/host_override.py" "$repo/deploy/compose.yaml" "$work/override.yaml" "$work/ports"
. "$work/ports"
compose=(env OUTBOX_IMAGE="$image" POSTGRES_IMAGE="$pg_image" NATS_IMAGE="$nats_image"
  PROMETHEUS_IMAGE="$prom_image"
  podman-compose --podman-path "$here/podman-host-net" -p "$project"
  -f "$repo/deploy/compose.yaml" -f "$work/override.yaml")
log "compose up (postgres :$PG_PORT, nats :$NATS_PORT, prometheus :$PROM_PORT, daemons: $DAEMONS)"
"${compose[@]}" up -d >"$work/up.log" 2>&1 || {
  grep -v '^ \*\* merged\|^ *[]{}[]\|^ *"' "$work/up.log" | tail -30 >&2
  fail "podman-compose up"
}

name_of() { echo "${project}_$1_1"; }
psql_c() {
  podman exec -i "$(name_of postgres)" psql -X -q -t -A -v ON_ERROR_STOP=1 -U outbox -d outbox "$@"
}
# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.5 s.
wait_for() {
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || fail "timed out waiting for $what"
    sleep 0.5
  done
}
healthy() { podman healthcheck run "$1" >/dev/null 2>&1; }
unhealthy() { ! podman healthcheck run "$1" >/dev/null 2>&1; }
exited_0() { [ "$(podman inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$1")" = "exited 0" ]; }
logged_ready() { grep -q "level=info outboxd ready command=$2" <<<"$(podman logs "$1" 2>&1)"; }

wait_for 120 "postgres health check" healthy "$(name_of postgres)"
wait_for 60 "nats health check" healthy "$(name_of nats)"
wait_for 120 "migrate to exit 0" exited_0 "$(name_of migrate)"
for d in $DAEMONS; do
  cmd=relay
  [[ $d == consumer* ]] && cmd=consume
  wait_for 60 "the ready line of $d" logged_ready "$(name_of "$d")" "$cmd"
  wait_for 30 "the health check of $d" healthy "$(name_of "$d")"
  [ "$(podman logs "$(name_of "$d")" 2>&1 | grep -c 'outboxd ready command=')" = 1 ] ||
    fail "$d printed the ready line more than once"
done
log "all services healthy after $((SECONDS - started)) s"

psql_c -c "CREATE TABLE test_committed (id uuid PRIMARY KEY)"
# write N: N events of the sample type in one transaction, ids recorded with them.
write() {
  psql_c -c "BEGIN; INSERT INTO test_committed SELECT outbox.enqueue('movie', gen_random_uuid(),
    'review.logged', jsonb_build_object('stars', 1 + g % 5)) FROM generate_series(1, $1) AS g; COMMIT;"
}
all_handled() {
  [ "$(psql_c -c "SELECT count(*) FROM test_committed c
    WHERE NOT EXISTS (SELECT 1 FROM review_log r WHERE r.event_id = c.id)")" = 0 ]
}
check_exactly_once() {
  local committed rows distinct strays
  committed=$(psql_c -c "SELECT count(*) FROM test_committed")
  rows=$(psql_c -c "SELECT count(*) FROM review_log")
  distinct=$(psql_c -c "SELECT count(DISTINCT event_id) FROM review_log")
  strays=$(psql_c -c "SELECT count(*) FROM review_log r
    WHERE NOT EXISTS (SELECT 1 FROM test_committed c WHERE c.id = r.event_id)")
  log "$1: committed $committed, effect rows $rows, distinct $distinct, strays $strays"
  [ "$rows" = "$committed" ] && [ "$distinct" = "$committed" ] && [ "$strays" = 0 ] ||
    fail "$1: want exactly one effect row per committed event"
}

write 200
wait_for 60 "200 events handled" all_handled
check_exactly_once "before the kill"

# Graphs and alerts: Prometheus (1 s scrapes here) has every replica up,
# the rules loaded, and the 200 events in its counters.
# shellcheck disable=SC2086 # one argument per replica
python3 "$here/check_prometheus.py" "$PROM_PORT" "$repo/deploy/prometheus/outbox-alerts.yml" 30 \
  $DAEMONS --published 200 || fail "Prometheus of the compose file"

# The kill must land while relay-2 holds claimed rows. The other relays
# stop (gracefully) and relay-2 works alone through a backlog, one row per
# claim (OUTBOX_BATCH_SIZE=1 in the override). Since relays claim by commit
# window it gets through 1,500 rows between two polls, so the test does not
# race it: once it has published 300, nats-server is frozen (podman pause),
# the next row relay-2 claims waits for its ack (OUTBOX_PUBLISH_TIMEOUT_MS
# is 120 s for relay-2), and it is SIGKILLed holding it. Its PUB may reach
# the stream when nats-server thaws: the takeover's republish is then a
# duplicate the stream drops, an answer lost in flight.
held_rows() {
  # Its window claims' rows (relay_claims; relay-2 works alone), or rows it
  # leased one by one (rows that came back).
  psql_c -c "SELECT (SELECT count(*) FROM outbox.events WHERE status = 'leased')
    + (SELECT coalesce(sum(cardinality(ids)), 0) FROM outbox.relay_claims)"
}
holding() { [ "$(held_rows)" -gt 0 ]; }
podman stop -t 10 "$(name_of relay)" "$(name_of relay-3)" >/dev/null 2>&1
write 1500
wait_for 60 "relay-2 to publish 300 rows" sh -c "[ \$(podman exec $(name_of postgres) psql -X -t -A \
  -U outbox -d outbox -c \"SELECT count(*) FROM outbox.events WHERE status = 'done'\") -ge 300 ]"
podman pause "$(name_of nats)" >/dev/null
write 100
wait_for 30 "relay-2 to claim a row while nats-server is frozen" holding
podman kill -s KILL "$(name_of relay-2)" >/dev/null
podman unpause "$(name_of nats)" >/dev/null
held=$(held_rows)
log "relay-2 SIGKILLed holding $held claimed or leased rows"
[ "$held" -gt 0 ] || fail "relay-2 held nothing when killed; nothing to take over"
podman start "$(name_of relay)" "$(name_of relay-3)" >/dev/null 2>&1
write 400
wait_for 120 "every event handled after the kill" all_handled
check_exactly_once "after the kill"
taken=$(psql_c -c "SELECT count(*) FROM outbox.events WHERE lease_expiries > 0")
log "$taken rows taken over after their lease expired"
[ "$taken" -gt 0 ] || fail "no row was taken over from the killed relay"
pending=$(psql_c -c "SELECT count(*) FROM outbox.events WHERE status <> 'done'")
[ "$pending" = 0 ] || fail "$pending outbox rows not done"
dead=$(psql_c -c "SELECT count(*) FROM outbox.dead_letters")
[ "$dead" = 0 ] || fail "$dead dead letters"

# A health check that cannot fail proves nothing: without NATS every
# replica's check must fail (/readyz answers 503).
podman stop -t 5 "$(name_of nats)" >/dev/null 2>&1
for d in $DAEMONS; do
  wait_for 30 "the health check of $d to fail without NATS" unhealthy "$(name_of "$d")"
done

"${compose[@]}" down -v >/dev/null 2>&1 || fail "podman-compose down"
left=$(podman ps -aq --filter "label=io.podman.compose.project=$project" | wc -l)
[ "$left" = 0 ] || fail "$left containers left after down"
compose=()
log "PASS: image, health checks, compose with 3 relays, 2 consumers and Prometheus, exactly once across a relay kill"
