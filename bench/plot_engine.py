#!/usr/bin/env python3
"""Plots an engine_bench JSON: prefill and decode tok/s vs context depth (one
line per thread count), decode efficiency against the bandwidth floor, and the
decode step-time distribution (each step at the first depth, and the sorted
steps of every depth relative to their median).

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
                label=f"{run['threads']} thr (1 / mean step)")
        ax.plot(x, [d["tok_per_s_median"] for d in dec], ":", color=color,
                label=f"{run['threads']} thr (1 / median step)")
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


def plot_step_trace(ax, runs, colors):
    """Every timed decode step at the first depth, in order: stalls show."""
    for run, color in zip(runs, colors):
        d = run["depths"][0]["decode"]
        ax.plot(range(len(d["step_ms"])), d["step_ms"], ".-", color=color,
                linewidth=0.6, markersize=2,
                label=f"{run['threads']} thr: mean {d['mean_ms']:.2f} "
                      f"p99 {d['p99_ms']:.2f} max {d['max_ms']:.2f}")
    ax.set_title(f"decode step times at depth {runs[0]['depths'][0]['depth']}")
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.set_ylim(bottom=0)


def plot_step_distribution(ax, runs, colors):
    """Sorted step times / their median, per thread count and depth."""
    styles = ["-", "--", ":", "-."]
    for run, color in zip(runs, colors):
        for i, dep in enumerate(run["depths"]):
            d = dep["decode"]
            ms = sorted(d["step_ms"])
            if not ms or d["median_ms"] <= 0:
                continue
            q = [100.0 * (k + 1) / len(ms) for k in range(len(ms))]
            ax.plot(q, [m / d["median_ms"] for m in ms],
                    styles[i % len(styles)], color=color,
                    label=f"{run['threads']} thr @ {d['depth']}")
    ax.axhline(1.5, color="k", linestyle="--", linewidth=0.8)
    ax.set_title("decode step / median (sorted); 1.5 = p99 target")
    ax.set_xlabel("percentile of steps")
    ax.set_yscale("log")


def title(data):
    m, c, s = data["model"], data["config"], data["system"]
    load = c.get("background_load", {}).get("fraction", 0)
    load_text = (f" | background load {load:.2f} of a core" if load else
                 " | no background load")
    return (f"{m['n_layers']}L d{m['d_model']} h{m['n_heads']}/"
            f"{m['n_kv_heads']} ffn{m['ffn_dim']} vocab{m['vocab_size']} "
            f"{m['weight_type']} | kv {c['kv_type']} | kernels "
            f"{s['kernel_set']} | read bw "
            f"{s['bandwidth']['gb_per_s']:.1f} GB/s (1 thr)" + load_text)


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
    fig, grid = plt.subplots(2, 3, figsize=(17, 10))
    axes = grid[0]
    plot_prefill(axes[0], runs, colors)
    plot_decode(axes[1], runs, colors)
    plot_efficiency(axes[2], runs, colors)
    for ax in axes:
        ax.set_xlabel("context depth (tokens)")
    plot_step_trace(grid[1][0], runs, colors)
    plot_step_distribution(grid[1][1], runs, colors)
    grid[1][2].axis("off")
    for ax in list(grid[0]) + list(grid[1][:2]):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title(data))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
