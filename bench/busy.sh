#!/bin/sh
# busy.sh - generation speed with 1 and 2 threads on a quiet machine and on a busy one.
#
#   bench/busy.sh [BIN ...]              (default: build/kiln; REPS=5 runs per cell)
#   MODEL=x.gguf N=64 bench/busy.sh ...  (another model and token count)
#
# Runs `BIN run -m MODEL -n N --temp 0 -p "Once upon a time" -t T` (default: the bundled stories260K
# model, 200 tokens) for T = 1 and T = 2 under three conditions: quiet; two busy loops (`sh -c 'while :;
# do :; done'`, two of them); and a compile load (two loops each compiling the library's sources one by
# one with `cc -O2`). The load is started before a condition and killed after it. Runs alternate between
# the thread counts and between the binaries given, and each cell is the median of REPS runs of the
# generation t/s that `kiln run` prints on stderr. Give two binaries (a before and an after) to compare
# them in the same session. A binary named llama-bench is run as `llama-bench -m MODEL -p 0 -n N -t T
# -r 1` (its tg t/s; set LD_LIBRARY_PATH for its libraries), to put llama.cpp in the same table.
set -eu

cd "$(dirname "$0")/.."
REPS=${REPS:-5}
MODEL=${MODEL:-models/stories260K.gguf}
N=${N:-200}
[ $# -gt 0 ] || set -- build/kiln
for bin in "$@"; do
    [ -x "$bin" ] || { echo "busy.sh: $bin is not an executable (run make build)" >&2; exit 1; }
done

tmp=$(mktemp -d)
loads=""
stop_load() {
    for pid in $loads; do kill -- "-$pid" 2>/dev/null || true; done
    for pid in $loads; do wait "$pid" 2>/dev/null || true; done
    loads=""
}
trap 'stop_load; rm -rf "$tmp"' EXIT INT TERM

# Each load runs in its own session, so killing its process group also stops a compiler it started.
start_load() {
    case $1 in
    quiet) ;;
    busy)
        for i in 1 2; do
            setsid sh -c 'while :; do :; done' &
            loads="$loads $!"
        done ;;
    compile)
        for i in 1 2; do
            setsid sh -c 'while :; do for f in src/*/*.c; do
                cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -c "$f" -o "$1/load$2.o"; done; done' \
                sh "$tmp" "$i" &
            loads="$loads $!"
        done ;;
    esac
    sleep 1 # let the load settle
}

# One run's generation speed in tokens per second.
speed() {
    case $1 in
    *llama-bench)
        "$1" -m "$MODEL" -p 0 -n "$N" -t "$2" -r 1 -o csv 2>/dev/null |
            tail -n 1 | awk -F, '{ gsub(/"/, ""); printf "%.1f\n", $(NF - 1) }' ;;
    *)
        "$1" run -m "$MODEL" -n "$N" --temp 0 -p "Once upon a time" -t "$2" 2>&1 >/dev/null |
            sed -n 's/.*generation [0-9]* tokens, \([0-9.]*\) t\/s.*/\1/p' ;;
    esac
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : "n/a") }'; }

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -n1), $(nproc) CPUs online; $MODEL, $N tokens;" \
    "median of $REPS runs"
printf '%-9s' condition
for bin in "$@"; do printf ' | %-26s' "$bin"; done
echo
for cond in quiet busy compile; do
    start_load "$cond"
    # Each round starts with the next binary and swaps the thread counts' order, so that no cell always
    # runs right after the same other one.
    for r in $(seq "$REPS"); do
        i=0
        for bin in "$@" "$@"; do
            i=$((i + 1))
            [ "$i" -gt "$(( (r - 1) % $# ))" ] && [ "$i" -le "$(( (r - 1) % $# + $# ))" ] || continue
            if [ $((r % 2)) -eq 1 ]; then order="1 2"; else order="2 1"; fi
            for t in $order; do
                n=$(echo "$bin" | cksum | cut -d' ' -f1)
                speed "$bin" "$t" >>"$tmp/$cond.$n.$t"
            done
        done
    done
    stop_load
    printf '%-9s' "$cond"
    for bin in "$@"; do
        n=$(echo "$bin" | cksum | cut -d' ' -f1)
        printf ' | -t 1 %7s  -t 2 %7s' "$(median <"$tmp/$cond.$n.1")" "$(median <"$tmp/$cond.$n.2")"
    done
    echo
done
