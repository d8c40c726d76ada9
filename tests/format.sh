#!/usr/bin/env bash
# The C++ sources' formatting (.clang-format at the top of the tree), with the
# clang-format that packaging/build-deps.txt installs.
#   tests/format.sh --check   list the files clang-format would change; exit 1 if any
#   tests/format.sh --fix     rewrite them in place
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
clang_format=${CLANG_FORMAT:-clang-format-14}
mode=${1:-}
case "$mode" in
  --check | --fix) ;;
  *) echo "usage: $0 --check | --fix" >&2; exit 2 ;;
esac
# Every C++ source and header the project wrote (proto/'s C++ is generated at build time,
# nothing is vendored).
mapfile -t files < <(git ls-files -- 'agent/*.h' 'agent/*.cpp' 'uring/*.h' 'uring/*.cpp' \
  'netns/*.h' 'netns/*.cpp' 'tests/*.h' 'tests/*.cpp')
if [ "$mode" = --fix ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 50 -P 2 "$clang_format" -i --style=file
  exit 0
fi
mapfile -t changed < <(printf '%s\0' "${files[@]}" | xargs -0 -n 20 -P 2 sh -c \
  'for f; do "$0" --style=file "$f" | cmp -s - "$f" || echo "$f"; done' "$clang_format" | sort)
if [ "${#changed[@]}" -gt 0 ]; then
  echo "format.sh: ${#changed[@]} file(s) differ from .clang-format (fix: tests/format.sh --fix):" >&2
  printf '  %s\n' "${changed[@]}" >&2
  exit 1
fi
echo "format.sh: ${#files[@]} files formatted"
