#!/usr/bin/env python3
"""gpu_ab_table.py - the A/B table of scripts/gpu-check.sh --ab: several Kiln binaries on the same files,
run alternately in one call, each test's speeds side by side with the ratio of medians to the first binary.

Reads DIR/NAME.BINARY.ROUND.json (`kiln bench -o json`, one per binary, file and round); a missing or
unreadable one counts as no run. Standard library only (the GPU machine's python3 is whatever its image
holds).

usage: gpu_ab_table.py DIR NAME,... BINARY,...
"""
import json
import os
import statistics
import sys


def runs(d, name, binary, test):
    """The tokens/s of every round of one binary's test ("pp" or "tg") on one file."""
    out = []
    for f in sorted(os.listdir(d)):
        if not (f.startswith(f"{name}.{binary}.") and f.endswith(".json")):
            continue
        try:
            with open(os.path.join(d, f)) as fh:
                v = (json.load(fh).get(test) or {}).get("mean")
        except (OSError, ValueError, AttributeError):
            v = None
        if v:
            out.append(v)
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    d, names, binaries = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
    print("| file | test | " + " | ".join(f"{b} t/s (rounds)" for b in binaries) + " | " +
          " | ".join(f"{b} / {binaries[0]}" for b in binaries[1:]) + " |")
    print("|---" * (2 + 2 * len(binaries) - 1) + "|")
    for name in names:
        for test in ("pp", "tg"):
            cols, med = [], []
            for b in binaries:
                r = runs(d, name, b, test)
                med.append(statistics.median(r) if r else None)
                cols.append(f"{med[-1]:,.1f} ({', '.join(f'{x:.1f}' for x in r)})" if r else "-")
            ratios = [f"**{m / med[0]:.3f}**" if m and med[0] else "-" for m in med[1:]]
            print(f"| {name} | {test} | " + " | ".join(cols) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
