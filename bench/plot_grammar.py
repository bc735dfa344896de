#!/usr/bin/env python3
"""Plots grammar_bench JSON: mask + accept time per token (mean and p99)
per vocabulary and grammar, with 10 % of the decode step measured in the
same run. Writes the PNG beside the JSON (same name, .png)."""
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    path = sys.argv[1]
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    vocabs = d["vocabularies"]
    grammars = [g["grammar"] for g in vocabs[0]["grammars"]]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    width = 0.8 / max(1, len(grammars))
    for gi, gname in enumerate(grammars):
        means, p99s, xs = [], [], []
        for vi, v in enumerate(vocabs):
            g = next(x for x in v["grammars"] if x["grammar"] == gname)
            if "error" in g:
                continue
            xs.append(vi + gi * width)
            means.append(g["mask_plus_accept"]["mean_us"])
            p99s.append(g["mask_plus_accept"]["p99_us"])
        ax.bar(xs, means, width, label=f"{gname} (mean)")
        ax.scatter(xs, p99s, marker="_", s=200, color="black",
                   label="p99" if gi == 0 else None)
    step = d["decode_step"].get("mean_us", 0)
    if step:
        ax.axhline(0.1 * step, color="red", linestyle="--",
                   label=f"10% of decode step ({step / 1000:.2f} ms, demo "
                         f"model, {d['decode_step']['context']} dense tokens)")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(vocabs))])
    ax.set_xticklabels([f"{v['name']}\n{v['vocab_size']} tokens"
                        for v in vocabs])
    ax.set_yscale("log")
    ax.set_ylabel("mask + accept per token (us, log)")
    ax.set_title("grammar_bench: token mask cost per decode step "
                 f"({d['timestamp']})", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path.rsplit(".", 1)[0] + ".png", dpi=110)
    print_table(d)


def print_table(d):
    """The mask-cost table (markdown) on stdout."""
    step = d["decode_step"].get("mean_us", 0)
    print(f"decode step (mean of all, us): {step:.1f}")
    print("| vocabulary | grammar | mask+accept mean us | p50 | p99 | "
          "cache-miss share | decode step after (us) | mean mask / step | "
          "later generations mean us / step | index walks |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for v in d["vocabularies"]:
        for g in v["grammars"]:
            if "error" in g:
                continue
            m = g["mask_plus_accept"]
            share = g.get("mask_share_of_decode_step", 0)
            step_after = g.get("decode_step_us_after", 0)
            later = g.get("mask_plus_accept_later_generations")
            warm = "–"
            if later and step_after:
                warm = (f"{later['mean_us']:.1f} / "
                        f"{100 * later['mean_us'] / step_after:.1f} %")
            walks = g.get("mask_index_walks", "–")
            print(f"| {v['name']} ({v['vocab_size']}) | {g['grammar']} | "
                  f"{m['mean_us']:.1f} | {m['p50_us']:.1f} | "
                  f"{m['p99_us']:.1f} | {g['mask_cache_miss_share']:.2f} | "
                  f"{g.get('decode_step_us_after', 0):.0f} | "
                  f"{100 * share:.1f} % | {warm} | {walks} |")


if __name__ == "__main__":
    main()
