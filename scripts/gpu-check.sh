#!/usr/bin/env bash
# gpu-check.sh - one command that checks Kiln's Vulkan backend on a GPU and measures it beside llama.cpp's
# Vulkan build (docs/vulkan.md, "Checking on a GPU").
#
#   scripts/gpu-check.sh local [options]    a machine with a GPU, glslc and the build dependencies: build,
#                                           then run every check (what `make gpu-check` does)
#   scripts/gpu-check.sh prepare [options]  here, for a machine that cannot build (the device tool's): build,
#                                           then collect into gpu-check-out/ (git-ignored) the binaries,
#                                           the shared libraries they need beyond glibc, Debian's libvulkan1
#                                           .deb and the llama.cpp anchor
#   scripts/gpu-check.sh run [options]      there, from the repository root with gpu-check-out/ carried:
#                                           every check, within --budget seconds
#
# The checks, in order: `kiln devices`; the goldens on the device (greedy text of `kiln run --device vulkan`
# against the CPU's, whole and with 2 of 5 layers offloaded, and test_arch's architectures on the device); test_backend_ops; test_vulkan; `kiln
# synth` of the four TinyLlama-shaped files (F16, Q8_0, Q4_0, Q4_K_M) and a Llama-2-7B-shaped Q4_0 on every
# core; `kiln bench --device vulkan` and `llama-bench -ngl 99` on each file in turn, pp512 and tg128, ending in
# one table (scripts/gpu_check_table.py) with decode as a share of --bandwidth; `kiln batched-bench --device
# vulkan` at 1 and 32 sequences. Every step has a time limit cut from what is left of the budget, and a
# step that fails or runs out of time is reported and the next one runs. Everything goes to stdout (and to
# $OUT/gpu-check.log when $OUT is set, as the device tool sets it).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PACK=$ROOT/gpu-check-out
BUILD=${GPU_CHECK_BUILD:-$ROOT/build}
ANCHOR=${GPU_CHECK_ANCHOR:-$ROOT/../shared/anchors/llama.cpp-0c1e570-vulkan-debian12.tar.xz}
MODELS=${GPU_CHECK_MODELS:-/tmp/gpu-check-models}
TESTS=(test_backend_ops test_vulkan test_arch)

