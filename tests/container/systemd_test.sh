#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Lints deploy/systemd/: `systemd-analyze verify` on an instance of each
# template, and `systemd-analyze security --offline=true` with a ceiling
# on the exposure score, so loosening the sandbox fails the test. Works
# without systemd as PID 1 (FACTS.md item 10). ExecStart is pointed at the
# outboxd under test in a scratch copy: verify insists the binary exists.
# Usage: systemd_test.sh OUTBOXD
set -euo pipefail
outboxd=$1
units=$(cd "$(dirname "$0")/../../deploy/systemd" && pwd)
# In tenths, as --threshold takes it: 20 is an exposure of 2.0 ("OK"); the
# units score 1.2 now.
max_exposure=${OUTBOX_MAX_EXPOSURE:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v systemd-analyze >/dev/null || {
  echo "SKIP: systemd-analyze is not installed (scripts/install-deps container)"
  exit 77
}
failures=0
for template in "$units"/outboxd-*@.service; do
  name=$(basename "$template")
  instance=${name/@./@t1.}
  sed "s|^ExecStart=/usr/local/bin/outboxd |ExecStart=$outboxd |" "$template" >"$work/$name"
  ln -sf "$name" "$work/$instance"
  for key in Type=notify DynamicUser=yes ProtectSystem=strict NoNewPrivileges=yes \
    Restart=on-failure WatchdogSec= EnvironmentFile=; do
    grep -q "^$key" "$template" || {
      echo "FAIL $name: no $key"
      failures=$((failures + 1))
    }
  done
  if out=$(cd "$work" && systemd-analyze verify "./$instance" 2>&1) && [ -z "$out" ]; then
    echo "ok   verify $instance"
  else
    echo "FAIL verify $instance: $out"
    failures=$((failures + 1))
  fi
  if out=$(cd "$work" && systemd-analyze security --offline=true --threshold="$max_exposure" \
    "./$instance" 2>&1); then
    echo "ok   security $instance: $(grep -o 'exposure level.*' <<<"$out")"
  else
    echo "FAIL security $instance (ceiling $max_exposure): $(tail -1 <<<"$out")"
    failures=$((failures + 1))
  fi
done
exit $((failures > 0))
