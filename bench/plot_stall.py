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
    alone = r["baseline"].get("mean_ms")
    if alone:  # older JSON has no means
        ax.axhline(2 * alone, color="C3", lw=0.8, ls="--",
                   label="2x the mean gap alone (a fair share with one job)")
    ax.set_yscale("log")
    ax.set_xlabel("seconds since the Decode call started")
    ax.set_ylabel("gap (ms)")
    share = r.get("prefill_share")
    share_text = ("" if share is None else
                  f", prefill share {'fair' if share == 0 else share}")
    mean_text = ("" if "mean_gap_over_alone" not in r else
                 f"; mean gap {r['mean_gap_over_alone']:.2f}x alone")
    ax.set_title(f"stall_bench: context {r['context']}, chunk "
                 f"{r['prefill_chunk']}{share_text}, {r['engine_threads']} "
                 f"threads, kernels {r['kernels']}\nlargest gap "
                 f"{r['max_gap_in_steps']:.0f} engine steps (target <= "
                 f"{r['target_max_gap_in_steps']:.0f}){mean_text}",
                 fontsize="small")
    ax.legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    out = a.out or os.path.splitext(a.json)[0] + ".png"
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
