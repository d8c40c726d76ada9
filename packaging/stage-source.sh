#!/usr/bin/env bash
# stage-source.sh SRC DEST [VERSION]: copies the source tree (git's tracked and
# untracked-but-not-ignored files, else everything but build dirs) into DEST for a
# package build, keeping timestamps so an unchanged file is not rebuilt. With
# VERSION, the staged meson.build's project version is rewritten to it, so the
# binaries, GetAgent and the package all report that version.
set -euo pipefail
src=$1 dest=$2 version=${3:-}
mkdir -p "$dest"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$src" && git ls-files -co --exclude-standard -z) |
    (cd "$src" && xargs -0 -r cp --parents -p -t "$dest" 2>/dev/null || true)
  # Files deleted in git but present in the staged copy would linger; drop them.
  (cd "$dest" && find . -type f ! -path './debian/*' ! -path './obj-*' -printf '%P\n') |
    while IFS= read -r f; do [ -e "$src/$f" ] || rm -f "$dest/$f"; done
else
  tar -C "$src" --exclude='./build*' --exclude='./obj-*' --exclude=./.git -cf - . | tar -C "$dest" -xpf -
fi
if [ -n "$version" ]; then
  current=$("$src/packaging/project-version.sh" "$src")
  if [ "$current" != "$version" ]; then
    sed -i "0,/version : '$current'/s//version : '$version'/" "$dest/meson.build"
  fi
fi
