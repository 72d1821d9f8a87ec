#!/usr/bin/env bash
# Builds the libFuzzer targets (build-fuzz: clang, -fsanitize=fuzzer,address,
# undefined) and runs each for a bounded time, two at a time.
#
#   tests/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
#
# SECONDS_PER_TARGET defaults to 15 (what CI runs; scripts/test --soak runs
# 300). TARGETs default to all of them (tests/fuzz/fuzz_<target>.c).
# FUZZ_JOBS sets how many run at once (default 2).
# FUZZ_RUNS=N (what CI sets) runs N inputs per target from seed 1 and from
# the committed seeds only, instead of for a time: the same inputs on every
# machine, so a run that passed once passes again for the same code, and a
# new finding shows up in a soak or a local run, not as a flaky CI run.
#
# Each target starts from its seeds (tests/fuzz/corpus/<target>, its
# regression inputs, and tests/data/envelopes for the envelope target) and
# keeps what it finds in build-fuzz/fuzz-corpus/<target>, so a later run
# goes on from there. Prints per target the executions and the coverage
# reached (libFuzzer's cov: edges and ft: features). A crash, a leak, a
# broken invariant or a timeout fails the run: its input is printed (base64)
# and kept under build-fuzz/fuzz-artifacts/<target>/; fix the code and add
# the input to tests/fuzz/regressions/<target>/, which unit.fuzz_replay
# replays in every ASan test run.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-15}
shift || true
all=(envelope message fleet_file handler_spec url_list setting nkey secret_file)
targets=("${@:-${all[@]}}")
jobs=${FUZZ_JOBS:-2}
build=build-fuzz

CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DBUILD_TESTING=OFF \
      -DOUTBOX_FUZZ=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target fuzz >/dev/null

run_one() {
  local t=$1 work=$build/fuzz-corpus/$1 artifacts=$build/fuzz-artifacts/$1/
  local log=$build/fuzz-logs/$1.log seeds=(tests/fuzz/corpus/"$t")
  rm -rf "$artifacts" # only this run's crashes are shown
  [ -n "${FUZZ_RUNS:-}" ] && rm -rf "$work" # reproducible: the committed seeds only
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  [ -d tests/fuzz/regressions/"$t" ] && seeds+=(tests/fuzz/regressions/"$t")
  [ "$t" = envelope ] && seeds+=(tests/data/envelopes/valid tests/data/envelopes/invalid)
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: a parser
  # that allocates without bound fails too.
  local bound=(-max_total_time="$seconds")
  [ -n "${FUZZ_RUNS:-}" ] && bound=(-runs="$FUZZ_RUNS" -seed=1)
  "$build/bin/fuzz_$t" "${bound[@]}" -timeout=10 -rss_limit_mb=2048 \
    -max_len=8192 -print_final_stats=1 -artifact_prefix="$artifacts" \
    "$work" "${seeds[@]}" >"$log" 2>&1
}

summary() {
  local t=$1 log=$build/fuzz-logs/$1.log status=$2 last execs
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  printf '%-13s %-6s execs=%-9s cov=%-5s ft=%-6s corpus=%s\n' "$t" "$status" "${execs:-?}" \
    "$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")" \
    "$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")" \
    "$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")"
}

failed=()
declare -A pid_of
running=()
for t in "${targets[@]}"; do
  if [ ! -x "$build/bin/fuzz_$t" ]; then
    echo "tests/fuzz/run.sh: no target $t (targets: ${all[*]})" >&2
    exit 2
  fi
  while [ "${#running[@]}" -ge "$jobs" ]; do
    wait -n || true
    still=()
    for r in "${running[@]}"; do
      kill -0 "${pid_of[$r]}" 2>/dev/null && still+=("$r")
    done
    running=("${still[@]}")
  done
  run_one "$t" & pid_of[$t]=$!
  running+=("$t")
done

if [ -n "${FUZZ_RUNS:-}" ]; then echo "fuzzing: $FUZZ_RUNS inputs per target from seed 1"; else echo "fuzzing: $seconds s per target"; fi
for t in "${targets[@]}"; do
  if wait "${pid_of[$t]}"; then
    summary "$t" ok
  else
    summary "$t" FAILED
    failed+=("$t")
  fi
done
for t in "${failed[@]}"; do
  log=$build/fuzz-logs/$t.log
  echo
  echo "==== fuzz_$t failed ($log):"
  grep -E -A40 '^==[0-9]+==ERROR|runtime error|fuzz invariant broken|ERROR: libFuzzer' "$log" |
    head -60
  for input in "$build"/fuzz-artifacts/"$t"/*; do
    [ -f "$input" ] || continue
    echo "---- input $input (base64; add it to tests/fuzz/regressions/$t/):"
    base64 "$input" | head -40
  done
done
[ "${#failed[@]}" -eq 0 ]
