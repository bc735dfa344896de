#!/usr/bin/python3
"""Prefix cache benchmark (issue 28 §3): one ~8k-token document, 10 different
questions, each sent by a stateless client (no x-session-id) as the whole
document followed by the question, streamed from POST /v1/completions.

Configurations, each a fresh server run on the same model and threads, in
this order within one run of the program (so they share the machine's
state):
  cache      clusterkv-server with its prefix cache (the default
             --prefix-cache-bytes): the first question prefills the whole
             document, later ones reuse its cached whole blocks;
  no-cache   clusterkv-server --prefix-cache-bytes 0: every question
             prefills the whole document;
  llama.cpp  llama-server (when --llama-server BIN is given) with its
             default `cache_prompt` slot reuse, same model file, threads and
             prompts, through the same OpenAI endpoint.
The whole sequence is repeated --rounds times with the order of the
configurations rotated; per question the mean over rounds is reported.
Reports per configuration: TTFT and total time of each question, their
means over questions 2..10 (the ones a cache can help) and the ratio of
each mean to no-cache's, and `usage.prompt_tokens_details.cached_tokens`
where the server returns it. Writes OUT/prefix_cache.json and .png.

Usage: bench/prefix_cache_bench.py --server build/server/clusterkv-server
         [--model models/kjv-llama.gguf] [--llama-server BIN]
         [--doc-tokens 7600] [--questions 10] [--max-tokens 16]
         [--threads 2] [--rounds 1] [--out bench/results]
"""

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

QUESTIONS = [
    "Who went up to the mountain?", "What did the king command?",
    "Where did the people dwell?", "How many days did they wait?",
    "What was written upon the stone?", "Whom did the prophet anoint?",
    "Why were the people afraid?", "What did they bring as an offering?",
    "Which city was taken first?", "What was said unto the elders?",
    "Who spake unto Moses?", "What became of the house of Saul?",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port, path, timeout, proc):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited with %s" % proc.returncode)
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError("server on port %d did not answer %s" % (port, path))


class Server:
    def __init__(self, name, cmd, port, log_path, ready_path):
        self.name = name
        self.port = port
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_http(port, ready_path, 120, self.proc)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def ours(args, cache, work):
    port = free_port()
    cmd = [args.server, "--model", args.model, "--listen", "127.0.0.1:0",
           "--metrics-address", "127.0.0.1:%d" % free_port(),
           "--http-listen", "127.0.0.1:%d" % port, "--threads",
           str(args.threads), "--drain-grace-seconds", "0",
           "--max-prompt-tokens", "8192", "--max-session-tokens", "8192"]
    if not cache:
        cmd += ["--prefix-cache-bytes", "0"]
    name = "cache" if cache else "no-cache"
    return Server(name, cmd, port, os.path.join(work, name + ".log"),
                  "/health")


def llama(args, work):
    port = free_port()
    cmd = [args.llama_server, "-m", args.model, "--host", "127.0.0.1",
           "--port", str(port), "-t", str(args.threads), "-c", "8192",
           "-np", "1", "--no-webui"]
    return Server("llama.cpp", cmd, port, os.path.join(work, "llama.log"),
                  "/health")


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", path, body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError("%s: HTTP %d %s" % (path, r.status, data[:300]))
    return json.loads(data)


def document(port, text, tokens):
    """The longest prefix of `text` (cut at a line end) with at most
    `tokens` tokens, counted by the server's own tokenizer."""
    lines = text.split("\n")
    lo, hi = 1, len(lines)
    while lo < hi:  # the most lines that fit
        mid = (lo + hi + 1) // 2
        n = len(post(port, "/tokenize",
                     {"content": "\n".join(lines[:mid])})["tokens"])
        lo, hi = (mid, hi) if n <= tokens else (lo, mid - 1)
    doc = "\n".join(lines[:lo])
    return doc, len(post(port, "/tokenize", {"content": doc})["tokens"])


