#!/usr/bin/env bash
# Install what the build and the tests need, on a fresh Debian machine: a C compiler, CMake, make, clang
# with its libFuzzer runtime (for the fuzz target), the server's libraries (libmicrohttpd, jansson), libzip
# (the .npz archives of `kiln onnx run`), and
# for the Vulkan backend its headers, the glslc shader compiler, Mesa's drivers (lavapipe, the CPU Vulkan
# device the tests run on) and vulkaninfo. Installs only what is missing; needs root
# (or sudo) only when something is missing.
set -euo pipefail

need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v make >/dev/null 2>&1 || need+=(make)
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
for lib in libmicrohttpd:libmicrohttpd-dev jansson:libjansson-dev libzip:libzip-dev; do
  pkg-config --exists "${lib%%:*}" 2>/dev/null || need+=("${lib#*:}")
done
[ -f /usr/include/vulkan/vulkan_core.h ] || need+=(libvulkan-dev)
command -v glslc >/dev/null 2>&1 || need+=(glslc)
command -v vulkaninfo >/dev/null 2>&1 || need+=(vulkan-tools)
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
if command -v clang >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$tmp/f.c"
  if ! clang -fsanitize=fuzzer "$tmp/f.c" -o "$tmp/f" >/dev/null 2>&1; then
    v=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n1)
    need+=("libclang-rt-${v:-14}-dev")
  fi
  rm -rf "$tmp"
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
exec "$(dirname "$0")/apt-install.sh" setup "${need[@]}"
