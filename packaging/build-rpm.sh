#!/usr/bin/env bash
# build-rpm.sh: builds kibotos-agent-<version>-<release>.<arch>.rpm with rpmbuild
# (Debian's rpm package works) from the same meson install as the deb.
#
# Environment:
#   KIBOTOS_PKG_OUTDIR     where the .rpm is copied (default: the current directory)
#   KIBOTOS_PKG_WORKDIR    work area shared with build-deb.sh (default:
#                          $TMPDIR/kibotos-pkg-$UID); when build-deb.sh has built
#                          there, its meson build dir is reused, so the rpm holds the
#                          deb's very binaries and nothing is compiled again
#   KIBOTOS_PKG_REVISION   rpm release (default 1)
#   KIBOTOS_VERSION_OVERRIDE  upstream version instead of meson's
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
outdir=$(mkdir -p "${KIBOTOS_PKG_OUTDIR:-$PWD}" && cd "${KIBOTOS_PKG_OUTDIR:-$PWD}" && pwd)
work=${KIBOTOS_PKG_WORKDIR:-${TMPDIR:-/tmp}/kibotos-pkg-$(id -u)}
version=${KIBOTOS_VERSION_OVERRIDE:-$("$here/project-version.sh" "$src")}
release=${KIBOTOS_PKG_REVISION:-1}
stage="$work/src"

"$here/stage-source.sh" "$src" "$stage" "$version"
builddir=$(ls -d "$stage"/obj-* 2>/dev/null | head -n1 || true)
[ -n "$builddir" ] || builddir="$work/rpm-build"
topdir="$work/rpmbuild"
mkdir -p "$topdir"/{BUILD,RPMS,SPECS,BUILDROOT}
rpmbuild -bb --nodeps \
  --define "_topdir $topdir" \
  --define "kib_version $version" \
  --define "kib_release $release" \
  --define "kib_srcdir $stage" \
  --define "kib_builddir $builddir" \
  "$here/rpm/kibotos-agent.spec"
rpm=$(find "$topdir/RPMS" -name "kibotos-agent-$version-$release.*.rpm" | head -n1)
cp "$rpm" "$outdir/"
echo "$outdir/$(basename "$rpm")"
