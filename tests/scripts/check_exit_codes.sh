#!/usr/bin/env bash
# The exit codes of the contract (0 success, 1 runtime failure, 2 usage or
# configuration error) for mistakes a user makes before any server is
# reached, and a message naming the field and the value.
set -uo pipefail
outboxd=$1
outboxctl=$2
failures=0

# A secret that must never be printed, whatever the mistake around it.
secret=s3cretPW
# expect CODE NEEDLE -- ENV... -- COMMAND...
# A command still running after 20 s fails (exit 124): a configuration error
# must be refused at start, not retried as an outage.
expect() {
  local want=$1 needle=$2 envs=() out got
  shift 2
  [ "$1" = -- ] && shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  out=$(env -i PATH="$PATH" "${envs[@]}" timeout 20 "$@" 2>&1 </dev/null)
  got=$?
  if [ "$got" != "$want" ] || ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL $*: exit $got (want $want), output lacks '$needle':"
    echo "$out" | head -5
    failures=$((failures + 1))
  elif grep -qF -- "$secret" <<<"$out"; then
    echo "FAIL $*: the output shows the secret:"
    grep -F -- "$secret" <<<"$out" | head -3
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
expect 2 '"bury" is not list, requeue, purge or skip' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" dead bury
expect 2 'give a filter' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" dead purge
expect 2 'give a filter' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" dead requeue --dry-run
expect 2 'give a filter' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" quarantine purge --limit 5
expect 2 'give a filter' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" quarantine skip --limit 5
expect 2 '"bury" is not list, release, purge or skip' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" quarantine bury
expect 2 '--repair is not an option of this verb' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" trace 0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b --repair
expect 2 'EVENT_ID "nope" is not a UUID' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" trace nope
expect 2 'takes one positional argument' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" trace
expect 2 '--handler is not an option of this verb' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" replay --handler h
expect 2 '--until is not an option of this verb' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" audit --until 2026-01-01
expect 2 '--data-subject is required' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" erase
expect 2 'must be 1 to 256 bytes without control characters' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" export --data-subject ''
expect 2 '--print is not an option of this verb' -- OUTBOX_DATABASE_URL=postgres://unused -- "$outboxctl" doctor --print
# Settings that would fail every connect: refused at start by variable and
# value (secrets masked), not retried forever as an outage.
db=OUTBOX_DATABASE_URL=postgres://unused
long_name=$(printf 'c%.0s' $(seq 300))
expect 2 'OUTBOX_DATABASE_URL="not a url": not a libpq URL' -- 'OUTBOX_DATABASE_URL=not a url' -- "$outboxd" relay
expect 2 'OUTBOX_DATABASE_URL="host=db password=*** port=abc": port "abc"' -- "OUTBOX_DATABASE_URL=host=db password=$secret port=abc" -- "$outboxd" relay
expect 2 'OUTBOX_DATABASE_URL="postgresql://app:***@db:abc/x"' -- "OUTBOX_DATABASE_URL=postgresql://app:$secret@db:abc/x" -- "$outboxd" consume --handler 'a=sql:SELECT 1'
expect 2 'OUTBOX_DATABASE_URL="***"' -- "OUTBOX_DATABASE_URL=host=db password $secret" -- "$outboxd" relay
expect 2 'OUTBOX_DATABASE_URL="port=abc"' -- OUTBOX_DATABASE_URL=port=abc -- "$outboxctl" status
expect 2 'OUTBOX_NATS_URL="nats://u:***@n1:abc"' -- "$db" "OUTBOX_NATS_URL=nats://u:$secret@n1:abc" -- "$outboxd" relay
expect 2 'OUTBOX_NATS_CREDS="/nonexistent/app.creds": cannot be read' -- "$db" OUTBOX_NATS_CREDS=/nonexistent/app.creds -- "$outboxd" relay
expect 2 'OUTBOX_NATS_TLS_CA="/nonexistent/ca.pem": cannot be read' -- "$db" OUTBOX_NATS_TLS_CA=/nonexistent/ca.pem -- "$outboxd" consume --handler 'a=sql:SELECT 1'
expect 2 'OUTBOX_NATS_TLS_CERT="/": is not a regular file' -- "$db" OUTBOX_NATS_TLS_CERT=/ OUTBOX_NATS_TLS_KEY=/ -- "$outboxd" relay
expect 2 'OUTBOX_CE_SOURCE="svc\r\nx"' -- "$db" "OUTBOX_CE_SOURCE=svc"$'\r\n'"x" -- "$outboxd" relay
expect 2 'OUTBOX_CE_SOURCE="not a uri": must be a URI-reference (RFC 3986)' -- "$db" "OUTBOX_CE_SOURCE=not a uri" -- "$outboxd" relay
expect 2 'byte 4 (0xc3) is not ASCII; percent-encode it (%C3)' -- "$db" "OUTBOX_CE_SOURCE=caf"$'\xc3\xa9' -- "$outboxd" relay
expect 2 'OUTBOX_CONSUMER_NAME="ccc' -- "$db" "OUTBOX_CONSUMER_NAME=$long_name" -- "$outboxd" consume --handler 'a=sql:SELECT 1'
expect 2 'OUTBOX_NAME="r1\nlevel=error forged"' -- "$db" "OUTBOX_NAME=r1"$'\n'"level=error forged" -- "$outboxd" relay
expect 2 'OUTBOX_NATS_TLS_CERT and OUTBOX_NATS_TLS_KEY must be set together (OUTBOX_NATS_TLS_KEY is not set)' -- "$db" "OUTBOX_NATS_TLS_CERT=$0" -- "$outboxd" relay
# A fleet file line with a password in key=value words: refused, masked.
fleet=$(mktemp)
trap 'rm -f "$fleet"' EXIT
echo "orders host=db password=$secret dbname=orders" >"$fleet"
expect 2 'unknown field "password" (value "***"' -- "OUTBOX_FLEET_FILE=$fleet" -- "$outboxd" relay
# Names no setting has, and settings the command does not read: warned
# about (the bad OUTBOX_HTTP_ADDR only makes the relay stop at once).
expect 2 'unknown variable "OUTBOX_BATCHSIZE" ignored; did you mean OUTBOX_BATCH_SIZE?' -- "$db" OUTBOX_HTTP_ADDR=bad OUTBOX_BATCHSIZE=500 -- "$outboxd" relay
expect 2 'flag --ledger-lease-seconds is ignored by outboxd relay' -- "$db" OUTBOX_HTTP_ADDR=bad -- "$outboxd" relay --ledger-lease-seconds 60
expect 2 'variable "OUTBOX_LEDGER_LEASE_SECONDS" is ignored by outboxd relay' -- "$db" OUTBOX_HTTP_ADDR=bad OUTBOX_LEDGER_LEASE_SECONDS=60 -- "$outboxd" relay
expect 2 'unknown variable "OUTBOX_DATABSE_URL" ignored; did you mean OUTBOX_DATABASE_URL?' -- OUTBOX_DATABSE_URL=postgres://x -- "$outboxctl" status
# --help names every verb.
for verb in migrate status trace dead replay audit validate quarantine export erase subjects doctor roles; do
  expect 0 "  $verb " -- -- "$outboxctl" --help
done
exit $((failures > 0))
