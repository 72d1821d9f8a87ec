#!/usr/bin/env bash
# The settings reference's table must be exactly what the settings table
# generates (outboxd --settings-markdown), so the two cannot drift.
set -euo pipefail
outboxd=$1
doc=$2
expected=$("$outboxd" --settings-markdown)
# The table in the document: from its header line to the first line that is not a row.
actual=$(awk '/^\| Variable/ { on = 1 } on && !/^\|/ { exit } on' "$doc")
if [ "$expected" != "$actual" ]; then
  echo "FAIL $doc's settings table differs from 'outboxd --settings-markdown':"
  diff <(echo "$expected") <(echo "$actual") || true
  exit 1
fi
echo "$(basename "$doc") settings table matches ($(echo "$expected" | wc -l) lines)"
