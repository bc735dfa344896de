#!/usr/bin/python3
"""Needle benchmark (issue 32, section 2): exact-match accuracy of the
retrieval model per task, KV policy and budget, per context length x
needle depth, through `clusterkv-model generate` (greedy). Every
configuration answers the same held-out prompts
(scripts/train/eval_needle.py builds them; docs/clusterkv.md, "Needle
prompts", has the format and the tasks). Writes JSON and a PNG of heat
maps (depth x context, one per task, policy and budget).

Tasks (--tasks, RULER's kinds): single (one needle), multikey (the asked
needle among --distractors others), multiquery (2-4 keys asked in one
answer, --distractors more needles), multivalue (one key with 2-4 values
and --distractors other needles), vt (variable tracking: a chain of 2-4
variables and up to 2 distractor chains). The depth is the asked
needle's (the first value's, the chain's start); the others go to random
depths.

  /usr/bin/python3 bench/needle_bench.py --quick          # < 30 s smoke
  /usr/bin/python3 bench/needle_bench.py --contexts 4096,8192,16384,32768 \\
      --samples 4 --budgets 256,1024 --jobs 2

Cluster ablations (issue 32 section 2): --cluster-metrics cosine,l2,ip and
--tokens-per-cluster 40,80,160 run clusterkv once per combination (named
"clusterkv B=256 l2 tpc=40"); the other policies ignore them.

  /usr/bin/python3 bench/needle_bench.py --contexts 32768 --samples 3 \\
      --policies clusterkv --budgets 256 --cluster-metrics cosine,l2,ip \\
      --tokens-per-cluster 80 --jobs 1

The sparse configurations that differ only in policy and budget answer
each prompt from one prefill (`clusterkv-model generate-forks`, forks of
one clustered store: the same answers as one `generate` each, since
multi-token appends attend densely under every policy); full and the
cluster ablations prefill their own (--no-forks: every configuration).
--recall (single needles) replays every prompt with its expected answer
through `clusterkv-model recall --probe-span` per sparse configuration
(teacher-forced, beside a dense shadow; bench/needle_probe.py) and reports
the answer steps' top-k recall and mass recall against dense attention
and how often the step attended the needle key a copy head retrieves
("needle attended").
"""
import argparse
import concurrent.futures
import copy
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts",
                                "train"))
import eval_needle  # noqa: E402
import needle  # noqa: E402
import needle_probe  # noqa: E402

POLICIES = ["full", "clusterkv", "clusterkv_rerank", "quest", "streaming",
            "oracle"]


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="models/needle-llama.gguf")
    p.add_argument("--binary", default="build/model/clusterkv-model")
    p.add_argument("--contexts", default="4096,8192,16384,32768")
    p.add_argument("--depths", type=int, default=11)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--budgets", default="256,1024")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dense-layers", type=int, default=1,
                   help="layers below this attend densely; the retrieval "
                        "model has 2 layers, so 1 makes its second (the "
                        "copy head's) layer sparse")
    p.add_argument("--cluster-metrics", default="",
                   help="comma list of cosine|l2|ip: clusterkv runs once per "
                        "metric (empty: the engine's default, unnamed)")
    p.add_argument("--tokens-per-cluster", default="",
                   help="comma list of ints: clusterkv runs once per value "
                        "(empty: the engine's default, unnamed)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--seed", type=int, default=99)
    p.add_argument("--tasks", default="single",
                   help="comma list of " + "|".join(needle.TASKS))
    p.add_argument("--distractors", type=int, default=3,
                   help="other needles in the tasks but single")
    p.add_argument("--recall", action="store_true",
                   help="single needles: the answer steps' recall measures "
                        "per sparse configuration (one more run per prompt)")
    p.add_argument("--no-forks", dest="forks", action="store_false",
                   help="every configuration prefills each prompt itself "
                        "(default: the sparse ones with the run's flags "
                        "fork one prefill per prompt, generate-forks; the "
                        "answers are the same)")
    p.add_argument("--quick", action="store_true",
                   help="4k only, 3 depths, 1 sample, budget 256")
    p.add_argument("--out", default="bench/results/needle")
    a = p.parse_args()
    if a.quick:
        a.contexts, a.depths, a.samples, a.budgets = "4096", 3, 1, "256"
    for t in a.tasks.split(","):
        if t not in needle.TASKS:
            p.error(f"unknown task {t!r}")
    return a


def configs(args):
    """(name, policy, budget, extra clusterkv-model flags) per configuration;
    clusterkv once per cluster metric x tokens_per_cluster asked for."""
    metrics = [m for m in args.cluster_metrics.split(",") if m] or [None]
    tpcs = [int(t) for t in args.tokens_per_cluster.split(",") if t] or [None]
    out = []
    for policy in args.policies.split(","):
        if policy == "full":
            out.append(("full", "full", 0, []))
            continue
        for b in args.budgets.split(","):
            if policy != "clusterkv":
                out.append((f"{policy} B={b}", policy, int(b), []))
                continue
            for m in metrics:
                for t in tpcs:
                    name, extra = f"{policy} B={b}", []
                    if m:
                        name += f" {m}"
                        extra += ["--cluster-metric", m]
                    if t:
                        name += f" tpc={t}"
                        extra += ["--tokens-per-cluster", str(t)]
                    out.append((name, policy, int(b), extra))
    return out


