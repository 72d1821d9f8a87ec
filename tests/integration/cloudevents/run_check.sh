#!/usr/bin/env bash
# Installs the CloudEvents SDK from this folder's package-lock.json into
# WORK_DIR (once: later runs reuse it; a lock keeps parallel tests from
# installing at the same time) and runs check_events.mjs on INPUT.
#   run_check.sh WORK_DIR INPUT.json
# Node.js and npm come from scripts/install-deps stacks; npm's cache makes a
# second install quick.
set -euo pipefail
work=$1/cloudevents
input=$2
src=$(cd "$(dirname "$0")" && pwd)
for tool in node npm; do
  command -v "$tool" >/dev/null || {
    echo "run_check.sh: needs $tool: run scripts/install-deps stacks" >&2
    exit 1
  }
done
mkdir -p "$work"
exec 9>"$work.lock"
flock 9
# A copy, so npm never writes into the source tree.
if ! cmp -s "$src/package-lock.json" "$work/package-lock.json" || [ ! -d "$work/node_modules" ]; then
  cp "$src/package.json" "$src/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --prefer-offline --loglevel=error >&2)
fi
cp "$src/check_events.mjs" "$work/"
flock -u 9
exec node "$work/check_events.mjs" "$input"
