#!/usr/bin/env bash
# Fails if a shared library exports a symbol outside the public outbox_ API,
# or exports nothing at all (a broken version script would hide everything).
set -euo pipefail
status=0
for lib in "$@"; do
  defined=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u)
  if [ -z "$defined" ] || ! grep -q '^outbox_' <<<"$defined"; then
    echo "FAIL $lib exports no outbox_ symbol"
    status=1
  fi
  stray=$(grep -v '^outbox_' <<<"$defined" || true)
  if [ -n "$stray" ]; then
    echo "FAIL $lib exports symbols outside the outbox_ API:"
    echo "$stray" | sed 's/^/  /'
    status=1
  fi
  echo "$lib: $(grep -c '^outbox_' <<<"$defined") outbox_ symbols"
done
# A name must not be exported by both libraries: a program linking both
# would get one copy at random.
if [ $# -ge 2 ]; then
  both=$(comm -12 <(nm -D --defined-only "$1" | awk '{print $3}' | sort -u) \
                  <(nm -D --defined-only "$2" | awk '{print $3}' | sort -u))
  if [ -n "$both" ]; then
    echo "FAIL exported by both libraries: $both"
    status=1
  fi
fi
exit $status
