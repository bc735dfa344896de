#!/usr/bin/python3
"""Needle accuracy of a GGUF model in the C++ engine: held-out filler, keys
and values (needle.py), greedy `clusterkv-model generate`, exact match of
the answer (the text up to the first "."), per context length and depth.

  /usr/bin/python3 scripts/train/eval_needle.py --model models/needle-llama.gguf \\
      --contexts 4096,8192,16384,32768 --samples 4 --out acc.json \\
      [--policy full] [--budget B] [--task single] [--jobs 2]

The answer is cut after as many "." as the expected one holds (one but
for multi-query). Depth d places the (asked) needle at fraction d of the
filler (0: right after BOS, 1: right before the question). Prints one
JSON line per prompt and writes the table (accuracy per context x depth)
to --out.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

import bpe
import corpus
import gguf_reader
import needle

_PREFILL = re.compile(r"prefill: (\d+) tokens, ([\d.]+) tok/s")


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--binary", default="build/model/clusterkv-model")
    p.add_argument("--contexts", default="4096,8192,16384,32768")
    p.add_argument("--depths", type=int, default=11,
                   help="depths 0..100 %% in this many even steps")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--task", default="single", choices=needle.TASKS)
    p.add_argument("--distractors", type=int, default=0)
    p.add_argument("--policy", default="full")
    p.add_argument("--budget", type=int, default=0)
    p.add_argument("--dense-layers", type=int, default=-1,
                   help="layers below this attend densely (the engine's "
                        "default, 2, leaves a 2-layer model all dense); "
                        "-1: the engine's default")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--seed", type=int, default=99)
    p.add_argument("--out", default="")
    return p.parse_args()


def answer_of(text, expected):
    """The generated text up to and including its n-th ".", n the number of
    "." in the expected answer (1 for every task but multi-query, whose
    answer is several sentences); the whole text when it has fewer."""
    cut = -1
    for _ in range(max(1, expected.count("."))):
        cut = text.find(".", cut + 1)
        if cut < 0:
            return text
    return text[:cut + 1]


def _engine(args, command, prompt, expected, flags, extra):
    """Runs `clusterkv-model COMMAND MODEL --prompt-file (prompt)` greedily
    with room for the expected answer, the run's threads and dense layers,
    `flags` and `extra`; returns (completed process, seconds). A failure
    raises RuntimeError."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt)
        path = f.name
    cmd = [args.binary, command, args.model, "--prompt-file", path,
           "--temperature", "0", "--max-tokens", str(len(expected) + 4),
           "--threads", str(args.threads)] + list(flags)
    if getattr(args, "dense_layers", -1) >= 0:
        cmd += ["--dense-layers", str(args.dense_layers)]
    cmd += list(extra)
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    os.unlink(path)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr[-2000:]}")
    return r, time.time() - t0


def run_one(args, prompt, expected, policy=None, budget=None, extra=()):
    """Greedy answer of the engine to one prompt (args: binary, model,
    threads, and the policy/budget unless given); `extra`: more
    clusterkv-model flags (e.g. KV store flags)."""
    policy = args.policy if policy is None else policy
    budget = args.budget if budget is None else budget
    flags = ["--policy", policy] + (["--budget", str(budget)] if budget else [])
    r, seconds = _engine(args, "generate", prompt, expected, flags, extra)
    text = r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout
    answer = answer_of(text, expected)
    m = _PREFILL.search(r.stderr)
    return {"answer": answer, "ok": answer == expected,
            "prefill_tokens": int(m.group(1)) if m else -1,
            "prefill_tok_s": float(m.group(2)) if m else -1,
            "seconds": round(seconds, 2)}


def run_forks(args, prompt, expected, forks, extra=()):
    """Greedy answers of several (policy, budget) forks of one prefill
    (`clusterkv-model generate-forks`: each the answer run_one gives for
    that policy and budget; the same flags otherwise): {(policy, budget):
    result as run_one's}."""
    spec = ",".join(f"{p}:{b or 0}" for p, b in forks)
    r, seconds = _engine(args, "generate-forks", prompt, expected,
                         ["--forks", spec], extra)
    lines = [json.loads(line) for line in r.stdout.splitlines() if line]
    if [x["fork"] for x in lines] != spec.split(","):
        raise RuntimeError(f"generate-forks {spec}: out of order: {lines}")
    out = {}
    for (p, b), x in zip(forks, lines):
        answer = answer_of(x["text"], expected)
        out[(p, b)] = {"answer": answer, "ok": answer == expected,
                       "shared_prefill": x["shared_prefill"],
                       "seconds": round(seconds / len(lines), 2)}
    return out


def make_jobs(args, contexts, depths):
    """Held-out prompts: (context, depth, sample, ids, expected) per cell,
    and the tokenizer."""
    meta, _ = gguf_reader.read(args.model)
    tok = bpe.from_gguf_meta(meta)  # bpe only: runs without torch (CI)
    train_text, heldout = corpus.load()
    hay = needle.Haystack(tok, tok.encode(heldout),
                          needle.key_words(train_text + heldout), True,
                          np.random.default_rng(args.seed))
    jobs = []
    for ctx in contexts:
        for d in depths:
            for s in range(args.samples):
                # d: the asked needle's depth (needle.Haystack.anchored).
                ids, _, _, a0, expected = hay.build(
                    args.task, ctx, args.distractors, depths=[float(d)])
                jobs.append((ctx, float(d), s, ids[:a0], expected))
    return jobs, tok


def accuracy_table(results, contexts, depths):
    table = {}
    for ctx in contexts:
        row = {}
        for d in depths:
            cell = [r["ok"] for r in results
                    if r["context"] == ctx and r["depth"] == round(d, 2)]
            row[f"{d:.1f}"] = round(sum(cell) / len(cell), 3)
        mine = [r["ok"] for r in results if r["context"] == ctx]
        table[str(ctx)] = {"by_depth": row,
                           "mean": round(sum(mine) / len(mine), 4),
                           "n": len(mine)}
    return table


def main():
    args = parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    depths = np.linspace(0.0, 1.0, args.depths)
    jobs, tok = make_jobs(args, contexts, depths)
    results = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, args, needle.decode(tok, j[3]), j[4])
                   for j in jobs]
        for j, fut in zip(jobs, futures):
            r = fut.result()
            r.update({"context": j[0], "depth": round(j[1], 2),
                      "sample": j[2], "expected": j[4],
                      "prompt_tokens": len(j[3])})
            results.append(r)
            print(json.dumps(r), flush=True)
    table = accuracy_table(results, contexts, depths)
    summary = {"model": os.path.basename(args.model), "task": args.task,
               "distractors": args.distractors, "policy": args.policy,
               "budget": args.budget, "samples_per_cell": args.samples,
               "token_mismatches": sum(r["prefill_tokens"] != r["prompt_tokens"]
                                       for r in results),
               "accuracy": table}
    print(json.dumps(summary, indent=1), file=sys.stderr)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"summary": summary, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
