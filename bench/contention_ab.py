#!/usr/bin/env python3
"""A/B of engine_bench binaries under a controlled background load.

Runs each variant (a name, an engine_bench binary and extra flags) for each
load fraction and thread count, interleaved round by round, so that a noisy
machine's drift hits every variant alike; decode steps of all rounds are
pooled per (variant, load, threads). Writes one JSON with every step, a text
table (mean, median, p90, p99, max, tok/s = 1 / mean) with each variant's
mean relative to the first, and a PNG of the step-time distributions.

usage: contention_ab.py --model M.gguf --variant NAME=BIN[:FLAGS] ...
         [--loads 0,0.5] [--threads 1,2] [--steps 128] [--rounds 2]
         [--out bench/results/contention]
       contention_ab.py --plot RESULTS.json   (re-plot; needs matplotlib)
A background load uses engine_bench's own --background-load (a process
busy that fraction of one core, 10 ms duty cycle), so a variant's binary
must have the flag; a binary without it (an old build) gets the load from
this script instead, with the same duty cycle.
"""
import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time


def busy_loop(fraction, period_s):
    """The load process of binaries without --background-load."""
    start = time.monotonic()
    while True:
        while time.monotonic() - start < fraction * period_s:
            pass
        start += period_s
        delay = start - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            start = time.monotonic()


def has_flag(binary, flag):
    out = subprocess.run([binary, "--helpfull"], capture_output=True,
                         text=True).stdout
    return flag in out


def run_once(variant, args, load, threads):
    name, binary, extra = variant
    own_load = has_flag(binary, "background_load")
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [binary, "--model", args.model, "--depths", "0", "--threads",
           str(threads), "--decode-tokens", str(args.steps), "--pp-tokens",
           "8", "--prefill-chunk", "16", "--out-json", out] + extra
    helper = None
    if load > 0 and own_load:
        cmd += ["--background-load", str(load)]
    elif load > 0:
        helper = multiprocessing.Process(target=busy_loop,
                                         args=(load, 0.010), daemon=True)
        helper.start()
    try:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    finally:
        if helper is not None:
            helper.kill()
            helper.join()
    with open(out, encoding="utf-8") as f:
        data = json.load(f)
    os.unlink(out)
    dec = data["runs"][0]["depths"][0]["decode"]
    return dec


def stats(ms):
    s = sorted(ms)
    n = len(s)

    def pct(p):
        import math
        return s[min(n - 1, max(1, math.ceil(p / 100 * n)) - 1)]

    mean = sum(s) / n
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"steps": n, "mean_ms": mean, "median_ms": med, "p90_ms": pct(90),
            "p99_ms": pct(99), "max_ms": s[-1], "tok_per_s": 1e3 / mean}


def parse_variant(text):
    name, rest = text.split("=", 1)
    binary, _, flags = rest.partition(":")
    return name, binary, flags.split() if flags else []


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model")
    p.add_argument("--variant", action="append", type=parse_variant)
    p.add_argument("--loads", default="0,0.5")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--steps", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default="bench/results/contention")
    p.add_argument("--plot", metavar="JSON",
                   help="only plot an earlier run's JSON (next to it)")
    args = p.parse_args()
    if args.plot:
        with open(args.plot, encoding="utf-8") as f:
            plot(json.load(f), os.path.splitext(args.plot)[0] + ".png")
        return
    loads = [float(x) for x in args.loads.split(",")]
    threads = [int(x) for x in args.threads.split(",")]
    steps = {}
    extra = {}
    for rnd in range(args.rounds):
        for load in loads:
            for thr in threads:
                order = args.variant if rnd % 2 == 0 else args.variant[::-1]
                for v in order:
                    dec = run_once(v, args, load, thr)
                    key = (v[0], load, thr)
                    steps.setdefault(key, []).extend(dec["step_ms"])
                    ex = extra.setdefault(key, {"run_delay_ms_per_step": [],
                                                "barrier_ms_per_step": []})
                    ex["run_delay_ms_per_step"].append(
                        dec.get("run_delay_ms_per_step"))
                    ex["barrier_ms_per_step"].append(
                        dec.get("pool", {}).get("caller_wait_ms_per_step"))
                    print(f"round {rnd} load {load} thr {thr} {v[0]}: mean "
                          f"{sum(dec['step_ms']) / len(dec['step_ms']):.2f} ms",
                          file=sys.stderr, flush=True)
    rows = []
    base = args.variant[0][0]
    for load in loads:
        for thr in threads:
            b = stats(steps[(base, load, thr)])
            for v in args.variant:
                s = stats(steps[(v[0], load, thr)])
                s.update(variant=v[0], load=load, threads=thr,
                         mean_vs_first=b["mean_ms"] / s["mean_ms"],
                         p99_over_median=s["p99_ms"] / s["median_ms"],
                         max_over_median=s["max_ms"] / s["median_ms"],
                         **extra[(v[0], load, thr)])
                rows.append(s)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    result = {"benchmark": "contention_ab", "model": args.model,
              "steps_per_run": args.steps, "rounds": args.rounds,
              "variants": [{"name": n, "binary": b, "flags": f}
                           for n, b, f in args.variant],
              "rows": rows,
              "step_ms": [{"variant": k[0], "load": k[1], "threads": k[2],
                           "step_ms": v} for k, v in steps.items()]}
    with open(args.out + ".json", "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    hdr = (f"{'load':>4} {'thr':>3} {'variant':<10} {'mean':>8} {'median':>8}"
           f" {'p90':>8} {'p99':>8} {'max':>8} {'tok/s':>7} {'x first':>7}"
           f" {'p99/med':>7} {'max/med':>7}")
    lines = [hdr]
    for r in rows:
        lines.append(
            f"{r['load']:4.2f} {r['threads']:3d} {r['variant']:<10} "
            f"{r['mean_ms']:8.2f} {r['median_ms']:8.2f} {r['p90_ms']:8.2f} "
            f"{r['p99_ms']:8.2f} {r['max_ms']:8.2f} {r['tok_per_s']:7.2f} "
            f"{r['mean_vs_first']:7.3f} {r['p99_over_median']:7.2f} "
            f"{r['max_over_median']:7.2f}")
    text = "\n".join(lines) + "\n"
    with open(args.out + ".txt", "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    plot(result, args.out + ".png")


def plot(result, path):
    """Sorted step times per (load, threads) cell, one line per variant."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no PNG", file=sys.stderr)
        return
    cells = result["step_ms"]
    loads = sorted({c["load"] for c in cells})
    threads = sorted({c["threads"] for c in cells})
    fig, axes = plt.subplots(len(loads), len(threads), squeeze=False,
                             figsize=(6 * len(threads), 4 * len(loads)))
    for i, load in enumerate(loads):
        for j, thr in enumerate(threads):
            ax = axes[i][j]
            for c in cells:
                if c["load"] != load or c["threads"] != thr:
                    continue
                s = sorted(c["step_ms"])
                q = [100 * (k + 1) / len(s) for k in range(len(s))]
                st = stats(s)
                ax.plot(q, s, label=f"{c['variant']}: mean {st['mean_ms']:.1f}"
                                    f" p99 {st['p99_ms']:.1f} max "
                                    f"{st['max_ms']:.1f}")
            ax.set_title(f"{thr} thr, background load {load:.2f} of a core")
            ax.set_xlabel("percentile of decode steps")
            ax.set_ylabel("step ms")
            ax.set_yscale("log")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small")
    fig.suptitle(f"decode step times, {os.path.basename(result['model'])}, "
                 f"{result['rounds']} x {result['steps_per_run']} steps per "
                 f"cell, interleaved runs")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
