#!/usr/bin/env python3
"""Plots a stall_bench JSON: the decoding session's inter-token gaps over
time, with the spans of the concurrent SnapshotSession and Prefill shaded
and the median gap during that work; the title has the largest gap in
engine steps.

usage: plot_stall.py RESULTS.json [--out PLOT.png]
The PNG goes next to the JSON (same name, .png) unless --out is given.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend choice)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("json")
    p.add_argument("--out")
    a = p.parse_args()
    with open(a.json) as f:
        r = json.load(f)
    t = r["token_times_s"]
    gaps = [1e3 * (b - x) for x, b in zip(t, t[1:])]
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(t[1:], gaps, ".", ms=3, color="C0", label="inter-token gap")
    for key, color, label in (("snapshot", "C1", "SnapshotSession"),
                              ("prefill", "C2", "Prefill (text)")):
        span = r[key]
        ax.axvspan(span["start_s"], span["end_s"], color=color, alpha=0.15,
                   label=label)
    step = r["during_work"]["p50_ms"]
    ax.axhline(step, color="gray", lw=0.8, label="median gap during work")
    ax.set_xlabel("seconds since the Decode call started")
    ax.set_ylabel("gap (ms)")
    ax.set_title(f"stall_bench: context {r['context']}, chunk "
                 f"{r['prefill_chunk']}, {r['engine_threads']} threads, "
                 f"kernels {r['kernels']}: largest gap "
                 f"{r['max_gap_in_steps']:.0f} engine steps (target <= "
                 f"{r['target_max_gap_in_steps']:.0f})", fontsize="small")
    ax.legend(fontsize="small")
    fig.tight_layout()
    out = a.out or os.path.splitext(a.json)[0] + ".png"
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
