#!/usr/bin/env bash
# Create the Python environment that the server tests and bench/serve_bench.py use:
#   scripts/setup-python.sh [DIR]      (default DIR: build/venv)
# A virtual environment with pinned versions of pytest (and pytest-timeout, which bounds every test), the
# official openai client, requests, selenium, and jsonschema (the structured-output tests' validator).
# Idempotent: when DIR already holds exactly these pins it
# returns at once. Needs Debian's python3-venv (installed through scripts/apt-install.sh when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/venv}
pins=(
  pytest==9.2.0
  pytest-timeout==2.4.0
  openai==3.57.0
  requests==2.34.2
  selenium==4.50.0
  jsonschema==4.26.0
)
stamp="$dir/.kiln-pins"
if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${pins[*]}" ]; then
  exit 0
fi

# Debian's own interpreter when there is one (the one python3-venv completes), else the first on PATH.
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  scripts/apt-install.sh setup-python python3-venv
fi
rm -rf "$dir"
"$py" -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
echo "${pins[*]}" > "$stamp"
