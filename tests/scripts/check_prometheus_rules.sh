#!/usr/bin/env bash
# The alerting rules (deploy/prometheus/outbox-alerts.yml) load, and so
# does the compose file's Prometheus config (prometheus.yml), their unit
# tests (tests/prometheus/outbox-alerts.test.yml) pass, and every outbox_*
# metric they name is in the metrics table of docs/operations.md, so a renamed metric fails
# here rather than leaving an alert that can never fire.
set -euo pipefail
root=$1
rules=$root/deploy/prometheus/outbox-alerts.yml
tests=$root/tests/prometheus/outbox-alerts.test.yml
readme=$root/docs/operations.md
if ! command -v promtool >/dev/null; then
  echo "FAIL promtool not found: run scripts/install-deps test (Debian's prometheus package)"
  exit 1
fi
promtool check rules "$rules"
# The compose file's Prometheus config, and the rule file it loads by a relative path.
promtool check config "$root/deploy/prometheus/prometheus.yml"
promtool test rules "$tests"
# The metrics table: from its header line to the first line that is not a row.
# A name like outbox_relay_{leased,published}_total stands for each name it
# expands to; a label set such as {handler="..."} is not part of a name.
python3 - "$rules" "$readme" <<'PY'
import re, sys
rules, readme = open(sys.argv[1]).read(), open(sys.argv[2]).read().splitlines()
table, on = [], False
for line in readme:
    if line.startswith("| Metric |"):
        on = True
    elif on and not line.startswith("|"):
        break
    if on:
        table.append(line)
def expand(name):
    m = re.search(r"\{([a-z0-9_,]+)\}", name)
    if not m or "," not in m.group(1):
        return [re.sub(r"\{.*", "", name)]
    return [x for part in m.group(1).split(",")
            for x in expand(name[:m.start()] + part + name[m.end():])]
documented = {n for line in table for tok in re.findall(r"`([^`]+)`", line)
              for n in expand(tok) if n.startswith("outbox_")}
if not documented:
    sys.exit("FAIL no metrics table (a '| Metric |' header) in docs/operations.md")
used = sorted(set(re.findall(r"\boutbox_[a-z0-9_]+", rules)))
missing = [n for n in used if n not in documented]
if missing:
    sys.exit("FAIL the alerting rules use metrics the metrics table of docs/operations.md does not list: "
             + ", ".join(missing))
print("alert rules use %d metrics, all in the table of docs/operations.md (%d names)" % (len(used), len(documented)))
PY
