#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang-14, ASan+UBSan, coverage-guided)
# in build-fuzz and runs each one over a working copy of its seed corpus.
#   tests/fuzz/run.sh [--time SECONDS] [--runs N] [--workers W] [--timeout SECONDS] [TARGET...]
# Defaults: every target, 60 s each, one worker, 10 s per input before it counts as a
# hang (libFuzzer times wall clock: a run at `nice` beside builds needs more). With
# both --time and --runs, a target stops at whichever it reaches first. What each run
# found (crashes, leaks, broken invariants) is left in build-fuzz/artifacts/TARGET/;
# the table at the end gives executions, wall seconds, coverage (libFuzzer's cov:
# edges) and findings per target. The long runs docs/security.md records:
# tests/fuzz/run.sh --runs 10000000 --timeout 120.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
build=${KIBOTOS_FUZZ_BUILD:-build-fuzz}
limit=()
workers=1
timeout=10
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --time) limit+=(-max_total_time="$2"); shift 2 ;;
    --runs) limit+=(-runs="$2"); shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ "${#limit[@]}" -gt 0 ] || limit=(-max_total_time=60)
if [ "${#targets[@]}" -eq 0 ]; then
  for f in tests/fuzz/*_fuzz.cpp; do targets+=("$(basename "$f" _fuzz.cpp)"); done
fi

if [ ! -f "$build/build.ninja" ]; then
  # -O1 and line tables: fast enough to fuzz, quick to build, stacks with lines.
  CC=clang-14 CXX=clang++-14 meson setup "$build" -Dfuzz=true -Dintegration_tests=false \
    -Dbuildtype=debug -Doptimization=1 -Ddebug=false -Db_sanitize=address,undefined -Db_lundef=false \
    -Dcpp_args='-fsanitize=fuzzer-no-link -gline-tables-only' -Dc_args='-fsanitize=fuzzer-no-link' \
    -Dwerror=true >/dev/null
fi
ninja -C "$build" fuzz

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=()
report=()
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  artifacts="$build/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  cp -n tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  log="$build/artifacts/$t.log"
  echo "== fuzz $t (${limit[*]})"
  status=0
  started=$SECONDS
  # -rss_limit_mb: a target must not grow; -timeout: one input must not hang.
  parallel=()  # libFuzzer's -jobs writes fuzz-N.log files in the working directory
  [ "$workers" -gt 1 ] && parallel=(-jobs="$workers" -workers="$workers")
  (cd "$build" && "./tests/fuzz/${t}_fuzz" "${limit[@]}" -rss_limit_mb=2048 -timeout="$timeout" -print_final_stats=1 \
    "${parallel[@]}" -artifact_prefix="artifacts/$t/" "corpus/$t") >"$log" 2>&1 || status=$?
  if [ "$workers" -gt 1 ]; then cat "$build"/fuzz-*.log >>"$log" 2>/dev/null || true; rm -f "$build"/fuzz-*.log; fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s+=$2} END {print s+0}')
  cov=$(grep -o ' cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  found=$(find "$artifacts" -type f | wc -l)
  wall=$((SECONDS - started))
  report+=("$(printf '%-18s %12s execs  %6s s  cov %6s  findings %s' "$t" "$execs" "$wall" "${cov:-?}" "$found")")
  if [ "$status" -ne 0 ] || [ "$found" -gt 0 ]; then
    failed+=("$t")
    tail -40 "$log"
  fi
done
printf '%s\n' "${report[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]} (see $build/artifacts/)" >&2
  exit 1
fi
