#!/usr/bin/env bash
# The exit codes of the contract (0 success, 1 runtime failure, 2 usage or
# configuration error) for mistakes a user makes before any server is
# reached, and a message naming the field and the value.
set -uo pipefail
outboxd=$1
outboxctl=$2
failures=0

# expect CODE NEEDLE -- ENV... -- COMMAND...
expect() {
  local want=$1 needle=$2 envs=() out got
  shift 2
  [ "$1" = -- ] && shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  out=$(env -i PATH="$PATH" "${envs[@]}" "$@" 2>&1 </dev/null)
  got=$?
  if [ "$got" != "$want" ] || ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL $*: exit $got (want $want), output lacks '$needle':"
    echo "$out" | head -5
    failures=$((failures + 1))
  else
    echo "ok   $* -> $got"
  fi
}

expect 2 'unknown verb "bogus"' -- -- "$outboxctl" bogus
expect 2 'OUTBOX_DATABASE_URL is required' -- -- "$outboxctl" status
expect 2 'OUTBOX_DATABASE_URL is required' -- -- "$outboxctl" migrate
expect 2 'OUTBOX_BATCH_SIZE="0"' -- OUTBOX_DATABASE_URL=postgres://unused OUTBOX_BATCH_SIZE=0 -- "$outboxd" relay
expect 2 'OUTBOX_RELAY_MODE="sometimes"' -- OUTBOX_DATABASE_URL=postgres://unused OUTBOX_RELAY_MODE=sometimes -- "$outboxd" relay
expect 2 'database_url is required' -- -- "$outboxd" relay
expect 2 'unknown variable OUTBOX_HANDLER_AUDIT' -- OUTBOX_DATABASE_URL=postgres://unused 'OUTBOX_HANDLER_AUDIT=a=sql:SELECT 1' -- "$outboxd" consume
expect 1 'cannot connect to the database' -- 'OUTBOX_DATABASE_URL=postgresql://127.0.0.1:1/none?connect_timeout=2' -- "$outboxctl" status
# outboxctl's own options: refused by option and value before any server is reached.
expect 2 '--since "yesterday" is not an ISO 8601 time' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" dead list --since yesterday
expect 2 '--id "42" is not a UUID' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" dead requeue --id 42
expect 2 '--limit "0" must be a whole number' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" dead purge --limit 0
expect 2 '"bury" is not list, requeue or purge' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" dead bury
expect 2 'give a filter' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" dead purge
expect 2 'give a filter' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" dead requeue --dry-run
expect 2 'give a filter' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" quarantine purge --limit 5
expect 2 '"bury" is not list, release or purge' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" quarantine bury
expect 2 '--repair is not an option of this verb' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" trace 0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b --repair
expect 2 'EVENT_ID "nope" is not a UUID' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" trace nope
expect 2 'takes one positional argument' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" trace
expect 2 '--handler is not an option of this verb' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" replay --handler h
expect 2 '--until is not an option of this verb' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" audit --until 2026-01-01
expect 2 '--data-subject is required' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" erase
expect 2 'must be 1 to 256 bytes without control characters' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" export --data-subject ''
expect 2 '--print is not an option of this verb' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" doctor --print
# --help names every verb.
for verb in migrate status trace dead replay audit validate quarantine export erase subjects doctor roles; do
  expect 0 "  $verb " -- -- "$outboxctl" --help
done
exit $((failures > 0))
