#!/usr/bin/env python3
"""Plots an engine_bench JSON: prefill and decode tok/s vs context depth (one
line per thread count) and decode efficiency against the bandwidth floor.

usage: plot_engine.py RESULTS.json [--out PLOT.png]
The PNG goes next to the JSON (same name, .png) unless --out is given.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend choice)


def prefill_points(run):
    """(segment end depth, tok/s) of every non-empty depth segment."""
    pts = []
    for d in run["depths"]:
        p = d["prefill"]
        if p["tokens"] > 0:
            pts.append((p["from"] + p["tokens"], p["tok_per_s"]))
    return pts


def plot_prefill(ax, runs, colors):
    for run, color in zip(runs, colors):
        thr = run["threads"]
        pts = prefill_points(run)
        if pts:
            ax.plot(*zip(*pts), "o-", color=color,
                    label=f"{thr} thr, segment ending at depth")
        pp = [(p["from"], p["tok_per_s"]) for p in run["pp"]]
        if pp:
            n = run["pp"][0]["tokens"]
            ax.plot(*zip(*pp), "s--", color=color, alpha=0.6,
                    label=f"{thr} thr, pp{n} at depth")
    ax.set_title("prefill")
    ax.set_ylabel("tok/s")


def plot_decode(ax, runs, colors):
    for run, color in zip(runs, colors):
        dec = [d["decode"] for d in run["depths"]]
        x = [d["depth"] for d in dec]
        ax.plot(x, [d["tok_per_s"] for d in dec], "o-", color=color,
                label=f"{run['threads']} thr (median)")
        ax.plot(x, [d["tok_per_s_mean"] for d in dec], ":", color=color,
                label=f"{run['threads']} thr (mean)")
    dec = [d["decode"] for d in runs[0]["depths"]]
    ax.plot([d["depth"] for d in dec],
            [1e3 / d["floor_ms"] if d["floor_ms"] > 0 else 0 for d in dec],
            "k--", label="bandwidth floor (1 thr)")
    ax.set_title("decode")
    ax.set_ylabel("tok/s")


def plot_efficiency(ax, runs, colors):
    for run, color in zip(runs, colors):
        dec = [d["decode"] for d in run["depths"]]
        ax.plot([d["depth"] for d in dec], [d["efficiency"] for d in dec],
                "o-", color=color, label=f"{run['threads']} thr")
    ax.axhline(1.0, color="k", linestyle="--", linewidth=0.8)
    ax.set_title("decode efficiency (floor / measured)")
    ax.set_ylim(bottom=0)


def title(data):
    m, c, s = data["model"], data["config"], data["system"]
    return (f"{m['n_layers']}L d{m['d_model']} h{m['n_heads']}/"
            f"{m['n_kv_heads']} ffn{m['ffn_dim']} vocab{m['vocab_size']} "
            f"{m['weight_type']} | kv {c['kv_type']} | kernels "
            f"{s['kernel_set']} | read bw "
            f"{s['bandwidth']['gb_per_s']:.1f} GB/s (1 thr)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--out", help="PNG path (default: next to the JSON)")
    args = parser.parse_args()
    with open(args.json, encoding="utf-8") as f:
        data = json.load(f)
    out = args.out or os.path.splitext(args.json)[0] + ".png"
    runs = data["runs"]
    colors = [f"C{i}" for i in range(len(runs))]
    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    plot_prefill(axes[0], runs, colors)
    plot_decode(axes[1], runs, colors)
    plot_efficiency(axes[2], runs, colors)
    for ax in axes:
        ax.set_xlabel("context depth (tokens)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title(data))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
