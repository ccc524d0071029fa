#!/usr/bin/env python3
"""gpu_check_table.py - the one table of scripts/gpu-check.sh: Kiln's and llama.cpp's prompt and decode speed
on the same files, side by side, and each decode speed as a share of the GPU's memory bandwidth.

Reads the directory the run step wrote: for each model NAME, NAME.kiln.json (`kiln bench -o json`) and
NAME.llama.json (`llama-bench -o json`); a missing or unreadable file (a step that failed, timed out or was
skipped for the time budget) shows as "-". The share is tokens/s x bytes read per token (Kiln's
bytes_per_token: the weights a decode step reads) / bandwidth: 1.0 would be the memory's limit.
Standard library only (the GPU machine's python3 is whatever its image holds).

usage: gpu_check_table.py DIR BANDWIDTH_GBS NAME...
"""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def kiln_speeds(doc):
    """(pp t/s, tg t/s, bytes per token, n_prompt, n_gen) from kiln bench's JSON object."""
    if not isinstance(doc, dict):
        return None, None, None, None, None
    pp, tg = doc.get("pp") or {}, doc.get("tg") or {}
    return pp.get("mean"), tg.get("mean"), doc.get("bytes_per_token"), pp.get("n"), tg.get("n")


def llama_speeds(doc):
    """(pp t/s, tg t/s) from llama-bench's JSON array: the prompt-only and the generation-only rows."""
    pp = tg = None
    for row in doc if isinstance(doc, list) else []:
        if row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0:
            pp = row.get("avg_ts")
        elif row.get("n_gen", 0) > 0 and row.get("n_prompt", 0) == 0:
            tg = row.get("avg_ts")
    return pp, tg


def fmt(x, spec="{:,.0f}"):
    return "-" if x is None else spec.format(x)


def ratio(a, b):
    return None if a is None or not b else a / b


def share(tps, bytes_per_token, gbs):
    return None if tps is None or not bytes_per_token or not gbs else tps * bytes_per_token / (gbs * 1e9)


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    root, gbs, names = argv[1], float(argv[2]), argv[3:]
    rows, n_pp, n_gen = [], 512, 128
    for name in names:
        kpp, ktg, bpt, npp, ngen = kiln_speeds(load(os.path.join(root, name + ".kiln.json")))
        lpp, ltg = llama_speeds(load(os.path.join(root, name + ".llama.json")))
        n_pp, n_gen = npp or n_pp, ngen or n_gen
        rows.append((name, bpt, kpp, lpp, ktg, ltg))
    print(f"| file | GB read/token | Kiln pp{n_pp} t/s | llama.cpp pp{n_pp} | ratio | Kiln tg{n_gen} t/s | "
          f"llama.cpp tg{n_gen} | ratio | Kiln tg share of {gbs:,.0f} GB/s | llama.cpp tg share |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, bpt, kpp, lpp, ktg, ltg in rows:
        print(f"| {name} | {fmt(bpt and bpt / 1e9, '{:.3f}')} | {fmt(kpp)} | {fmt(lpp)} | "
              f"{fmt(ratio(kpp, lpp), '{:.3f}')} | {fmt(ktg)} | {fmt(ltg)} | {fmt(ratio(ktg, ltg), '{:.3f}')} | "
              f"{fmt(share(ktg, bpt, gbs), '{:.1%}')} | {fmt(share(ltg, bpt, gbs), '{:.1%}')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
