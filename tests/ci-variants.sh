#!/usr/bin/env bash
# CI's build variants, after tests/run-all.sh (ASan+UBSan, unit + integration):
#   1. clang-14 with ThreadSanitizer, -Werror, the whole tree; the unit suite under TSan
#      (loop threads fed by post(), the runtime mutex, API threads, the retry thread).
#   2. GCC release (-O2, as the .deb is built; NDEBUG), -Werror, the whole tree; the unit suite.
#   3. tests/format.sh --check.
# Integration tests stay on run-all.sh's ASan build: here they are neither built nor run.
# Every variant runs even when an earlier one failed; the exit status says if any did.
# `tests/ci-variants.sh build` only builds (.ci/run runs it beside run-all.sh).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
failed=()
step() {  # step NAME COMMAND...: runs and times one step, records a failure
  local name=$1 start=$SECONDS
  shift
  echo "== ci-variants: $name"
  if "$@"; then
    echo "== ci-variants: $name ok ($((SECONDS - start)) s)"
  else
    echo "== ci-variants: $name FAILED ($((SECONDS - start)) s)"
    failed+=("$name")
    return 1
  fi
}

tsan=${KIBOTOS_TSAN_BUILD:-build-tsan}
rel=${KIBOTOS_RELEASE_BUILD:-build-release}
jobs=()  # ninja's own default unless KIBOTOS_NINJA_JOBS says
[ -n "${KIBOTOS_NINJA_JOBS:-}" ] && jobs=(-j "$KIBOTOS_NINJA_JOBS")

tsan_build() {
  # -O1, assertions on, line tables only (enough for TSan's stacks, ~15% less compile).
  [ -f "$tsan/build.ninja" ] || CC=clang-14 CXX=clang++-14 meson setup "$tsan" \
    -Dbuildtype=debug -Doptimization=1 -Ddebug=false -Dcpp_args=-gline-tables-only \
    -Db_sanitize=thread -Db_lundef=false -Dwerror=true -Dintegration_tests=false || return
  ninja -C "$tsan" "${jobs[@]}"
}
tsan_unit() {
  # halt_on_error: a race fails its test. tests/tsan.supp: third-party internals only.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$top/tests/tsan.supp:external_symbolizer_path=/usr/lib/llvm-14/bin/llvm-symbolizer"
  # clang-14's TSan maps its shadow memory for at most 28 bits of mmap randomness;
  # on kernels set higher, run without address randomisation when allowed.
  local wrap=()
  if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)" -gt 28 ] &&
     setarch "$(uname -m)" -R true 2>/dev/null; then
    wrap=(setarch "$(uname -m)" -R)
  fi
  "${wrap[@]}" meson test -C "$tsan" --suite unit --print-errorlogs --num-processes 2
}
release_build() {
  # -O2: the level dpkg-buildflags builds the .deb's binaries at (meson's
  # release alone means -O3), so their optimizer-only warnings are the ones checked.
  [ -f "$rel/build.ninja" ] || meson setup "$rel" \
    -Dbuildtype=release -Doptimization=2 -Dwerror=true -Dintegration_tests=false || return
  ninja -C "$rel" "${jobs[@]}"
}
release_unit() {
  meson test -C "$rel" --suite unit --print-errorlogs --num-processes 2
}

if [ "${1:-}" = build ]; then
  # Builds only (.ci/run starts them beside run-all.sh at the lowest priority).
  step "clang-14 TSan build" tsan_build
  step "GCC release -Werror build" release_build
else
  step "clang-14 TSan build" tsan_build && step "unit tests under TSan" tsan_unit
  step "GCC release -Werror build" release_build && step "unit tests (release)" release_unit
  step "format check" tests/format.sh --check
fi

if [ "${#failed[@]}" -gt 0 ]; then
  echo "ci-variants: failed: ${failed[*]}" >&2
  exit 1
fi
