#!/usr/bin/env bash
# build-deb.sh: builds kibotos-agent_<version>-<revision>_<arch>.deb with
# dpkg-buildpackage from a staged copy of this tree (packaging/debian becomes its
# debian/). The version is the meson project version; the changelog is generated.
#
# Environment:
#   KIBOTOS_PKG_OUTDIR     where the .deb is copied (default: the current directory)
#   KIBOTOS_PKG_WORKDIR    staging area, reused so rebuilds are incremental
#                          (default: $TMPDIR/kibotos-pkg-$UID)
#   KIBOTOS_PKG_REVISION   Debian revision (default 1): bump it for a new package of
#                          the same source
#   KIBOTOS_VERSION_OVERRIDE  upstream version instead of meson's (rewrites the staged
#                          meson.build, so binaries report it too; full rebuild)
#   KIBOTOS_PKG_JOBS       parallel build jobs (default 2)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
outdir=$(mkdir -p "${KIBOTOS_PKG_OUTDIR:-$PWD}" && cd "${KIBOTOS_PKG_OUTDIR:-$PWD}" && pwd)
work=${KIBOTOS_PKG_WORKDIR:-${TMPDIR:-/tmp}/kibotos-pkg-$(id -u)}
upstream=${KIBOTOS_VERSION_OVERRIDE:-$("$here/project-version.sh" "$src")}
revision=${KIBOTOS_PKG_REVISION:-1}
version="$upstream-$revision"
stage="$work/src"

"$here/stage-source.sh" "$src" "$stage" "$upstream"
rm -rf "$stage/debian"
cp -a "$here/debian" "$stage/debian"
cat > "$stage/debian/changelog" <<CHANGELOG
kibotos-agent ($version) unstable; urgency=medium

  * Release $upstream (package revision $revision), built from the meson project
    version.

 -- Kibotos maintainers <kibotos@example.org>  $(date -R)
CHANGELOG

cd "$stage"
# -nc: keep the previous build directory so an unchanged tree rebuilds nothing.
DEB_BUILD_OPTIONS="parallel=${KIBOTOS_PKG_JOBS:-2} nocheck ${DEB_BUILD_OPTIONS:-}" \
  dpkg-buildpackage -us -uc -b -nc
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
deb="kibotos-agent_${version}_${arch}.deb"
cp "$work/$deb" "$outdir/"
echo "$outdir/$deb"