def ask(port, prompt, max_tokens):
    """One streamed completion: (ttft s, total s, cached tokens or None)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d %s" % (r.status, r.read()[:300]))
    ttft, cached = None, None
    while True:
        line = r.readline()
        if not line:
            raise RuntimeError("stream ended without [DONE]")
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        if line == b"data: [DONE]":
            break
        ev = json.loads(line[6:])
        if ttft is None and ev.get("choices"):
            ttft = time.monotonic() - t0
        usage = ev.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        if "cached_tokens" in details:
            cached = details["cached_tokens"]
    total = time.monotonic() - t0
    c.close()
    return ttft if ttft is not None else total, total, cached


def run_config(name, start, prompts, max_tokens):
    server = start()
    try:
        rows = []
        for p in prompts:
            ttft, total, cached = ask(server.port, p, max_tokens)
            rows.append({"ttft_s": ttft, "total_s": total,
                         "cached_tokens": cached})
            print("  %-9s q%-2d ttft %7.3f s total %7.3f s cached %s" % (
                name, len(rows), ttft, total, cached), flush=True)
        return rows
    finally:
        server.stop()


def plot(report, path):
    import matplotlib  # Debian's python3-matplotlib (scripts/setup.sh)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    names = list(report["configs"])
    w = 0.8 / len(names)
    for i, n in enumerate(names):
        q = report["configs"][n]["questions"]
        xs = [j + 1 + (i - (len(names) - 1) / 2) * w for j in range(len(q))]
        a.bar(xs, [r["ttft_s"] for r in q], w, label=n)
        b.bar(xs, [r["total_s"] for r in q], w, label=n)
    for ax, what in ((a, "time to first token (s)"), (b, "total (s)")):
        ax.set_xlabel("question")
        ax.set_ylabel(what)
        ax.legend()
    fig.suptitle("%d questions about one %d-token document, stateless "
                 "client (%s)" % (report["questions"], report["doc_tokens"],
                                  report["model"]))
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", default=os.path.join(REPO, "models",
                                                    "kjv-llama.gguf"))
    ap.add_argument("--text", default=os.path.join(REPO, "models",
                                                   "kjv-llama.heldout.txt"))
    ap.add_argument("--llama-server", default="")
    ap.add_argument("--doc-tokens", type=int, default=7600)
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    args = ap.parse_args()
    if args.questions > len(QUESTIONS):
        ap.error("at most %d questions" % len(QUESTIONS))
    os.makedirs(args.out, exist_ok=True)
    work = os.path.join(args.out, "prefix_cache_logs")
    os.makedirs(work, exist_ok=True)
    with open(args.text) as f:
        text = f.read()
    s = ours(args, True, work)
    try:
        doc, doc_tokens = document(s.port, text, args.doc_tokens)
    finally:
        s.stop()
    prompts = ["%s\n\nQuestion: %s\nAnswer:" % (doc, q)
               for q in QUESTIONS[:args.questions]]
    configs = [("cache", lambda: ours(args, True, work)),
               ("no-cache", lambda: ours(args, False, work))]
    if args.llama_server:
        configs.append(("llama.cpp", lambda: llama(args, work)))
    runs = {n: [] for n, _ in configs}
    for rnd in range(args.rounds):
        order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
        for name, start in order:
            print("round %d: %s" % (rnd + 1, name), flush=True)
            runs[name].append(run_config(name, start, prompts,
                                         args.max_tokens))
    report = {"what": "stateless /v1/completions, streamed; the document "
                      "then 'Question: ...\\nAnswer:'; greedy, %d tokens; "
                      "%d thread(s); %d round(s)" % (
                          args.max_tokens, args.threads, args.rounds),
              "model": os.path.basename(args.model),
              "doc_tokens": doc_tokens, "questions": args.questions,
              "configs": {}}
    for name, rs in runs.items():
        q = [{k: statistics.fmean(r[i][k] for r in rs)
              for k in ("ttft_s", "total_s")} | {
                 "cached_tokens": rs[-1][i]["cached_tokens"]}
             for i in range(args.questions)]
        later = q[1:]
        report["configs"][name] = {
            "questions": q,
            "first_ttft_s": q[0]["ttft_s"],
            "later_mean_ttft_s": statistics.fmean(r["ttft_s"] for r in later),
            "later_mean_total_s": statistics.fmean(r["total_s"]
                                                   for r in later),
            "all_total_s": sum(r["total_s"] for r in q)}
    base = report["configs"]["no-cache"]
    for c in report["configs"].values():
        c["later_ttft_vs_no_cache"] = (c["later_mean_ttft_s"] /
                                       base["later_mean_ttft_s"])
        c["all_total_vs_no_cache"] = c["all_total_s"] / base["all_total_s"]
    out = os.path.join(args.out, "prefix_cache.json")
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    plot(report, os.path.join(args.out, "prefix_cache.png"))
    print("%-10s %10s %14s %14s %12s %10s" % (
        "config", "ttft q1 s", "ttft q2.. s", "vs no-cache", "all total s",
        "vs no-cache"))
    for n, c in report["configs"].items():
        print("%-10s %10.3f %14.3f %14.3f %12.2f %10.3f" % (
            n, c["first_ttft_s"], c["later_mean_ttft_s"],
            c["later_ttft_vs_no_cache"], c["all_total_s"],
            c["all_total_vs_no_cache"]))
    print("JSON:", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
