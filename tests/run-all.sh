#!/usr/bin/env bash
# The whole test suite: builds with ASan+UBSan into build-test/ and runs the unit and
# integration tests (integration tests need root; they skip without it).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=${KIBOTOS_TEST_BUILD:-build-test}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
fi
ninja -C "$build"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
meson test -C "$build" --print-errorlogs --num-processes 2 "$@"
