#!/usr/bin/env bash
# The README's settings table must be exactly what the settings table
# generates (outboxd --settings-markdown), so the two cannot drift.
set -euo pipefail
outboxd=$1
readme=$2
expected=$("$outboxd" --settings-markdown)
if ! grep -qF -- "$expected" "$readme"; then
  echo "FAIL README.md's settings table differs from 'outboxd --settings-markdown':"
  diff <(echo "$expected") <(grep '^| `OUTBOX_\|^| Variable\|^|---' "$readme") || true
  exit 1
fi
echo "README settings table matches ($(echo "$expected" | wc -l) lines)"
