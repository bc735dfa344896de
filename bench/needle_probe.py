#!/usr/bin/python3
"""Why a policy misses a needle (issue 32 section 3): for chosen prompts of
bench/needle_bench.py (same --seed/--samples/--depths: the same prompts),
replays prompt + expected answer through `clusterkv-model recall
--probe-span` (teacher-forced; a sparse session and its dense shadow) and
reports, per answer step and sparse layer/head, where clusterkv left the
needle's keys: the cluster rank of the key the head retrieves (its
largest dense weight within the needle), the tokens of the clusters ranked
ahead of it (reached only when B exceeds them), the size of its cluster
and how many needle keys share it, and whether the step attended it;
plus whether the sparse argmax still equals the dense one.

  /usr/bin/python3 bench/needle_probe.py --contexts 32768 --samples 3 \\
      --pick 0.0:0,0.1:2,0.5:0,0.3:0 --budget 256 --out probe.json

--pick DEPTH:SAMPLE,... chooses prompts (default: all of them).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts",
                                "train"))
import bpe  # noqa: E402
import corpus  # noqa: E402
import gguf_reader  # noqa: E402
import needle  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="models/needle-llama.gguf")
    p.add_argument("--binary", default="build/model/clusterkv-model")
    p.add_argument("--contexts", default="32768")
    p.add_argument("--depths", type=int, default=11)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--seed", type=int, default=99)
    p.add_argument("--pick", default="",
                   help="DEPTH:SAMPLE,... (e.g. 0.1:2); empty: every prompt")
    p.add_argument("--policy", default="clusterkv")
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--dense-layers", type=int, default=1)
    p.add_argument("--kv-flags", default="",
                   help="more clusterkv-model flags, space separated "
                        "(e.g. '--cluster-metric l2')")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--raw", action="store_true",
                   help="keep each prompt's whole recall JSON in --out "
                        "(~150 kB per 32k prompt)")
    p.add_argument("--out", default="")
    return p.parse_args()


def prompts(args):
    """eval_needle.make_jobs' prompts with what it drops: the whole sequence
    (answer and EOS included), the answer start and the needle's span."""
    meta, _ = gguf_reader.read(args.model)
    tok = bpe.from_gguf_meta(meta)
    train_text, heldout = corpus.load()
    hay = needle.Haystack(tok, tok.encode(heldout),
                          needle.key_words(train_text + heldout), True,
                          np.random.default_rng(args.seed))
    out = []
    for ctx in [int(c) for c in args.contexts.split(",")]:
        for d in np.linspace(0.0, 1.0, args.depths):
            for s in range(args.samples):
                ids, _, _, a0, expected = hay.build("single", ctx, 0,
                                                    depths=[d])
                src = hay.last_src  # (answer index, needle index, first)
                key = re.search(r"magic number for (\w+)\?",
                                needle.decode(tok, ids[a0 - 30:a0])).group(1)
                piece = tok.encode(needle.NEEDLE.format(k=key,
                                                        v=expected[1:-1]))
                end = src[0][1] + len(src)
                out.append({"context": ctx, "depth": round(float(d), 2),
                            "sample": s, "ids": ids, "a0": a0,
                            "expected": expected,
                            "span": [end - len(piece), end],
                            "copies": [[a, n] for a, n, _ in src]})
    return out


def summarize(p, rec):
    """Per answer step (those with a next token): each sparse layer's heads'
    view of the needle key it retrieves (its largest dense weight in the
    span)."""
    steps = []
    first = p["span"][0]
    for st in rec["span_probe"]:
        if st["next_token"] < 0:
            continue
        for layer in st["layers"]:
            heads = []
            for h in layer["heads"]:
                t = h["keys"][h["target"]]
                heads.append({
                    "head": h["head"], "span_weight": h["span_weight"],
                    "target": t["pos"] - first, "weight": t["weight"],
                    "score": t["score"], "key_rank": t["key_rank"],
                    "cluster_rank": t["cluster_rank"],
                    "tokens_ahead": t["tokens_ahead"],
                    "cluster_size": t["cluster_size"],
                    "span_members": t["span_members"],
                    "cluster_score": t["cluster_score"],
                    "top_cluster_score": h["top_cluster_score"],
                    "selected": t["selected"]})
            steps.append({"q_pos": st["q_pos"], "layer": layer["layer"],
                          "agree": st["dense_argmax"] == st["sparse_argmax"],
                          "heads": heads})
    return steps


