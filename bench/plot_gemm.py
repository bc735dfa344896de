#!/usr/bin/env python3
"""Plots a gemm_bench JSON: GFLOP/s per weight type and kernel table (bars,
one panel per shape and thread count), each table's speed-up over the
baseline table (the first of --tables) written on its bar.

usage: plot_gemm.py RESULTS.json [--out PLOT.png]
The PNG goes next to the JSON (same name, .png) unless --out is given.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend choice)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--out")
    args = ap.parse_args()
    with open(args.json) as f:
        doc = json.load(f)
    panels = {}
    for c in doc["cases"]:
        key = f'{c["n_out"]}x{c["n_in"]}, {c["tokens"]} tok, {c["threads"]} thr'
        panels.setdefault(key, []).append(c)
    tables = list(dict.fromkeys(c["table"] for c in doc["cases"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.5),
                             squeeze=False)
    width = 0.8 / len(tables)
    for ax, (key, cases) in zip(axes[0], panels.items()):
        types = list(dict.fromkeys(c["type"] for c in cases))
        for i, table in enumerate(tables):
            rows = {c["type"]: c for c in cases if c["table"] == table}
            xs = [t + i * width for t in range(len(types))]
            ys = [rows[t]["gflop_per_s"] if t in rows else 0 for t in types]
            bars = ax.bar(xs, ys, width, label=table)
            for bar, t in zip(bars, types):
                if t in rows and i > 0:
                    ax.annotate(f'x{rows[t]["speedup_vs_baseline"]:.2f}',
                                (bar.get_x() + bar.get_width() / 2,
                                 bar.get_height()),
                                ha="center", va="bottom", fontsize=8)
        ax.set_xticks([t + width * (len(tables) - 1) / 2
                       for t in range(len(types))])
        ax.set_xticklabels(types)
        ax.set_title(f"GEMM {key}")
        ax.set_ylabel("GFLOP/s (mean; label: x baseline)")
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(f'gemm_bench, baseline {doc["baseline_table"]}, '
                 f'{doc["reps"]} rounds; cpu: {doc["cpu_features"]}',
                 fontsize=9)
    fig.tight_layout()
    out = args.out or os.path.splitext(args.json)[0] + ".png"
    fig.savefig(out, dpi=100)
    print(out)


if __name__ == "__main__":
    main()
