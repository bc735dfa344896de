#!/usr/bin/env python3
"""A/B gate of two builds on this machine: engine_bench and cluster_bench of
build A (before a change) and build B (after) run interleaved in ABBA blocks
in one window, so that drift and load hit both alike; every figure is a
ratio B/A of runs next to each other, and the gate reports the median over
blocks (issue 26's seam gate: "before and after, same session, interleaved
runs: within noise").

  /usr/bin/python3 bench/ab_gate.py --before OLD/build --after build \
      --blocks 3 --types f16,q8_0,q4_k_m --out-dir docs/results/gate
  /usr/bin/python3 bench/ab_gate.py --before OLD/build --after build \
      --types "" --cluster --cluster-policies clusterkv \
      --prefill-cache /tmp/gate_prefills --out-dir docs/results/gate

(Debian's python3 has matplotlib from scripts/setup.sh, for gate.png.)

engine_bench: --threads T --depths 0,D --decode_tokens N per weight type;
figures: mean decode step ms at each depth and pp512 tok/s at depth 0.
cluster_bench (--cluster, slow: minutes a run): --workloads engine at one
context and budget, batches 1 and 16; figure: clusterkv's decode step ms.
Writes gate.json (every run's figures, the ratios, the medians, what ran)
and gate.png (ratios per figure and block). A ratio of step times above 1
is slower after; of tok/s, below 1.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def run_engine(build, dtype, a, work):
    out = os.path.join(work, f"engine_{os.getpid()}.json")
    cmd = [os.path.join(build, "bench", "engine_bench"), "--work_dir", work,
           "--threads", str(a.threads), "--depths", f"0,{a.depth}",
           "--decode_tokens", str(a.decode_tokens), "--dtype", dtype,
           "--out_json", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    run = json.load(open(out))["runs"][0]
    fig = {}
    for d in run["depths"]:
        fig[f"{dtype} decode ms d{d['depth']}"] = d["decode"]["mean_ms"]
    fig[f"{dtype} pp512 tok/s d0"] = run["pp"][0]["tok_per_s"]
    return fig


def run_cluster(build, a, work, side):
    out = os.path.join(work, f"cluster_{os.getpid()}.json")
    cmd = [os.path.join(build, "bench", "cluster_bench"), "--work_dir", work,
           "--workloads", "engine", "--engine_contexts", str(a.context),
           "--budgets", str(a.budget), "--batches", "1,16",
           "--decode_steps", str(a.decode_tokens),
           # the gate times steps; the quality shadow would slow them
           "--engine_quality=false", "--json", out]
    if a.cluster_policies:
        cmd += ["--engine_policies", a.cluster_policies]
    if a.prefill_cache:  # one folder per side: the builds' formats may differ
        cmd += ["--engine_prefill_cache",
                os.path.join(a.prefill_cache, side)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    fig = {}
    for r in json.load(open(out))["runs"]:
        if r.get("policy") == "clusterkv" and r.get("experiment") == "decode":
            fig[f"clusterkv step ms x{r['batch']}"] = r["step_ms"]
    return fig


def run_build(build, a, work, side):
    fig = {}
    for t in [t for t in a.types.split(",") if t]:
        fig.update(run_engine(build, t, a, work))
    if a.cluster:
        fig.update(run_cluster(build, a, work, side))
    return fig


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", required=True, help="build folder A")
    p.add_argument("--after", required=True, help="build folder B")
    p.add_argument("--blocks", type=int, default=3, help="ABBA blocks")
    p.add_argument("--types", default="f16,q8_0,q4_k_m")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--depth", type=int, default=8192)
    p.add_argument("--decode-tokens", type=int, default=24)
    p.add_argument("--cluster", action="store_true",
                   help="also cluster_bench's engine workload (minutes a run)")
    p.add_argument("--context", type=int, default=32768)
    p.add_argument("--budget", type=int, default=1024)
    p.add_argument("--cluster-policies", default="",
                   help="cluster_bench --engine_policies (default: its own)")
    p.add_argument("--prefill-cache", default="",
                   help="folder for cluster_bench's saved prefills (A/ and "
                        "B/ inside): each build prefills once")
    p.add_argument("--work-dir", default="/tmp/ckv_ab_gate")
    p.add_argument("--out-dir", required=True)
    a = p.parse_args()
    os.makedirs(a.work_dir, exist_ok=True)
    os.makedirs(a.out_dir, exist_ok=True)
    t0 = time.time()
    blocks = []
    for b in range(a.blocks):
        runs = {}
        for side in ("A", "B", "B", "A"):
            build = a.before if side == "A" else a.after
            runs.setdefault(side, []).append(
                run_build(build, a, a.work_dir, side))
            print(f"block {b + 1}/{a.blocks} {side} done", file=sys.stderr)
        ratios = {}
        for k in runs["A"][0]:
            before = statistics.mean(r[k] for r in runs["A"])
            after = statistics.mean(r[k] for r in runs["B"])
            ratios[k] = after / before
        blocks.append({"runs": runs, "ratios": ratios})
    medians = {k: statistics.median(bl["ratios"][k] for bl in blocks)
               for k in blocks[0]["ratios"]}
    result = {"benchmark": "ab_gate", "before": a.before, "after": a.after,
              "config": vars(a), "blocks": blocks, "median_ratio": medians,
              "wall_seconds": time.time() - t0, "load_avg": os.getloadavg()}
    with open(os.path.join(a.out_dir, "gate.json"), "w") as f:
        json.dump(result, f, indent=1)
    for k, v in medians.items():
        spread = [bl["ratios"][k] for bl in blocks]
        print(f"{k:32s} B/A median {v:.3f}  blocks "
              + " ".join(f"{x:.3f}" for x in spread))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no gate.png", file=sys.stderr)
        return
    keys = list(medians)
    fig, ax = plt.subplots(figsize=(10, 0.4 * len(keys) + 1.5))
    for i, k in enumerate(keys):
        ax.scatter([bl["ratios"][k] for bl in blocks], [i] * len(blocks),
                   color="gray", s=12)
        ax.scatter([medians[k]], [i], color="C0", marker="|", s=200)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(range(len(keys)), keys)
    ax.set_xlabel("after / before (dots: ABBA blocks; bar: median)")
    ax.set_title(f"{a.before} -> {a.after}"
                 f", {a.threads} threads")
    fig.tight_layout()
    fig.savefig(os.path.join(a.out_dir, "gate.png"), dpi=110)


if __name__ == "__main__":
    main()