usage() {
    cat <<EOF
usage: scripts/gpu-check.sh local|prepare|run [options]

  --bandwidth GBS  the GPU's memory bandwidth in GB/s, for the decode share (default 3350, an H100 SXM;
                   4800 for an H200)
  --budget S       seconds the checks may take in all (default 330)
  --reps R         kiln bench / llama-bench runs per test (default 2; the 7B shape runs once)
  --quick          stories-sized models, pp32 and tg8, one run each, step limits x3: proves the flow end
                   to end on lavapipe (llama.cpp told to use it too, GGML_VK_VISIBLE_DEVICES=0)
  --no-tests       skip test_backend_ops, test_vulkan and test_arch (bench only)
  --profile        kiln bench --profile: after each file's bench, where a run's time goes and each device
                   kernel's share (docs/vulkan.md, Profiling)
  --ab REV,...     prepare: also build kiln at each git revision, or HEAD with a patch file applied
                   (scripts/gpu-candidates/*.patch), a worktree in /tmp each, into the pack;
                   run: after the other steps, those binaries and the working tree's kiln take turns on
                   each file (pp512 and tg128, --reps rounds each, one after the other) and on batched-bench
                   (Q4_0, 32 sequences: S_PP and S_TG per round), ending in a table of medians and ratios to
                   the first revision. The one way to compare kernels on a GPU that
                   is lent for minutes: build every variant here, measure them all in one call
  --ab-only        run: after the tests (unless --no-tests) and the synth, the A/B alone (no llama.cpp
                   benches, no batched-bench): one call checks the candidates together and times each
  --no-7b          skip the Llama-2-7B-shaped file (its synth and benches take about half the budget)
Environment: GPU_CHECK_BUILD (build folder, default build/), GPU_CHECK_ANCHOR (the llama.cpp tarball,
default ../shared/anchors/llama.cpp-0c1e570-vulkan-debian12.tar.xz), GPU_CHECK_MODELS (where the files are
made, default /tmp/gpu-check-models).
EOF
}

BANDWIDTH=3350 BUDGET=330 REPS=2 QUICK=0 RUN_TESTS=1 SCALE=1 BIG_TOO=1 PROFILE=() AB_REVS='' AB_ONLY=0
MODE=${1:-}
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
    case $1 in
    --bandwidth) BANDWIDTH=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --quick) QUICK=1 REPS=1 SCALE=3; shift ;; # lavapipe: every step limit three times as long
    --no-tests) RUN_TESTS=0; shift ;;
    --no-7b) BIG_TOO=0; shift ;;
    --profile) PROFILE=(--profile); shift ;;
    --ab) AB_REVS=$2; shift 2 ;;
    --ab-only) AB_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done

log() { printf '\n=== %s (%ds of %ds)\n' "$*" $((SECONDS - T0)) "$BUDGET"; }

# ---------------------------------------------------------------------------------------------- build
build() {
    local conf
    conf=$(cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release) || { echo "$conf"; return 1; }
    if ! grep -q "Vulkan backend: on" <<<"$conf"; then
        echo "gpu-check: this build has no Vulkan backend (it needs vulkan/vulkan_core.h and glslc, which" \
             "scripts/setup.sh installs)" >&2
        return 1
    fi
    cmake --build "$BUILD" -j "$(nproc)" --target kiln_cli "${TESTS[@]}"
}

# Every shared library a binary loads beyond glibc's own (which the GPU machine has, newer).
copy_libs() {
    ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
        case $(basename "$lib") in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libresolv.so*) ;;
        *) cp -L "$lib" "$PACK/lib/" ;;
        esac
    done
}

# --ab: kiln at each revision, built in a worktree of its own, packed as bin/kiln-ab-N with its label in
# bin/ab (one "N LABEL" line each; the working tree's kiln is the last, labelled "tree"). A revision may
# also be a patch file (scripts/gpu-candidates/*.patch): applied to HEAD in the worktree, labelled by its
# name.
build_ab() {
    local n=0 rev wt sha label patch
    rm -f "$PACK/bin/ab" "$PACK"/bin/kiln-ab-*
    [ -z "$AB_REVS" ] && return 0
    mkdir -p "$PACK/bin"
    for rev in ${AB_REVS//,/ }; do
        patch='' label=$rev
        if [ -f "$rev" ]; then
            patch=$(realpath "$rev") label=$(basename "$rev" .patch) rev=HEAD
        fi
        sha=$(git -C "$ROOT" rev-parse --short "$rev") || { echo "gpu-check: no revision '$rev'" >&2; return 1; }
        wt=/tmp/gpu-check-ab-$sha-$n
        git -C "$ROOT" worktree add --detach "$wt" "$sha" >/dev/null || return 1
        if [ -n "$patch" ] && ! git -C "$wt" apply "$patch"; then
            echo "gpu-check: $patch does not apply to $sha" >&2
            git -C "$ROOT" worktree remove --force "$wt"
            return 1
        fi
        { cmake -S "$wt" -B "$wt/build" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
            cmake --build "$wt/build" -j "$(nproc)" --target kiln_cli >/dev/null; } ||
            { echo "gpu-check: building $label failed" >&2; return 1; }
        n=$((n + 1))
        cp "$wt/build/kiln" "$PACK/bin/kiln-ab-$n" && strip "$PACK/bin/kiln-ab-$n"
        git -C "$ROOT" worktree remove --force "$wt"
        echo "$n $label" >>"$PACK/bin/ab"
    done
    echo "tree $(git -C "$ROOT" rev-parse --short HEAD)+tree" >>"$PACK/bin/ab"
    echo "gpu-check: A/B binaries: $(tr '\n' ' ' <"$PACK/bin/ab")"
}

prepare() {
    build || return 1
    rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/gl" || return 1
    cp "$BUILD/kiln" "$PACK/bin/" && for t in "${TESTS[@]}"; do cp "$BUILD/tests/$t" "$PACK/bin/"; done
    strip "$PACK"/bin/* 2>/dev/null
    copy_libs "$PACK"/bin/*
    # The device README's way to get the Vulkan loader there: Debian's .deb, unpacked at run time.
    local o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    mkdir -p /tmp/amd64/partial
    # shellcheck disable=SC2086
    # The loader alone is not enough: NVIDIA's ICD (libGLX_nvidia) needs libglvnd's dispatch library, and a
    # machine without it answers vkCreateInstance with VK_ERROR_INCOMPATIBLE_DRIVER.
    # shellcheck disable=SC2086
    { apt-get $o update >/dev/null && (cd "$PACK/gl" && apt-get $o download libvulkan1 libglvnd0 libegl1 libgl1 \
        libglx0 libgles2 libopengl0 >/dev/null); } ||
        { echo "gpu-check: could not download the loaders" >&2; return 1; }
    [ -f "$ANCHOR" ] && cp "$ANCHOR" "$PACK/" || echo "gpu-check: no llama.cpp anchor at $ANCHOR (its columns stay empty)"
    build_ab || return 1
    # The tests find their data under the source and build folders compiled into them.
    printf '%s\n%s\n' "$ROOT" "$BUILD" >"$PACK/paths"
    git -C "$ROOT" rev-parse --short HEAD >"$PACK/commit" 2>/dev/null
    du -sh "$PACK"
    echo "gpu-check: ready. The device tool call (docs/vulkan.md, Checking on a GPU):"
    echo "  command: scripts/gpu-check.sh run --bandwidth 3350    carry: [\"gpu-check-out\"]    timeout_s: 420"
}

# ------------------------------------------------------------------------------------ run: the setup
setup_packed() {
    # The device README's recipe: every loader unpacked, every run (a bare machine may have the Vulkan
    # loader and lack libglvnd, or the reverse).
    for f in "$PACK"/gl/*.deb; do dpkg -x "$f" / || return 1; done
    ldconfig
    local nv=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    if [ -f $nv ] && ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
        export VK_DRIVER_FILES=$nv __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    fi
    KLIB=$PACK/lib BIN=$PACK/bin TBIN=$PACK/bin
    # The tests open tests/data and models/ at the source folder compiled into them, and write into the
    # build folder's tests/: make those paths lead here.
    local src build
    src=$(sed -n 1p "$PACK/paths") build=$(sed -n 2p "$PACK/paths")
    if [ "$src" != "$ROOT" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$ROOT" "$src"; fi
    mkdir -p "$build/tests"
    [ -e "$build/kiln" ] || ln -s "$PACK/bin/kiln" "$build/kiln" # the tests that start the CLI
    echo "commit $(cat "$PACK/commit" 2>/dev/null), built at $src"
}

setup_local() {
    KLIB='' BIN=$BUILD TBIN=$BUILD/tests
}

# Unpack llama.cpp's Vulkan build (lcpbin/) into /tmp; python's tarfile where there is no xz.
setup_anchor() {
    local tarball
    tarball=$(find "$PACK" -maxdepth 1 -name 'llama.cpp-*.tar.xz' 2>/dev/null | head -1)
    [ -z "$tarball" ] && [ -f "$ANCHOR" ] && tarball=$ANCHOR
    LCP=
    [ -z "$tarball" ] && { echo "no llama.cpp anchor: its columns stay empty"; return 0; }
    mkdir -p /tmp/gpu-check-lcp
    tar -xJf "$tarball" -C /tmp/gpu-check-lcp 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$tarball" /tmp/gpu-check-lcp
    LCP=$(dirname "$(find /tmp/gpu-check-lcp -name llama-bench -type f | head -1)")
    [ "$LCP" = . ] && LCP=
    echo "llama.cpp: ${LCP:-not found in $tarball}"
    return 0
}

# ------------------------------------------------------------------------------------ run: the steps
left() { echo $((BUDGET - (SECONDS - T0))); }

# step LIMIT NAME OUTFILE CMD...: run CMD (a command or one of the functions below) with its stdout in OUTFILE
# ("-": this stdout), for at most LIMIT seconds and what is left of the budget less 10.
step() {
    local limit=$1 name=$2 out=$3 t t0 rc
    shift 3
    t=$(left)
    limit=$((limit * SCALE))
    t=$((t - 10 < limit ? t - 10 : limit))
    if [ "$t" -lt 5 ]; then echo "SKIP $name: the budget is spent"; SKIPPED+=("$name"); return 1; fi
    t0=$SECONDS
    if [ "$out" = - ]; then timeout -k 5 "$t" bash -c '"$@"' step "$@"; else timeout -k 5 "$t" bash -c '"$@"' step "$@" >"$out"; fi
    rc=$?
    if [ $rc -eq 0 ]; then echo "ok $name ($((SECONDS - t0)) s)"; return 0; fi
    if [ $rc -eq 124 ]; then echo "TIMEOUT $name after $t s"; else echo "FAIL $name (exit $rc)"; fi
    FAILED+=("$name")
    return 1
}

kiln() { LD_LIBRARY_PATH=$KLIB "$BIN/kiln" "$@"; }
ktest() { LD_LIBRARY_PATH=$KLIB "$TBIN/$1"; }
llama_bench() { LD_LIBRARY_PATH=$LCP "$LCP/llama-bench" "$@"; }
# llama.cpp's Vulkan backend skips CPU devices (lavapipe) unless they are named.
[ "$QUICK" = 1 ] && export GGML_VK_VISIBLE_DEVICES=${GGML_VK_VISIBLE_DEVICES:-0}

# Greedy text on the device, whole and with the last 2 of 5 layers (partial offload), against the CPU's.
goldens() {
    local cpu gpu n m=$ROOT/models/stories260K.gguf
    cpu=$(kiln run -m "$m" -p "Once upon a time" -n 64 --temp 0 --device cpu 2>/dev/null) || return 1
    for n in all 2; do
        gpu=$(kiln run -m "$m" -p "Once upon a time" -n 64 --temp 0 --device vulkan --gpu-layers $n 2>/dev/null) ||
            return 1
        if [ "$cpu" != "$gpu" ]; then
            printf 'greedy text differs (--gpu-layers %s)\ncpu:    %s\nvulkan: %s\n' $n "$cpu" "$gpu"
            return 1
        fi
        echo "greedy text on vulkan, --gpu-layers $n = on the CPU (64 tokens)"
    done
}

synth_all() {
    mkdir -p "$MODELS"
    if [ "$QUICK" = 1 ]; then
        SHAPE="--shape stories260k --n-layer 8" BIG="--shape stories260k --n-embd 256 --n-ff 768 --n-layer 8"
    else
        SHAPE="--shape tinyllama-1.1b" BIG="--shape llama2-7b"
        # llama's 32000-token SPM vocabulary, as the real models have (the output matmul is a tenth of
        # TinyLlama's weights)
        SHAPE+=" --vocab $ROOT/tests/data/vocab/ggml-vocab-llama-spm.gguf"
        BIG+=" --vocab $ROOT/tests/data/vocab/ggml-vocab-llama-spm.gguf"
    fi
    NAMES=()
    for t in f16 q8_0 q4_0 q4_k_m; do
        # shellcheck disable=SC2086
        step 60 "synth tl-$t" - kiln synth $SHAPE --type $t -o "$MODELS/tl-$t.gguf" && NAMES+=("tl-$t")
    done
    [ "$BIG_TOO" = 1 ] || return 0
    # shellcheck disable=SC2086
    step 120 "synth 7b-q4_0" - kiln synth $BIG --type q4_0 -o "$MODELS/7b-q4_0.gguf" && NAMES+=("7b-q4_0")
}

bench_all() {
    local pp=512 tg=128 name reps
    [ "$QUICK" = 1 ] && pp=32 tg=8
    RES=$(mktemp -d)
    for name in "${NAMES[@]}"; do
        reps=$REPS
        [ "$name" = 7b-q4_0 ] && reps=1
        log "bench $name"
        step 90 "kiln bench $name" "$RES/$name.kiln.json" kiln bench -m "$MODELS/$name.gguf" --device vulkan \
            -p $pp -n $tg -r "$reps" --no-bandwidth -o json "${PROFILE[@]}"
        [ -n "$LCP" ] && step 60 "llama-bench $name" "$RES/$name.llama.json" llama_bench -m "$MODELS/$name.gguf" \
            -ngl 99 -p $pp -n $tg -r "$reps" -o json
    done
}

# The packed revisions and the tree's kiln in turns: round r runs every binary on a file before round r + 1.
ab_all() {
    local name r n label bin labels=() bins=()
    [ -f "$PACK/bin/ab" ] || { echo "no A/B binaries in the pack (prepare --ab REV,...)"; return 0; }
    while read -r n label; do
        if [ "$n" = tree ]; then bin=$BIN/kiln; else bin=$PACK/bin/kiln-ab-$n; fi
        labels+=("${label//[^A-Za-z0-9._+-]/_}") bins+=("$bin")
    done <"$PACK/bin/ab"
    local pp=512 tg=128
    [ "$QUICK" = 1 ] && pp=32 tg=8
    AB=$(mktemp -d)
    for name in "${NAMES[@]}"; do
        [ "$name" = 7b-q4_0 ] && continue
        log "A/B $name: ${labels[*]}"
        for ((r = 1; r <= REPS; r++)); do
            for i in "${!bins[@]}"; do
                step 40 "$name ${labels[$i]} round $r" "$AB/$name.${labels[$i]}.$r.json" \
                    env LD_LIBRARY_PATH="$KLIB" "${bins[$i]}" bench -m "$MODELS/$name.gguf" --device vulkan \
                    -p $pp -n $tg -r 2 --no-bandwidth -o json
            done
        done
    done
    # Many sequences at once (batched-bench's 32 decoding together): what kiln bench's one sequence does not
    # time, such as the attention of a batch whose mask is block-diagonal. Q4_0 only, the rounds in turns.
    local npp=128 ntg=64 npl=32
    [ "$QUICK" = 1 ] && npp=16 ntg=4 npl=8
    if [ -f "$MODELS/tl-q4_0.gguf" ]; then
        log "A/B batched-bench tl-q4_0, $npl sequences (S_TG t/s: all sequences' generated tokens a second)"
        for ((r = 1; r <= REPS; r++)); do
            for i in "${!bins[@]}"; do
                step 40 "batched ${labels[$i]} round $r" "$AB/batched.${labels[$i]}.$r.jsonl" \
                    env LD_LIBRARY_PATH="$KLIB" "${bins[$i]}" batched-bench -m "$MODELS/tl-q4_0.gguf" \
                    --device vulkan -npp $npp -ntg $ntg -npl $npl --json &&
                    python3 -c 'import json, sys; j = json.loads(open(sys.argv[1]).readline()); print("  %s round %s: S_PP %.1f, S_TG %.1f" % (sys.argv[2], sys.argv[3], j["speed_pp"], j["speed_tg"]))' \
                        "$AB/batched.${labels[$i]}.$r.jsonl" "${labels[$i]}" "$r"
            done
        done
    fi
    log "the A/B table (medians of the rounds; each round a warm-up and 2 runs)"
    local IFS=,
    python3 "$ROOT/scripts/gpu_ab_table.py" "$AB" "${NAMES[*]}" "${labels[*]}"
    rm -rf "$AB"
}

run_checks() {
    T0=$SECONDS FAILED=() SKIPPED=()
    export ROOT KLIB BIN TBIN LCP
    export -f kiln ktest llama_bench goldens
    log "kiln devices"
    kiln devices || FAILED+=("kiln devices")
    # Without a Vulkan device every number below would be the CPU's (llama.cpp's too): stop here, and say why.
    if ! kiln devices 2>/dev/null | grep -q '^vulkan:'; then
        echo "gpu-check: no Vulkan device; the loader says:"
        VK_LOADER_DEBUG=error,warn kiln devices 2>&1 | head -30
        return 1
    fi
    if [ "$RUN_TESTS" = 1 ]; then
        log "goldens on the device"
        step 60 "greedy goldens on vulkan" - goldens
        step 90 test_arch - ktest test_arch
        log test_backend_ops
        step 90 test_backend_ops - ktest test_backend_ops
        log test_vulkan
        step 90 test_vulkan - ktest test_vulkan
    fi
    log "kiln synth ($(nproc) CPUs)"
    synth_all
    if [ "$AB_ONLY" = 1 ]; then
        ab_all
        echo
        echo "failed: ${FAILED[*]:-none}; skipped for the budget: ${SKIPPED[*]:-none}; $((SECONDS - T0)) s in all"
        [ ${#FAILED[@]} -eq 0 ]
        return
    fi
    bench_all
    log "batched-bench"
    local npp=128 ntg=64
    [ "$QUICK" = 1 ] && npp=32 ntg=8
    [ -f "$MODELS/tl-q4_0.gguf" ] && step 90 "batched-bench tl-q4_0" - kiln batched-bench \
        -m "$MODELS/tl-q4_0.gguf" --device vulkan -npp $npp -ntg $ntg -npl 1,32
    log "the table (bandwidth $BANDWIDTH GB/s)"
    python3 "$ROOT/scripts/gpu_check_table.py" "$RES" "$BANDWIDTH" "${NAMES[@]}"
    rm -rf "$RES"
    [ -f "$PACK/bin/ab" ] && ab_all
    echo
    echo "failed: ${FAILED[*]:-none}; skipped for the budget: ${SKIPPED[*]:-none}; $((SECONDS - T0)) s in all"
    [ ${#FAILED[@]} -eq 0 ]
}

logged() {
    if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then "$@" 2>&1 | tee "$OUT/gpu-check.log"; else "$@" 2>&1; fi
}

case $MODE in
local) T0=$SECONDS; build && build_ab && setup_local && setup_anchor && logged run_checks ;;
prepare) T0=$SECONDS; prepare ;;
run)
    [ -d "$PACK/bin" ] || { echo "gpu-check: no $PACK/bin: run 'scripts/gpu-check.sh prepare' first and carry gpu-check-out" >&2; exit 2; }
    T0=$SECONDS; setup_packed && setup_anchor && logged run_checks ;;
*) usage >&2; exit 2 ;;
esac
