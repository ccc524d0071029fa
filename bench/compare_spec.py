"""compare.py --spec lookup|draft: Kiln's speculative decoding against llama.cpp's on the same files and
prompt, alternating runs.

For every repetition it runs `kiln bench --lookup` (or `--model-draft DRAFT`) with -r 1, which times plain
greedy decoding and speculative decoding of N tokens after the prompt in one process (and fails if their
tokens differ), and llama.cpp's `llama-lookup` (n-gram) or `llama-speculative` (draft model) with
--temp 0 on the same model(s), prompt file, N, threads and most guesses per step, in alternating order
(Kiln first on odd repetitions). It prints the medians: Kiln plain and speculative tokens/s, Kiln's
acceptance, llama.cpp's decode tokens/s and acceptance, and the ratios speculative/plain and
Kiln/llama.cpp. llama.cpp's speed is its own "decoded N tokens ... speed" line (generation only, as
Kiln's).
"""
import re
import statistics
import subprocess


def kiln_spec_once(a, model):
    cmd = [a.kiln, "bench", "-m", model, "-f", a.prompt_file, "-n", str(a.n), "-r", "1", "-t", str(a.t),
           "--draft-max", str(a.draft_max)]
    cmd += ["--lookup"] if a.spec == "lookup" else ["--model-draft", a.draft]
    if a.cpu:
        cmd += ["--cpu", a.cpu]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    plain = float(re.search(r"^\| plain \| ([\d.]+) \|", out, re.M).group(1))
    m = re.search(r"^\| speculative \| ([\d.]+) \| [\d.]+ \| ([\d.]+) \| ([\d.]+) ", out, re.M)
    return {"plain": plain, "spec": float(m.group(1)), "drafted": float(m.group(2)), "accepted": float(m.group(3))}


def llama_spec_once(a, model):
    if a.spec == "lookup":
        cmd = [a.llama_lookup, "-m", model]
    else:
        cmd = [a.llama_speculative, "-m", model, "-md", a.draft]
    cmd += ["-f", a.prompt_file, "-n", str(a.n), "--temp", "0", "-t", str(a.t), "--spec-draft-n-max",
            str(a.draft_max)]
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")  # a random model prints any bytes
    log = r.stdout + r.stderr
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {log[-2000:]}")
    speed = float(re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", log).group(1))
    drafted = int(re.search(r"n_drafted\s*=\s*(\d+)", log).group(1))
    accepted = int(re.search(r"n_accept\s*=\s*(\d+)", log).group(1))
    return {"speed": speed, "drafted": drafted, "accepted": accepted}


def speculative(a, cpu_model, load1):
    med = statistics.median
    tool = "llama-lookup" if a.spec == "lookup" else "llama-speculative"
    print(f"# speculative decoding ({a.spec}), Kiln against llama.cpp's {tool}")
    print(f"CPU: {cpu_model()}; threads {a.t}; prompt {a.prompt_file}; {a.n} tokens; at most {a.draft_max} "
          f"guesses a step; greedy; {a.r} repetitions, alternating; load average at start {load1():.2f}\n")
    print("| model | draft | Kiln plain t/s | Kiln speculative t/s | Kiln acceptance | llama.cpp t/s | "
          "llama.cpp acceptance | Kiln spec / plain | Kiln spec / llama.cpp |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in a.models:
        ks, ls = [], []
        for rep in range(a.r):
            if rep % 2 == 0:
                ks.append(kiln_spec_once(a, model))
                ls.append(llama_spec_once(a, model))
            else:
                ls.append(llama_spec_once(a, model))
                ks.append(kiln_spec_once(a, model))
        kp, kspec, lsp = med(k["plain"] for k in ks), med(k["spec"] for k in ks), med(x["speed"] for x in ls)
        kd, ka = sum(k["drafted"] for k in ks), sum(k["accepted"] for k in ks)
        ld, la = sum(x["drafted"] for x in ls), sum(x["accepted"] for x in ls)
        kacc = f"{ka:.0f}/{kd:.0f} ({100 * ka / kd:.1f}%)" if kd else "0/0"
        lacc = f"{la}/{ld} ({100 * la / ld:.1f}%)" if ld else "0/0"
        print(f"| {model} | {a.draft or 'prompt lookup'} | {kp:.2f} | {kspec:.2f} | {kacc} | {lsp:.2f} | {lacc} | "
              f"{kspec / kp:.2f}x | {kspec / lsp:.2f}x |")
