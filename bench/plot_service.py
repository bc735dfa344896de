#!/usr/bin/env python3
"""Plots a service_bench JSON: aggregate decode tok/s vs concurrent sessions
for gRPC and in-process (with the service overhead), and time to first token
and inter-token latency p50/p99 bars per session count and mode.

usage: plot_service.py RESULTS.json [--out PLOT.png]
The PNG goes next to the JSON (same name, .png) unless --out is given.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend choice)

MODES = [("grpc", "gRPC (loopback)", "C0"), ("inprocess", "in-process", "C1")]


def plot_throughput(ax, summary):
    n = [s["sessions"] for s in summary]
    for mode, label, color in MODES:
        ax.plot(n, [s[mode]["tok_per_s"] for s in summary], "o-",
                color=color, label=label)
    for s in summary:
        top = max(s["grpc"]["tok_per_s"], s["inprocess"]["tok_per_s"])
        ax.annotate(f"{100 * s['overhead']:+.1f}%", (s["sessions"], top),
                    textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize="small")
    ax.set_xscale("log", base=2)
    ax.set_xticks(n)
    ax.set_xticklabels([str(x) for x in n])
    top = max(max(s["grpc"]["tok_per_s"], s["inprocess"]["tok_per_s"])
              for s in summary)
    ax.set_ylim(0, 1.15 * top if top > 0 else 1)
    ax.set_xlabel("concurrent sessions")
    ax.set_ylabel("aggregate decode tok/s (median)")
    ax.set_title("throughput (labels: service overhead)")


def plot_latency(ax, summary, key, title):
    """Grouped bars: per session count, p50 and p99 of both modes."""
    width = 0.2
    x = list(range(len(summary)))
    bars = [(mode, label, color, p) for mode, label, color in MODES
            for p in ("p50", "p99")]
    for i, (mode, label, color, p) in enumerate(bars):
        offset = (i - (len(bars) - 1) / 2) * width
        ax.bar([v + offset for v in x], [s[mode][key][p] for s in summary],
               width, color=color, alpha=1.0 if p == "p50" else 0.5,
               label=f"{label} {p}")
    ax.set_xticks(x)
    ax.set_xticklabels([str(s["sessions"]) for s in summary])
    ax.set_xlabel("concurrent sessions")
    ax.set_ylabel("ms (median over rounds)")
    ax.set_title(title)


def title(data):
    m, c, s = data["model"], data["config"], data["system"]
    return (f"{m['n_layers']}L d{m['d_model']} h{m['n_heads']}/"
            f"{m['n_kv_heads']} ffn{m['ffn_dim']} vocab{m['vocab_size']} | "
            f"{c['policy']} B{c['budget']} | prompt {c['prompt_tokens']}, "
            f"question {c['question_tokens']}, decode {c['decode_tokens']} | "
            f"{c['rounds']} round(s) | kernels {s['kernel_set']}, "
            f"{s['engine_threads']} engine thr / {s['hardware_threads']} hw")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--out", help="PNG path (default: next to the JSON)")
    args = parser.parse_args()
    with open(args.json, encoding="utf-8") as f:
        data = json.load(f)
    out = args.out or os.path.splitext(args.json)[0] + ".png"
    summary = data["summary"]
    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    plot_throughput(axes[0], summary)
    plot_latency(axes[1], summary, "ttft_ms", "time to first token")
    plot_latency(axes[2], summary, "itl_ms", "inter-token latency")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        # The overhead labels sit above the throughput points.
        ax.legend(fontsize="small",
                  loc="lower right" if ax is axes[0] else "best")
    fig.suptitle(title(data))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
