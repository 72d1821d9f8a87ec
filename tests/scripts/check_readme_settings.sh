#!/usr/bin/env bash
# The README's settings table must be exactly what the settings table
# generates (outboxd --settings-markdown), so the two cannot drift.
set -euo pipefail
outboxd=$1
readme=$2
expected=$("$outboxd" --settings-markdown)
# The table in the README: from its header line to the first line that is not a row.
actual=$(awk '/^\| Variable/ { on = 1 } on && !/^\|/ { exit } on' "$readme")
if [ "$expected" != "$actual" ]; then
  echo "FAIL README.md's settings table differs from 'outboxd --settings-markdown':"
  diff <(echo "$expected") <(echo "$actual") || true
  exit 1
fi
echo "README settings table matches ($(echo "$expected" | wc -l) lines)"
