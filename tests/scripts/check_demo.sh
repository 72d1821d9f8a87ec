#!/usr/bin/env bash
# The README's first command, shortened: `outboxd demo` starts its own
# throwaway servers, writes, relays and consumes, and exits 0 only when its
# own audit finds nothing lost, duplicated or published without a commit.
# It runs in a schema of its own, which writers, relays and consumers must
# all honour.
set -uo pipefail
outboxd=$1
out=$(OUTBOX_SCHEMA=demo_shop timeout 240 "$outboxd" demo --seconds 3 --rate 200 --writers 2 \
  --relays 2 2>&1)
code=$?
echo "$out" | tail -14
if [ "$code" != 0 ]; then
  echo "FAIL outboxd demo exited $code"
  exit 1
fi
for line in 'events written \(committed with their reviews\) *600$' 'lost *0$' \
  'duplicates in the stream *0$' 'handled by the consumers *600$' \
  "handled out of their movie's order *0$"; do
  if ! grep -qE -- "$line" <<<"$out"; then
    echo "FAIL the summary lacks /$line/"
    exit 1
  fi
done
echo "demo ok"
