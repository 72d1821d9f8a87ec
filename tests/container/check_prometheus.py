#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# The container test's look at the compose file's Prometheus, through its
# HTTP API: every replica of every pgoutbox service is a target that is up,
# the rule groups of deploy/prometheus/outbox-alerts.yml are loaded whole,
# and an outbox metric has one sample per replica, so the graphs have data,
# as has up{job=~"outbox.*"}, the selector of the OutboxDaemonDown alert.
# Polls until all of it holds or TIMEOUT seconds pass (scrapes are 1 s apart
# in the test), then prints what was missing and exits 1.
# Usage: check_prometheus.py PORT RULES_YAML TIMEOUT REPLICA... [--published N]
import json
import sys
import time
import urllib.parse
import urllib.request

import yaml


def api(port, path, **params):
    url = f"http://127.0.0.1:{port}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body}")
    return body["data"]


def problems(port, rules_path, replicas, published):
    """What does not hold yet; empty when everything does."""
    out = []
    targets = api(port, "targets", state="active")["activeTargets"]
    seen = {}
    for t in targets:
        seen[t["labels"].get("replica", t["scrapeUrl"])] = t
    for r in replicas:
        t = seen.get(r)
        if t is None:
            out.append(f"no target for replica {r}")
        elif t["health"] != "up":
            out.append(f"target {r} ({t['scrapeUrl']}) is {t['health']}: {t.get('lastError', '')}")
    extra = sorted(set(seen) - set(replicas))
    if extra:
        out.append(f"targets for no pgoutbox replica: {', '.join(extra)}")

    with open(rules_path) as f:
        want = {g["name"]: len(g["rules"]) for g in yaml.safe_load(f)["groups"]}
    got = {g["name"]: len(g["rules"]) for g in api(port, "rules")["groups"]}
    for name, count in want.items():
        if got.get(name) != count:
            out.append(f"rule group {name}: {got.get(name, 0)} rules loaded, want {count}")

    # up{job=~"outbox.*"} is what OutboxDaemonDown watches: the jobs' names must match it.
    for query in ("outbox_database_up", 'up{job=~"outbox.*"}'):
        samples = api(port, "query", query=query)["result"]
        by_replica = {s["metric"].get("replica"): s["value"][1] for s in samples}
        for r in replicas:
            if by_replica.get(r) != "1":
                out.append(f"{query} of {r}: {by_replica.get(r, 'no sample')}, want 1")
    if published is not None:
        result = api(port, "query", query="sum(outbox_relay_published_total)")["result"]
        total = float(result[0]["value"][1]) if result else 0
        if total < published:
            out.append(f"sum(outbox_relay_published_total) is {total:g}, want at least {published}")
    return out


def main():
    args = sys.argv[1:]
    published = None
    if "--published" in args:
        i = args.index("--published")
        published = int(args[i + 1])
        del args[i : i + 2]
    port, rules_path, timeout, replicas = args[0], args[1], float(args[2]), args[3:]
    deadline = time.monotonic() + timeout
    while True:
        try:
            missing = problems(port, rules_path, replicas, published)
        except (OSError, RuntimeError, ValueError, KeyError) as e:
            missing = [f"Prometheus API on 127.0.0.1:{port}: {e}"]
        if not missing:
            print(f"prometheus: {len(replicas)} targets up, rules loaded, outbox_database_up and up from each")
            return 0
        if time.monotonic() > deadline:
            for m in missing:
                print(f"prometheus: {m}", file=sys.stderr)
            return 1
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
