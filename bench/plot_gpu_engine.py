#!/usr/bin/env python3
"""Merges the JSONs of bench/gpu_engine_bench.sh (one cluster_bench engine
run per KV residency and GQA mode) into one table, OUT.json and OUT.png.

Per run and (context, batch): step ms (mean), tokens/s (from the mean),
attention and selection ms per step, H2D MB per step over the link, block
cache hit rate, device GB (weights + resident KV), the estimated HBM GB/s
of the attention (bytes its kernel reads: every query head reads its own
rows, so batch x sparse layers x query heads x attended rows x head_dim x
2 (K and V) x 2 bytes, over the attention time; attended rows = budget +
sinks + tail for clusterkv, the context for full: an estimate, labelled
so), and clusterkv's throughput over full's at the same context and batch.
The matplotlib figure is skipped (with a note) where matplotlib is absent.

usage: plot_gpu_engine.py --out PREFIX RUN.json [RUN.json ...]
"""
import argparse
import json
import os

SINKS, TAIL = 16, 320  # KvStoreConfig defaults: sink_tokens, window


def rows_of(path):
    with open(path) as f:
        d = json.load(f)
    m = d.get("engine_model", {})
    mode = "{}/{}".format(m.get("kv_residency", "?"), m.get("gqa_selection", "?"))
    sparse = m.get("n_layers", 0) - m.get("dense_layers", 0)
    for r in d.get("runs", []):
        if r.get("workload") != "engine" or r.get("experiment") != "decode":
            continue
        attended = r["context"] if r["policy"] == "full" else min(
            r["context"], r["budget"] + SINKS + TAIL)
        att_bytes = (r["batch"] * sparse * m.get("n_heads", 0) * attended *
                     m.get("head_dim", 0) * 2 * 2)
        att_ms = r.get("attention_ms") or 0.0
        yield {
            "mode": mode, "backend": m.get("backend"),
            "device": m.get("device"), "policy": r["policy"],
            "context": r["context"], "batch": r["batch"],
            "step_ms": r["step_ms"], "tokens_per_s": r.get("tokens_per_s"),
            "attention_ms": att_ms, "select_ms": r.get("select_ms"),
            "h2d_mb_per_step": r.get("link_h2d_bytes_per_step", 0) / 1e6,
            "hit_rate": r.get("cache_hit_rate"),
            "device_gb": r.get("device_resident_bytes", 0) / 1e9,
            "est_attention_gb_per_s":
                att_bytes / (att_ms * 1e6) if att_ms > 0 else None,
        }


def add_ratios(rows):
    full = {(r["mode"], r["context"], r["batch"]): r["tokens_per_s"]
            for r in rows if r["policy"] == "full"}
    for r in rows:
        base = full.get((r["mode"], r["context"], r["batch"]))
        r["vs_full"] = (r["tokens_per_s"] / base
                        if base and r["tokens_per_s"] else None)


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def table(rows):
    head = ("mode", "policy", "ctx", "B", "step ms", "tok/s", "attn ms",
            "sel ms", "H2D MB", "hit", "dev GB", "~HBM GB/s", "x full")
    lines = ["  ".join("%-11s" % h for h in head)]
    for r in rows:
        cells = (r["mode"], r["policy"], str(r["context"]), str(r["batch"]),
                 fmt(r["step_ms"], ".2f"), fmt(r["tokens_per_s"], ".1f"),
                 fmt(r["attention_ms"], ".2f"), fmt(r["select_ms"], ".2f"),
                 fmt(r["h2d_mb_per_step"], ".1f"), fmt(r["hit_rate"], ".2f"),
                 fmt(r["device_gb"], ".2f"),
                 fmt(r["est_attention_gb_per_s"], ".0f"),
                 fmt(r["vs_full"], ".2f"))
        lines.append("  ".join("%-11s" % c for c in cells))
    return "\n".join(lines)


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_gpu_engine: no matplotlib here; %s not written" % path)
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    keys = sorted({(r["mode"], r["policy"], r["batch"]) for r in rows})
    for mode, policy, batch in keys:
        pts = sorted((r["context"], r["tokens_per_s"]) for r in rows
                     if (r["mode"], r["policy"], r["batch"]) ==
                     (mode, policy, batch) and r["tokens_per_s"])
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    linestyle="--" if policy == "full" else "-",
                    label="%s %s x%d" % (policy, mode, batch))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("decode tokens/s (mean step)")
    ax.set_title("GPU engine: %s" % (rows[0]["device"] if rows else "?"))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print("plot_gpu_engine: wrote %s" % path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="output prefix")
    p.add_argument("runs", nargs="+")
    a = p.parse_args()
    rows = [r for path in a.runs for r in rows_of(path)]
    add_ratios(rows)
    print(table(rows))
    with open(a.out + ".json", "w") as f:
        json.dump({"runs": a.runs, "rows": rows,
                   "note": "est_attention_gb_per_s is an estimate (see "
                           "plot_gpu_engine.py)"}, f, indent=1)
    plot(rows, a.out + ".png")
    os.sys.exit(0 if rows else 1)


if __name__ == "__main__":
    main()
