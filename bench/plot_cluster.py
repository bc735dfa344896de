#!/usr/bin/env python3
"""Plots a cluster_bench JSON into three PNGs next to it:
recall_vs_budget.png (keys: recall per policy, metric and tokens-per-cluster
ablations), step_time_vs_context.png (engine decode step per policy and
batch; keys: one attention layer per policy) and overhead.png (a decode step
split into select, cache, attention and the rest; prefill vs clustering),
and, when the JSON has the `text` workload, text_quality.png (a real model on
real text: top-k and mass recall, top-1 agreement and perplexity delta vs
budget per policy).

usage: plot_cluster.py RESULTS.json [--out-dir DIR]
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend choice)

TARGET_BUDGET = 1024
POLICY_COLORS = {"full": "k", "clusterkv": "C0", "clusterkv_kvhead": "C4",
                 "clusterkv_copy": "C6", "quest": "C1", "streaming": "C2",
                 "oracle": "C3", "hybrid": "C5"}


def select(runs, **want):
    """Runs whose fields (or extra fields) equal every given value."""
    return [r for r in runs if all(r.get(k) == v for k, v in want.items())]


def by_budget(runs, field):
    pts = sorted((r["budget"], r[field]) for r in runs
                 if r["budget"] is not None and r[field] is not None)
    return [p[0] for p in pts], [p[1] for p in pts]


def recall_plots(axes, runs):
    keys = select(runs, workload="keys", experiment="recall")
    if not keys:
        for ax in axes:
            ax.set_visible(False)
        return
    ctx = max(r["context"] for r in keys)
    base = [r for r in keys if r["metric"] == "cosine"
            and r["tokens_per_cluster"] == 80]
    for field, ax in (("topk_recall", axes[0]), ("mass_recall", axes[1])):
        for pol in sorted({r["policy"] for r in base}):
            for c in sorted({r["context"] for r in base}):
                x, y = by_budget(select(base, policy=pol, context=c), field)
                ax.plot(x, y, "o-" if c == ctx else ":",
                        color=POLICY_COLORS.get(pol),
                        alpha=1.0 if c == ctx else 0.4,
                        label=f"{pol}" if c == ctx else None)
        ax.set_title(f"keys: {field} (solid: {ctx} tokens, dotted: shorter)")
    abl = select(keys, policy="clusterkv", context=ctx)
    for metric in ("cosine", "l2", "ip"):
        x, y = by_budget([r for r in abl if r["metric"] == metric
                          and r["tokens_per_cluster"] == 80], "topk_recall")
        axes[2].plot(x, y, "o-", label=metric)
    axes[2].set_title(f"clustering metric ablation ({ctx} tokens)")
    for tpc in sorted({r["tokens_per_cluster"] for r in abl}):
        x, y = by_budget([r for r in abl if r["metric"] == "cosine"
                          and r["tokens_per_cluster"] == tpc], "topk_recall")
        axes[3].plot(x, y, "o-", label=f"{tpc} tokens/cluster")
    axes[3].set_title(f"tokens per cluster ablation ({ctx} tokens)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget B (tokens)")
        ax.set_ylabel("recall")


def engine_step_plots(axes, runs):
    eng = select(runs, workload="engine")
    batches = sorted({r["batch"] for r in eng})
    for ax, batch in zip(axes, batches):
        for pol in ("full", "clusterkv", "quest", "streaming"):
            rs = [r for r in select(eng, policy=pol, batch=batch)
                  if pol == "full" or r["budget"] == TARGET_BUDGET]
            pts = sorted((r["context"], r["step_ms"],
                          r.get("step_ms_p99", r["step_ms"])) for r in rs)
            if pts:
                x, mean, p99 = zip(*pts)
                ax.plot(x, mean, "o-", color=POLICY_COLORS[pol],
                        label=pol if pol == "full"
                        else f"{pol} B={TARGET_BUDGET}")
                # The distribution beside the mean: p99 of the steps.
                ax.plot(x, p99, "v:", color=POLICY_COLORS[pol], alpha=0.6)
        ax.set_title(f"engine decode step (mean; dotted: p99), {batch} "
                     "session(s)")
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("ms per step")
        ax.set_xscale("log", base=2)
    for ax in axes[len(batches):]:
        ax.set_visible(False)


def layer_timing_plot(ax, runs):
    lt = select(runs, workload="keys", experiment="layer_timing")
    if not lt:
        ax.set_visible(False)
        return
    ctx = max(r["context"] for r in lt)
    for r in select(lt, policy="full", context=ctx):
        ax.axhline(r["step_ms"], color="k", linestyle="--",
                   label="full (dense attention)")
    for pol in ("clusterkv", "clusterkv_copy", "clusterkv_kvhead", "quest",
                "streaming"):
        x, y = by_budget(select(lt, policy=pol, context=ctx), "step_ms")
        ax.plot(x, y, "o-", color=POLICY_COLORS[pol], label=pol)
    ax.set_title(f"keys: one attention layer, {ctx} tokens "
                 "(select + cache + attention)")
    ax.set_xlabel("budget B (tokens)")
    ax.set_ylabel("ms per step")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")


def overhead_plots(axes, runs):
    eng = select(runs, workload="engine")
    if not eng:
        return
    ctx = max(r["context"] for r in eng)
    rs = [r for r in select(eng, context=ctx)
          if r["policy"] == "full" or r["budget"] == TARGET_BUDGET]
    rs.sort(key=lambda r: (r["batch"], r["policy"]))
    labels = [f"{r['policy']}\nx{r['batch']}" for r in rs]
    plan = [r["plan_ms"] for r in rs]
    cache = [r["cache_ms"] for r in rs]
    sel_other = [max(0.0, r["select_ms"] - p - c)
                 for r, p, c in zip(rs, plan, cache)]
    attn = [max(0.0, r["attention_ms"] - r["select_ms"]) for r in rs]
    rest = [max(0.0, r["step_ms"] - r["attention_ms"]) for r in rs]
    bottom = [0.0] * len(rs)
    for name, vals in (("select: plan", plan), ("select: cache", cache),
                       ("select: other", sel_other),
                       ("attention (append + kernel)", attn),
                       ("rest (matmuls, norms, logits)", rest)):
        axes[0].bar(labels, vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    axes[0].set_title(f"engine decode step at {ctx} tokens (B={TARGET_BUDGET})")
    axes[0].set_ylabel("ms per step")
    axes[0].tick_params(axis="x", labelsize="x-small")
    pre = {}
    for r in eng:
        pre[r["context"]] = (r["prefill_ms"], r["cluster_ms"])
    ctxs = sorted(pre)
    axes[1].bar([str(c) for c in ctxs], [pre[c][0] / 1e3 for c in ctxs],
                label="prefill (dense)")
    axes[1].bar([str(c) for c in ctxs], [pre[c][1] / 1e3 for c in ctxs],
                label="k-means (on the worker, overlapped)")
    for i, c in enumerate(ctxs):
        axes[1].annotate(f"{100 * pre[c][1] / pre[c][0]:.1f}%",
                         (i, pre[c][0] / 1e3), ha="center", va="bottom")
    axes[1].set_title("prefill vs clustering")
    axes[1].set_xlabel("context (tokens)")
    axes[1].set_ylabel("seconds")


def text_plots(axes, runs):
    """Quality table of the text workload: one line per policy."""
    rows = select(runs, workload="text", experiment="quality")
    fields = [("topk_recall", "top-k recall"), ("mass_recall", "mass recall"),
              ("top1_agreement", "top-1 agreement with dense"),
              ("perplexity_delta", "perplexity - dense perplexity")]
    for ax, (field, label) in zip(axes, fields):
        for policy, color in POLICY_COLORS.items():
            x, y = by_budget(select(rows, policy=policy), field)
            if x:
                ax.plot(x, y, "o-", color=color, label=policy)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget B (tokens per head)")
        ax.set_title(label, fontsize="small")


def subtitle(data):
    m, mach = data.get("engine_model") or {}, data["machine"]
    shape = (f"engine {m['n_layers']}L (dense {m['dense_layers']}) "
             f"d{m['d_model']} h{m['n_heads']}/{m['n_kv_heads']}x"
             f"{m['head_dim']} ffn{m['ffn_dim']} | " if m else "")
    return (f"{shape}kernels {mach['kernel_set']}, {mach['threads']} "
            f"threads | {mach['cpu_features']}")


def finish(fig, data, path):
    for ax in fig.axes:
        if ax.get_visible():
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="small")
    fig.suptitle(subtitle(data), fontsize="small", wrap=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("--out-dir", help="default: the JSON's directory")
    args = parser.parse_args()
    with open(args.json, encoding="utf-8") as f:
        data = json.load(f)
    out = args.out_dir or os.path.dirname(os.path.abspath(args.json))
    runs = data["runs"]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    recall_plots(axes.flat, runs)
    finish(fig, data, os.path.join(out, "recall_vs_budget.png"))
    # One panel per engine batch size (at most 3) plus the layer timing,
    # only those with data: no empty panels when one workload ran.
    n_batches = min(3, len({r["batch"]
                            for r in select(runs, workload="engine")}))
    has_layer = bool(select(runs, workload="keys", experiment="layer_timing"))
    panels = max(1, n_batches + has_layer)
    cols = min(2, panels)
    rows = (panels + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.5 * rows),
                             squeeze=False)
    axes = list(axes.flat)
    engine_step_plots(axes[:n_batches], runs)
    if has_layer:
        layer_timing_plot(axes[n_batches], runs)
    for ax in axes[n_batches + has_layer:]:
        ax.set_visible(False)
    finish(fig, data, os.path.join(out, "step_time_vs_context.png"))
    fig, axes = plt.subplots(1, 2, figsize=(15, 5.5))
    overhead_plots(axes, runs)
    finish(fig, data, os.path.join(out, "overhead.png"))
    if select(runs, workload="text"):
        fig, axes = plt.subplots(2, 2, figsize=(13, 9))
        text_plots(axes.flat, runs)
        finish(fig, data, os.path.join(out, "text_quality.png"))


if __name__ == "__main__":
    main()
