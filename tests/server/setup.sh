#!/usr/bin/env bash
# What the server tests need on a fresh Debian machine: the pinned Python environment (scripts/
# setup-python.sh VENV) and Debian's nginx, chromium and chromium-driver (through scripts/apt-install.sh,
# only when missing). The ctest fixture server_setup runs this before every server test; it returns at once
# when everything is there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-$root/build/venv}
need=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
"$root/scripts/apt-install.sh" server-tests "${need[@]}"
"$root/scripts/setup-python.sh" "$venv"
