#!/usr/bin/env python3
"""Side-by-side CPU benchmark against llama.cpp (not run in CI).

Steps (each skipped when its output exists; all under bench/peer/work/,
which git ignores):
  1. llama.cpp's source from the npm package node-llama-cpp (its llama/
     folder holds the source as a git bundle), built with GGML_NATIVE:
     llama-bench and llama-quantize, under `nice -n 15`.
  2. The Llama-3.2-1B-shaped models: `clusterkv-model make-random` writes
     F16 (16 layers, d 2048, 32/8 heads, ffn 8192, the Llama-3 vocabulary of
     the tokenizer fixtures); llama-quantize makes Q8_0 and Q4_K_M from it.
  3. For each model and thread count, quiet and under the controlled load
     (bench_background_load: one process busy --load of one core), rounds
     that run llama-bench and engine_bench alternately (the order flips each
     round): prefill pp512 and decode tg64 at an empty context. Decode is
     compared mean to mean: llama-bench's n_gen / mean sample time, ours
     1 / mean step.
Writes work/peer.json, work/peer.txt (one table of ratios ours / llama.cpp)
and work/peer.png.

usage: bench/peer/peer.py --build-dir build [--types f16,q8_0,q4_k_m]
         [--threads 1,2] [--load 0.5] [--rounds 2] [--version 3.22.1]
         [--build-only] [--out-dir DIR] [--start-round R] [--kernels K]
       bench/peer/peer.py --merge A/peer.json B/peer.json --out-dir DIR
--build-only stops after step 1 (bench/prefix_cache_bench.py --llama-server
uses the llama-server it builds). The results are rewritten after every
measured cell, so an interrupted pass keeps what it measured.
The repository's build dir must hold engine_bench, clusterkv-model and
bench_background_load (ninja -C build engine_bench clusterkv-model
bench_background_load).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORK = os.path.join(HERE, "work")
SHAPE = ["--layers", "16", "--dim", "2048", "--heads", "32", "--kv-heads",
         "8", "--ffn", "8192", "--vocab",
         os.path.join(REPO, "tests/fixtures/tokenizer/ggml-vocab-llama-bpe.gguf")]
QUANT = {"q8_0": "Q8_0", "q4_k_m": "Q4_K_M"}


def log(msg):
    print(f"peer: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    log(" ".join(cmd))
    subprocess.run(cmd, check=True, **kw)


def fetch_source(version):
    src = os.path.join(WORK, "llama.cpp")
    if os.path.isdir(os.path.join(src, ".git")):
        return src
    os.makedirs(WORK, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        run(["npm", "pack", f"node-llama-cpp@{version}", "--silent"], cwd=tmp)
        tgz = os.path.join(tmp, f"node-llama-cpp-{version}.tgz")
        run(["tar", "xzf", tgz, "-C", tmp, "package/llama/gitRelease.bundle",
             "package/llama/llama.cpp.info.json"])
        info = os.path.join(tmp, "package/llama/llama.cpp.info.json")
        shutil.copy(info, os.path.join(WORK, "llama.cpp.info.json"))
        run(["git", "clone", "--quiet",
             os.path.join(tmp, "package/llama/gitRelease.bundle"), src])
    return src


def build_llama(src, jobs):
    bdir = os.path.join(WORK, "llama-build")
    # llama-server too: bench/prefix_cache_bench.py --llama-server.
    bins = [os.path.join(bdir, "bin", b) for b in ("llama-bench",
                                                   "llama-quantize",
                                                   "llama-server")]
    if all(os.path.exists(b) for b in bins):
        return bins
    run(["nice", "-n", "15", "cmake", "-S", src, "-B", bdir, "-G", "Ninja",
         "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
         "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
         "-DLLAMA_BUILD_SERVER=ON", "-DBUILD_SHARED_LIBS=OFF"])
    run(["nice", "-n", "15", "ninja", "-C", bdir, f"-j{jobs}", "llama-bench",
         "llama-quantize", "llama-server"])
    return bins


def make_models(build_dir, quantize, types):
    os.makedirs(os.path.join(WORK, "models"), exist_ok=True)
    path = {t: os.path.join(WORK, "models", f"llama-1b-shape-{t}.gguf")
            for t in ["f16"] + list(QUANT)}
    if not os.path.exists(path["f16"]):
        run(["nice", "-n", "10",
             os.path.join(build_dir, "model", "clusterkv-model"), "make-random",
             "--out", path["f16"], "--dtype", "f16"] + SHAPE)
    for t, q in QUANT.items():
        if t in types and not os.path.exists(path[t]):
            run(["nice", "-n", "10", quantize, path["f16"], path[t], q],
                stdout=subprocess.DEVNULL)
    return {t: path[t] for t in types}


def with_load(fraction, build_dir, cmd):
    """Runs cmd (capturing stdout) beside the controlled load, if any."""
    load = None
    if fraction > 0:
        load = subprocess.Popen(
            [os.path.join(build_dir, "bench", "bench_background_load"),
             str(fraction)])
    try:
        log(" ".join(cmd) + (f"  [load {fraction}]" if load else ""))
        return subprocess.run(cmd, check=True, capture_output=True,
                              text=True).stdout
    finally:
        if load is not None:
            load.kill()
            load.wait()


def llama_bench(binary, model, threads, fraction, build_dir, reps):
    out = with_load(fraction, build_dir, [
        binary, "-m", model, "-t", str(threads), "-p", "512", "-n", "64",
        "-fa", "1", "-r", str(reps), "-o", "json"])
    res = {}
    for r in json.loads(out):
        mean_ns = sum(r["samples_ns"]) / len(r["samples_ns"])
        key = "tg" if r["n_gen"] > 0 else "pp"
        n = r["n_gen"] if key == "tg" else r["n_prompt"]
        res[key] = n / (mean_ns * 1e-9)  # tokens / mean sample time
    return res


def engine_bench(build_dir, model, threads, fraction, kernels):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    with_load(fraction, build_dir, [
        os.path.join(build_dir, "bench", "engine_bench"), "--model", model,
        "--depths", "0", "--threads", str(threads), "--pp-tokens", "512",
        "--decode-tokens", "64", "--kernels", kernels, "--out-json", out])
    with open(out, encoding="utf-8") as f:
        data = json.load(f)
    os.unlink(out)
    run0 = data["runs"][0]
    dec = run0["depths"][0]["decode"]
    return {"pp": run0["pp"][0]["tok_per_s"], "tg": dec["tok_per_s"],
            "tg_p99_ms": dec["p99_ms"], "tg_max_ms": dec["max_ms"],
            "tg_median_ms": dec["median_ms"]}


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    p.add_argument("--types", default="f16,q8_0,q4_k_m")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--load", type=float, default=0.5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--version", default="3.22.1",
                   help="node-llama-cpp release (3.22.1: late September 2026)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--kernels", default="auto",
                   help="engine_bench --kernels (auto, or avx512_bf16 for "
                        "the BF16 prefill GEMM)")
    p.add_argument("--start-round", type=int, default=0,
                   help="index of the first round (odd: llama.cpp first), "
                        "to add rounds to an earlier pass")
    p.add_argument("--merge", nargs="+", metavar="PEER_JSON",
                   help="write the results of the raw samples of these "
                        "peer.json files together (no measuring)")
    p.add_argument("--build-only", action="store_true",
                   help="fetch and build llama.cpp, then stop")
    p.add_argument("--out-dir", default=WORK,
                   help="where peer.json/.txt/.png go (default: work/)")
    args = p.parse_args()
    if args.merge:
        return merge(args)
    build_dir = os.path.abspath(args.build_dir)
    types = args.types.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    src = fetch_source(args.version)
    bench, quantize, _ = build_llama(src, args.jobs)
    if args.build_only:
        return
    models = make_models(build_dir, quantize, types)
    cells = {}
    for rnd in range(args.start_round, args.start_round + args.rounds):
        for t in types:
            for thr in threads:
                for load in (0.0, args.load):
                    c = cells.setdefault((t, thr, load), {"ours": [],
                                                          "llama": []})
                    sides = ["ours", "llama"] if rnd % 2 == 0 else ["llama",
                                                                    "ours"]
                    for side in sides:
                        if side == "ours":
                            c["ours"].append(engine_bench(
                                build_dir, models[t], thr, load, args.kernels))
                        else:
                            c["llama"].append(llama_bench(
                                bench, models[t], thr, load, build_dir, 2))
                    write_results(cells, args, rnd + 1)


def merge(args):
    """The cells of several passes (their raw samples) as one result."""
    cells, rounds = {}, 0
    for path in args.merge:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        rounds = max(rounds, data.get("rounds_started", 0))
        for c in data["raw"]:
            cell = cells.setdefault((c["type"], c["threads"], c["load"]),
                                    {"ours": [], "llama": []})
            cell["ours"] += c["ours"]
            cell["llama"] += c["llama"]
    args.rounds = rounds
    write_results(cells, args, rounds)


def summarise(cells):
    rows = []
    for (t, thr, load), c in cells.items():
        if not c["ours"] or not c["llama"]:
            continue
        row = {"type": t, "threads": thr, "load": load,
               "samples": {"ours": len(c["ours"]), "llama": len(c["llama"])}}
        for k in ("pp", "tg"):
            ours = mean([r[k] for r in c["ours"]])
            peer = mean([r[k] for r in c["llama"]])
            row[k] = {"ours": ours, "llama": peer,
                      "ratio": ours / peer if peer > 0 else None}
        row["ours_tg_p99_over_median"] = mean(
            [r["tg_p99_ms"] / r["tg_median_ms"] for r in c["ours"]])
        row["ours_tg_max_over_median"] = mean(
            [r["tg_max_ms"] / r["tg_median_ms"] for r in c["ours"]])
        rows.append(row)
    return rows


def write_results(cells, args, rounds_done):
    """Rewrites peer.json/.txt/.png from every cell measured so far."""
    rows = summarise(cells)
    with open(os.path.join(WORK, "llama.cpp.info.json"), encoding="utf-8") as f:
        info = json.load(f)
    result = {"benchmark": "peer", "llama_cpp": info,
              "node_llama_cpp": args.version, "rounds": args.rounds,
              "rounds_started": rounds_done, "load_fraction": args.load,
              "ours_kernels": getattr(args, "kernels", "auto"),
              "cpu": cpu_model(), "rows": rows, "raw": [
                  {"type": t, "threads": thr, "load": load, **c}
                  for (t, thr, load), c in cells.items()]}
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "peer.json"), "w",
              encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    lines = [f"ours / llama.cpp {info.get('tag')} (node-llama-cpp "
             f"{args.version}); ours with --kernels "
             f"{getattr(args, 'kernels', 'auto')}; decode mean to mean; round "
             f"{rounds_done} of {args.rounds}",
             f"{'type':<7} {'thr':>3} {'load':>4} {'pp512 ours':>10} "
             f"{'llama':>7} {'ratio':>6} {'tg64 ours':>9} {'llama':>7} "
             f"{'ratio':>6}"]
    for r in rows:
        lines.append(
            f"{r['type']:<7} {r['threads']:3d} {r['load']:4.2f} "
            f"{r['pp']['ours']:10.1f} {r['pp']['llama']:7.1f} "
            f"{r['pp']['ratio'] or 0:6.2f} {r['tg']['ours']:9.1f} "
            f"{r['tg']['llama']:7.1f} {r['tg']['ratio'] or 0:6.2f}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out_dir, "peer.txt"), "w",
              encoding="utf-8") as f:
        f.write(text)
    print(text, flush=True)
    plot(rows, os.path.join(args.out_dir, "peer.png"))


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib: no PNG")
        return
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 1.1), 4.5))
    labels = [f"{r['type']}\n{r['threads']} thr\nload {r['load']:.1f}"
              for r in rows]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["pp"]["ratio"] or 0 for r in rows], 0.4,
           label="prefill pp512")
    ax.bar([i + 0.2 for i in x], [r["tg"]["ratio"] or 0 for r in rows], 0.4,
           label="decode tg64 (mean)")
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize="small")
    ax.set_ylabel("ours / llama.cpp")
    ax.legend()
    ax.set_title("engine_bench vs llama-bench, same GGUF files, interleaved")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