def aggregate(results):
    """Over the copy steps (some head puts >= half its weight on the
    needle) of every prompt: where the retrieved key's cluster ranked."""
    hs, steps = [], []
    for r in results:
        for st in r["steps"]:
            if max(h["span_weight"] for h in st["heads"]) < 0.5:
                continue
            steps.append(st)
            hs += [h for h in st["heads"] if h["cluster_rank"] >= 0]
    if not hs:
        return {"copy_steps": len(steps), "clustered_head_steps": 0}
    sel = [h for h in hs if h["selected"]]
    ratio = sorted(h["cluster_score"] / h["score"] for h in hs)
    return {
        "copy_steps": len(steps),
        "clustered_head_steps": len(hs),
        "key_rank_0": sum(h["key_rank"] == 0 for h in hs),
        "min_weight": min(h["weight"] for h in hs),
        "min_key_over_top_cluster": min(h["score"] / h["top_cluster_score"]
                                        for h in hs),
        "cluster_size": [min(h["cluster_size"] for h in hs),
                         float(np.median([h["cluster_size"] for h in hs])),
                         max(h["cluster_size"] for h in hs)],
        "needle_keys_in_cluster": {
            str(n): sum(h["span_members"] == n for h in hs)
            for n in sorted({h["span_members"] for h in hs})},
        "centroid_over_key_score": [ratio[0], float(np.median(ratio)),
                                    ratio[-1]],
        "cluster_ranks": sorted(h["cluster_rank"] for h in hs),
        "selected": len(sel),
        "max_tokens_ahead_selected": max((h["tokens_ahead"] for h in sel),
                                         default=-1),
        "tokens_ahead_missed": sorted(h["tokens_ahead"] for h in hs
                                      if not h["selected"]),
        "steps_every_head_missed": sum(
            all(not h["selected"] for h in st["heads"]) for st in steps),
        "steps_argmax_changed": sum(not st["agree"] for st in steps),
    }


def replay(args, p, policy, budget, extra=()):
    """Prompt p (prompts()) with its expected answer through `clusterkv-model
    recall --probe-span` (args: binary, model, dense_layers, threads):
    the recall JSON, or RuntimeError with the engine's error."""
    # Through the answer's "." (its last copy): the steps predict answer
    # tokens 2.. and the ".", as exact match scores them.
    n = p["a0"] + len(p["copies"])
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(" ".join(map(str, p["ids"][:n])))
        path = f.name
    cmd = [args.binary, "recall", args.model, "--tokens-file", path,
           "--prompt-tokens", str(p["a0"]), "--policy", policy,
           "--budget", str(budget), "--dense-layers",
           str(args.dense_layers), "--threads", str(args.threads),
           "--probe-span", "%d:%d" % tuple(p["span"])]
    cmd += list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True)
    os.unlink(path)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.splitlines()[0])


def needle_attended(steps):
    """Over the copy steps (some head puts >= half its weight on the
    needle): the share of (step, head) pairs whose retrieved needle key the
    step attended (selected, or a sink or tail row)."""
    hs = [h for st in steps
          if max(h["span_weight"] for h in st["heads"]) >= 0.5
          for h in st["heads"]]
    return sum(h["selected"] for h in hs) / len(hs) if hs else float("nan")


def main():
    args = parse_args()
    picks = {(float(a), int(b)) for a, b in
             (x.split(":") for x in args.pick.split(",") if x)}
    todo = [p for p in prompts(args)
            if not picks or (p["depth"], p["sample"]) in picks]
    results = []
    for p in todo:
        t0 = time.time()
        try:
            rec = replay(args, p, args.policy, args.budget,
                         args.kv_flags.split())
        except RuntimeError as e:
            sys.exit(str(e))
        steps = summarize(p, rec)
        row = {k: p[k] for k in ("context", "depth", "sample", "expected",
                                 "span")}
        row.update({"a0": p["a0"],
                    "answer_steps_agree": all(st["agree"] for st in steps),
                    "topk_recall": rec["topk_recall"],
                    "mass_recall": rec["mass_recall"], "steps": steps,
                    "seconds": round(time.time() - t0, 1)})
        if args.raw:
            row["raw"] = rec
        results.append(row)
        print(json.dumps({k: v for k, v in row.items()
                          if k not in ("raw", "steps")}), flush=True)
    summary = aggregate(results)
    print(json.dumps(summary), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": os.path.basename(args.model),
                       "policy": args.policy, "budget": args.budget,
                       "kv_flags": args.kv_flags, "summary": summary,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
