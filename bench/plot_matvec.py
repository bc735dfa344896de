#!/usr/bin/env python3
"""Plots a matvec_bench JSON: weight GB/s per type (bars, one group per shape
and thread count) against the measured read bandwidth, with each type's
speed-up over F16 written on its bar.

usage: plot_matvec.py RESULTS.json [--out PLOT.png]
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
    groups = {}
    for c in doc["cases"]:
        key = f'{c["n_out"]}x{c["n_in"]}, {c["threads"]} thr'
        groups.setdefault(key, []).append(c)
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4.5),
                             squeeze=False)
    for ax, (key, cases) in zip(axes[0], groups.items()):
        names = [c["type"] for c in cases]
        gbs = [c["gb_per_s"] for c in cases]
        bars = ax.bar(names, gbs, color="tab:blue")
        for bar, c in zip(bars, cases):
            ax.annotate(f'x{c["speedup_vs_f16"]:.2f}',
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.axhline(doc["bandwidth_gb_per_s"], color="tab:red", ls="--",
                   label="read bandwidth (1 thread)")
        ax.set_title(f"GEMV {key}")
        ax.set_ylabel("weight GB/s (label: speed-up vs F16)")
        ax.tick_params(axis="x", rotation=45)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(f'matvec_bench, kernels {doc["kernel_set"]}')
    fig.tight_layout()
    out = args.out or os.path.splitext(args.json)[0] + ".png"
    fig.savefig(out, dpi=100)
    print(out)


if __name__ == "__main__":
    main()
