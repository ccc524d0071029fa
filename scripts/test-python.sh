#!/usr/bin/env bash
# test-python.sh BUILD_DIR [KILN]: the Python binding's tests (python/tests) for a CMake build directory.
#  1. BUILD_DIR/venv-python: a virtual environment with python/tests/requirements.txt (pinned
#     scikit-build-core, numpy, pytest), made again only when that file changes;
#  2. `pip install ./python` into it (no build isolation, its CMake tree kept in BUILD_DIR/python-build
#     so that a rebuild is incremental), skipped when nothing under python/kiln, src/, include/ or the
#     build files is newer than the last install;
#  3. pytest on python/tests, with KILN_CLI (KILN, default BUILD_DIR/kiln), KILN_MODEL (the bundled
#     stories260K.gguf) and KILN_MINILM (BUILD_DIR/minilm/minilm-f32.gguf, from scripts/get-minilm.sh;
#     the embedding tests skip without it) set. Its exit status is this script's, except that pytest's 5
#     (no tests collected) is a failure too.
# Needs the Python package index the first time (and whenever the requirements change).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: test-python.sh BUILD_DIR [KILN]}
mkdir -p "$build"
build=$(cd "$build" && pwd)
kiln=${2:-$build/kiln}
venv=$build/venv-python
req=$src/python/tests/requirements.txt
pip_quiet=(-q --disable-pip-version-check)

if [ ! -x "$venv/bin/python" ] || ! cmp -s "$req" "$venv/.kiln-requirements"; then
  # Debian's own interpreter when there is one (the one python3-venv completes), else the first on PATH.
  py=/usr/bin/python3
  [ -x "$py" ] || py=$(command -v python3)
  if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    "$src/scripts/apt-install.sh" test-python.sh python3-venv
  fi
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install "${pip_quiet[@]}" -r "$req"
  cp "$req" "$venv/.kiln-requirements"
fi

stamp=$venv/.kiln-installed
inputs=("$src/python/kiln" "$src/python/pyproject.toml" "$src/python/library.cmake" "$src/src" "$src/include"
        "$src/CMakeLists.txt")
if [ ! -f "$stamp" ] || [ -n "$(find "${inputs[@]}" -newer "$stamp" -print -quit)" ]; then
  touch "$stamp.next" # taken before the build: a file changed during it is seen next time
  "$venv/bin/pip" install "${pip_quiet[@]}" --no-build-isolation --no-deps --force-reinstall \
    --config-settings=build-dir="$build/python-build" "$src/python"
  mv "$stamp.next" "$stamp"
fi

# From python/tests, so that `import kiln` finds the installed package, not the source folder.
cd "$src/python/tests"
export KILN_CLI=$kiln KILN_MODEL=$src/models/stories260K.gguf KILN_MINILM=$build/minilm/minilm-f32.gguf
export PYTHONDONTWRITEBYTECODE=1
rc=0
"$venv/bin/python" -m pytest -q -p no:cacheprovider . || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test-python.sh: pytest collected no tests" >&2
  rc=1
fi
exit "$rc"
