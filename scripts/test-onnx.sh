#!/usr/bin/env bash
# test-onnx.sh BUILD_DIR [KILN]: the ONNX reader's tests (tests/onnx) against a CMake build directory.
#  1. BUILD_DIR/venv-onnx: a virtual environment with tests/onnx/requirements.txt (pinned onnx, numpy,
#     pytest; never torch), made again only when that file changes;
#  2. pytest on tests/onnx with KILN_LIB (unless set: BUILD_DIR/libkiln.so, read through ctypes), KILN_CLI (KILN,
#     default BUILD_DIR/kiln) and KILN_ONNX_CACHE (BUILD_DIR/onnx-cache: the backend node test models,
#     made once per onnx version) set; arguments after KILN go to pytest. pytest's status is this script's;
#     collecting no tests is a failure.
# Needs the Python package index the first time (and whenever the requirements change).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: test-onnx.sh BUILD_DIR [KILN]}
build=$(cd "$build" && pwd)
kiln=${2:-$build/kiln}
venv=$build/venv-onnx
req=$src/tests/onnx/requirements.txt

if [ ! -x "$venv/bin/python" ] || ! cmp -s "$req" "$venv/.kiln-requirements"; then
  py=/usr/bin/python3
  [ -x "$py" ] || py=$(command -v python3)
  if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    "$src/scripts/apt-install.sh" test-onnx.sh python3-venv
  fi
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  cp "$req" "$venv/.kiln-requirements"
fi

cd "$src/tests/onnx"
export KILN_LIB=${KILN_LIB:-$build/libkiln.so} KILN_CLI=$kiln KILN_ONNX_CACHE=$build/onnx-cache PYTHONDONTWRITEBYTECODE=1
rc=0
"$venv/bin/python" -m pytest -q -p no:cacheprovider "${@:3}" . || rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test-onnx.sh: pytest collected no tests" >&2
  rc=1
fi
exit "$rc"
