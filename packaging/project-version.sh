#!/usr/bin/env bash
# Prints the project version: the one source is `project(version : ...)` in the
# top-level meson.build, read through meson's own introspection.
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
meson introspect --projectinfo "$src/meson.build" 2>/dev/null |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])'
