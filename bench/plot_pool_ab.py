#!/usr/bin/env python3
"""Plots a pool_ab_bench JSON: per thread count, each decode step's time
under the static and the dynamic pool schedule (interleaved ABBA in one
process), and the sorted steps relative to the median.

usage: plot_pool_ab.py RESULTS.json [--out PLOT.png]
The PNG goes next to the JSON (same name, .png) unless --out is given.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend choice)

SCHEDULES = ("static", "dynamic")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--out", help="PNG path (default: next to the JSON)")
    args = parser.parse_args()
    with open(args.json, encoding="utf-8") as f:
        data = json.load(f)
    out = args.out or os.path.splitext(args.json)[0] + ".png"
    runs = data["runs"]
    fig, axes = plt.subplots(len(runs), 2, figsize=(13, 4 * len(runs)),
                             squeeze=False)
    for row, run in zip(axes, runs):
        for name, color in zip(SCHEDULES, ("C3", "C0")):
            s = run[name]
            row[0].plot(s["step_ms"], ".-", color=color, linewidth=0.6,
                        markersize=2,
                        label=f"{name}: mean {s['mean_ms']:.2f} p99 "
                              f"{s['p99_ms']:.2f} max {s['max_ms']:.2f} ms; "
                              f"barrier {s['barrier_ms_per_step']:.2f} ms/step")
            ms = sorted(s["step_ms"])
            q = [100.0 * (k + 1) / len(ms) for k in range(len(ms))]
            row[1].plot(q, [m / s["median_ms"] for m in ms], color=color,
                        label=name)
        row[0].set_title(f"{run['threads']} thr: decode step times "
                         f"(dynamic/static tok/s "
                         f"{run['dynamic_over_static_tok_per_s']:.2f})")
        row[0].set_xlabel("step of the schedule")
        row[0].set_ylabel("ms")
        row[0].set_ylim(bottom=0)
        row[1].axhline(1.5, color="k", linestyle="--", linewidth=0.8)
        row[1].set_title("sorted steps / median (1.5 = p99 target)")
        row[1].set_xlabel("percentile of steps")
        for ax in row:
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize="small")
    load = data["background_load"]
    fig.suptitle(f"{os.path.basename(data['model'])}: {data['n_layers']}L "
                 f"d{data['d_model']}, {data['steps_per_schedule']} steps per "
                 f"schedule, background load {load['fraction']:.2f} of a core "
                 f"(got {load['measured_core_share']:.2f})")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
