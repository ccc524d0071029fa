#!/usr/bin/env bash
# Install Debian packages for a project script: apt-install.sh WHO PACKAGE... (WHO names the caller in
# messages). Uses sudo when not root; fails with a message when neither is possible.
set -euo pipefail
who=$1
shift
[ $# -gt 0 ] || exit 0
echo "$who: installing $*" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "$who: missing $* and not root; install them with your package manager" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "$@" >/dev/null
