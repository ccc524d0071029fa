#!/usr/bin/env bash
# Cross-build Kiln for aarch64 Linux and run the whole test suite under qemu-user, for machines without an
# ARM CPU. Installs what is missing (Debian: gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user).
#   scripts/test-aarch64.sh          gcc cross compiler, build in build-aarch64
#   scripts/test-aarch64.sh clang    clang --target=aarch64-linux-gnu, build in build-aarch64-clang
# qemu's default CPU has the dot-product extension, so the suite covers the sdot tiles; the kernel tests
# then run again on an emulated Cortex-A72 (no asimddp) to cover hwcap detection and the widening-multiply
# tiles. Takes a few minutes on two cores; `make test` does not include it.
set -euo pipefail

cc=${1:-gcc}
case "$cc" in
gcc) build=build-aarch64; compiler=aarch64-linux-gnu-gcc ;;
clang) build=build-aarch64-clang; compiler=clang ;;
*) echo "usage: $0 [gcc|clang]" >&2; exit 2 ;;
esac
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
cd "$(dirname "$0")/.."
scripts/setup.sh

need=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
[ -f /usr/aarch64-linux-gnu/include/stdio.h ] || need+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null 2>&1 || command -v qemu-aarch64-static >/dev/null 2>&1 || need+=(qemu-user)
if [ ${#need[@]} -gt 0 ]; then scripts/apt-install.sh test-aarch64 "${need[@]}"; fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" -DCMAKE_C_COMPILER="$compiler" >/dev/null
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs"
echo "test-aarch64: kernel tests again on a CPU without the dot-product extension (QEMU_CPU=cortex-a72)"
QEMU_CPU=cortex-a72 ctest --output-on-failure -j "$jobs" -R '^test_kernels_'
