#!/usr/bin/env bash
# Checks that a harness run leaves nothing behind, with the cleanup probe:
#   (a) a run to the end, with one failing test;
#   (b) a runner SIGKILLed mid-run, as a ctest timeout would.
# Afterwards no process the run started (servers, postgres backends, reaper,
# worker, a process a test spawned and forgot) may be alive, and the run's
# temp dir must be gone. Uses the pids and dir the probe reports, never a
# global pgrep: other test binaries run their own servers at the same time.
# Usage: check_harness_cleanup.sh <probe binary>
set -euo pipefail

probe=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/obx-cleanup-check-XXXXXX")
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Dead, or a zombie: PID 1 of a container may never reap an orphan.
gone() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  [[ ${stat:0:1} == Z || ${stat:0:1} == X ]]
}

value() {
  sed -n "s/^$1=//p" "$2"
}

# Pids whose command line names the run dir, as the servers' do. The pattern
# goes through a file so that grep's own command line does not match.
named_after() {
  printf '%s\n' "$1" >"$work/pattern"
  grep -alsF -f "$work/pattern" /proc/[0-9]*/cmdline | cut -d/ -f3 || true
}

# Polls until nothing of the run is left, for up to 30 s (the reaper works
# asynchronously after a SIGKILL).
check_clean() {
  local info=$1 label=$2 run_dir pids leftovers pid deadline=$((SECONDS + 30))
  run_dir=$(value run_dir "$info")
  [[ $run_dir == */obx-harness-* ]] || fail "$label: the probe reported no run dir"
  pids="$(value reaper_pid "$info") $(value pg_pid "$info") $(value nats_pid "$info")"
  pids+=" $(value worker_pid "$info") $(value spawned_pid "$info")"
  pids+=" $(tr '\n' ' ' 2>/dev/null <"$info.pg_children" || true)"
  while :; do
    leftovers=""
    for pid in $pids; do
      if [[ $pid -gt 0 ]] && ! gone "$pid"; then
        leftovers+=" pid $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true))"
      fi
    done
    for pid in $(named_after "$run_dir"); do
      gone "$pid" || leftovers+=" pid $pid (its command line names $run_dir)"
    done
    [[ ! -e $run_dir ]] || leftovers+=" the dir $run_dir"
    [[ -n $leftovers ]] || break
    ((SECONDS < deadline)) || fail "$label: left behind:$leftovers"
    sleep 0.1
  done
  echo "ok: $label left nothing behind (run dir $run_dir; pids$(echo " $pids" | tr -s ' '))"
}

# (a) A run to the end: POST_ALL tears down, the worker's exit handler kills
# what the test forgot.
rc=0
OBX_PROBE_INFO=$work/a.info "$probe" --jobs=2 >"$work/a.log" 2>&1 || rc=$?
[[ $rc -ne 0 ]] || fail "(a) the probe passed, but one of its tests fails on purpose"
grep -q "deliberate failure" "$work/a.log" || fail "(a) the probe did not run: $(tail -20 "$work/a.log")"
[[ -s $work/a.info ]] || fail "(a) the probe reported nothing: $(tail -20 "$work/a.log")"
check_clean "$work/a.info" "(a) a run with a failing test"

# (b) A runner SIGKILLed while a test runs: only the reaper can clean up.
OBX_PROBE_INFO=$work/b.info OBX_PROBE_HANG=1 "$probe" --jobs=2 >"$work/b.log" 2>&1 &
runner=$!
deadline=$((SECONDS + 120))
until [[ -s $work/b.info ]]; do
  kill -0 "$runner" 2>/dev/null || fail "(b) the probe exited before it hung: $(tail -20 "$work/b.log")"
  ((SECONDS < deadline)) || { kill -9 "$runner"; fail "(b) the probe reported nothing in 120 s"; }
  sleep 0.1
done
run_dir=$(value run_dir "$work/b.info")
pg_pid=$(value pg_pid "$work/b.info")
nats_pid=$(value nats_pid "$work/b.info")
spawned_pid=$(value spawned_pid "$work/b.info")
# Something must be running now, or the check below would prove nothing.
if [[ ! -d $run_dir ]] || gone "$pg_pid" || gone "$nats_pid" || gone "$spawned_pid"; then
  fail "(b) the servers and the spawned process should be running while the probe hangs"
fi
pgrep -P "$pg_pid" >"$work/b.info.pg_children" || true
kill -9 "$runner"
wait "$runner" 2>/dev/null || true
check_clean "$work/b.info" "(b) a runner killed with SIGKILL"
