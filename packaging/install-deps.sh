#!/usr/bin/env bash
# Installs the Debian packages listed in packaging/build-deps.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t pkgs < <(grep -v '^\s*#' "$here/build-deps.txt" | sed '/^\s*$/d')
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Peers such as dnsmasq and danted must not start as host services: tests start
# their own copies inside namespaces.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