def plot(path, tables, contexts, depths):
    """tables: {heat map title: accuracy table}."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(tables)
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows),
                             squeeze=False)
    for ax, (name, table) in zip(axes.flat, tables.items()):
        grid = np.array([[table[str(c)]["by_depth"][f"{d:.1f}"]
                          for c in contexts] for d in depths])
        ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto",
                  origin="upper")
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(len(contexts)))
        ax.set_xticklabels([f"{c // 1024}k" for c in contexts], fontsize=7)
        ax.set_yticks(range(len(depths)))
        ax.set_yticklabels([f"{int(round(d * 100))}%" for d in depths],
                           fontsize=6)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle("needle exact match (depth x context)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def distractors_of(args, task):
    """Needles besides the asked one: none in the single-needle task."""
    return 0 if task == "single" else args.distractors


def run_task(args, task, contexts, depths, pool):
    """{config name: [result per prompt]} for one task (every configuration
    answers the same prompts)."""
    job_args = copy.copy(args)  # eval_needle.make_jobs reads these two
    job_args.task = task
    job_args.distractors = distractors_of(args, task)
    jobs, tok = eval_needle.make_jobs(job_args, contexts, depths)
    prompts = [needle.decode(tok, j[3]) for j in jobs]
    cfgs = configs(args)
    # Configurations that differ from the run's flags only in policy and
    # budget share one prefill per prompt (generate-forks); full (a dense
    # cache in generate) and the cluster ablations run alone.
    forked = [c for c in cfgs if args.forks and c[1] != "full" and not c[3]]
    shared = [pool.submit(eval_needle.run_forks, args, p, j[4],
                          [(c[1], c[2]) for c in forked])
              for p, j in zip(prompts, jobs)] if forked else []
    results = {}
    for name, policy, budget, extra in cfgs:
        if (name, policy, budget, extra) in forked:
            futures = [_Picked(f, (policy, budget)) for f in shared]
        else:
            futures = [pool.submit(eval_needle.run_one, args, p, j[4], policy,
                                   budget, extra)
                       for p, j in zip(prompts, jobs)]
        rs = []
        for j, f in zip(jobs, futures):
            try:
                r = dict(f.result())
            except RuntimeError as e:  # an engine failure is a miss
                r = {"answer": None, "ok": False, "error": str(e)[-500:]}
            r.update({"context": j[0], "depth": round(j[1], 2),
                      "sample": j[2], "expected": j[4]})
            rs.append(r)
        results[name] = rs
        acc = sum(r["ok"] for r in rs) / len(rs)
        errors = sum("error" in r for r in rs)
        print(f"{task:10s} {name:20s} accuracy {acc:.3f} ({len(rs)} prompts"
              f"{f', {errors} engine errors' if errors else ''})",
              flush=True)
    return results


class _Picked:
    """One fork's result out of a run_forks future."""

    def __init__(self, future, key):
        self.future, self.key = future, key

    def result(self):
        return self.future.result()[self.key]


def run_recall(args, pool):
    """{config name: mean top-k recall, mass recall and needle attended over
    the single-needle prompts' answer steps, and per prompt}."""
    probes = needle_probe.prompts(args)
    out = {}
    for name, policy, budget, extra in configs(args):
        if policy == "full":
            continue
        futures = [pool.submit(needle_probe.replay, args, p, policy, budget,
                               extra) for p in probes]
        rows = []
        for p, f in zip(probes, futures):
            rec = f.result()
            rows.append({"context": p["context"], "depth": p["depth"],
                         "sample": p["sample"],
                         "topk_recall": rec["topk_recall"],
                         "mass_recall": rec["mass_recall"],
                         "needle_attended": needle_probe.needle_attended(
                             needle_probe.summarize(p, rec))})
        mean = {k: round(float(np.nanmean([r[k] for r in rows])), 4)
                for k in ("topk_recall", "mass_recall", "needle_attended")}
        out[name] = {"mean": mean, "prompts": rows}
        print(f"recall     {name:20s} {mean}", flush=True)
    return out


def main():
    args = parse_args()
    t0 = time.time()
    contexts = [int(c) for c in args.contexts.split(",")]
    depths = np.linspace(0.0, 1.0, args.depths)
    tasks = args.tasks.split(",")
    results, tables = {}, {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for task in tasks:
            results[task] = run_task(args, task, contexts, depths, pool)
            tables[task] = {k: eval_needle.accuracy_table(v, contexts, depths)
                            for k, v in results[task].items()}
        recall = run_recall(args, pool) if args.recall else {}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump({"model": os.path.basename(args.model), "tasks": tasks,
                   "distractors": {t: distractors_of(args, t)
                                   for t in tasks},
                   "contexts": contexts, "depths": depths.tolist(),
                   "samples_per_cell": args.samples, "seed": args.seed,
                   "flags": {c[0]: c[3] for c in configs(args)},
                   "forks": args.forks,
                   "accuracy": tables,
                   "recall_single": recall,
                   "results": results,
                   "seconds": round(time.time() - t0, 1)}, f, indent=1)
    plot(args.out + ".png", {f"{t}: {k}": v for t in tasks
                             for k, v in tables[t].items()}, contexts, depths)
    print(f"wrote {args.out}.json and .png in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
