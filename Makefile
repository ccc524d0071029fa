# Thin wrapper over CMake. The two commands a newcomer needs:
#   make run    build everything and generate a story with the bundled model
#   make test   build everything and run the whole suite, plain, under ASan+UBSan, and bounded fuzz runs
# `make fuzz FUZZ_SECONDS=N [FUZZ_RUNS=R FUZZ_JOBS=J]` runs every fuzz target for N seconds (fuzz/README.md).
# Not part of `make test` (it takes minutes): `make test-aarch64` cross-builds for aarch64 and runs the
# suite under qemu-user (scripts/test-aarch64.sh; test-aarch64-clang does the same with clang).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local
CMAKE_FLAGS ?=

.PHONY: all setup build build-asan build-fuzz run test test-plain test-asan test-fuzz fuzz test-aarch64 test-aarch64-clang \
	install format clean gpu-check gpu-check-prepare

all: build

setup:
	@scripts/setup.sh

build: setup
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null
	@cmake --build build -j $(JOBS)

build-asan: setup
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-asan -j $(JOBS)

build-fuzz: setup
	@CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-fuzz -j $(JOBS)

run: build
	./build/kiln run -p "Once upon a time" -n 256

test-plain: build
	cd build && ctest --output-on-failure -j $(JOBS)

test-asan: build-asan
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

# Every fuzz target for KILN_FUZZ_TEST_SECONDS (18) seconds, one after another (fuzz/README.md).
test-fuzz: build-fuzz
	cd build-fuzz && ctest --output-on-failure --timeout 120

# A longer campaign: every fuzz target for FUZZ_SECONDS each (or until FUZZ_RUNS executions, when that comes
# first), FUZZ_JOBS targets at a time, its corpus kept in build-fuzz/fuzz/work/<target>.
FUZZ_SECONDS ?= 600
FUZZ_RUNS ?= 0
FUZZ_JOBS ?= 1
fuzz: build-fuzz
	cd build-fuzz && KILN_FUZZ_SECONDS=$(FUZZ_SECONDS) KILN_FUZZ_RUNS=$(FUZZ_RUNS) \
		ctest -j $(FUZZ_JOBS) --output-on-failure --timeout $$(( $(FUZZ_SECONDS) + 300 ))

test: test-plain test-asan test-fuzz

test-aarch64:
	@JOBS=$(JOBS) scripts/test-aarch64.sh gcc

test-aarch64-clang:
	@JOBS=$(JOBS) scripts/test-aarch64.sh clang

# On a machine with a GPU: build, then the Vulkan checks and the speed table beside llama.cpp's Vulkan build
# (scripts/gpu-check.sh; GPU_CHECK_ARGS="--bandwidth 4800" for an H200). gpu-check-prepare packs the build
# into gpu-check-out/ for the device tool instead (docs/vulkan.md, "Checking on a GPU").
GPU_CHECK_ARGS ?=
gpu-check: setup
	@scripts/gpu-check.sh local $(GPU_CHECK_ARGS)

gpu-check-prepare: setup
	@scripts/gpu-check.sh prepare

install: build
	cmake --install build --prefix $(PREFIX)

format:
	clang-format -i include/*.h src/*/*.[ch] src/*/*/*.[ch] cli/*.[ch] tests/*.[ch] fuzz/*.c

clean:
	rm -rf build build-asan build-fuzz build-aarch64 build-aarch64-clang
