# Cross-compiling Kiln for aarch64 Linux on another machine, with Debian's cross packages
# (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross) and the tests run under qemu-user. scripts/test-aarch64.sh
# uses it; by hand:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   cmake --build build-aarch64 -j 2 && (cd build-aarch64 && ctest)
# Clang instead of gcc: add -DCMAKE_C_COMPILER=clang (it targets aarch64-linux-gnu and takes the headers,
# libraries and linker of the gcc cross packages).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

if(NOT CMAKE_C_COMPILER)
  set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
endif()
if(CMAKE_C_COMPILER MATCHES "clang")
  set(CMAKE_C_COMPILER_TARGET aarch64-linux-gnu)
endif()

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest runs every test executable through the emulator; -L points it at the cross C library.
find_program(KILN_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(KILN_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${KILN_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
