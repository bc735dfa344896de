#!/usr/bin/python3
"""HTTP front under load and attack (issue 27 §3; a program, not a test).

Starts clusterkv-server on a tiny random model and measures, in one run,
the latency other clients see for GET /v1/models and the time to first
token (TTFT) of a short streamed completion:
  baseline   nothing else running;
  load       1024 idle keep-alive connections + 256 concurrent SSE streams;
  attack     64 slowloris clients (a header line every 0.5 s), 32 slow
             bodies (a byte every 0.5 s), 16 SSE streams whose client never
             reads;
and reports each as a ratio to the baseline of the same run (means; p50
and p99 beside them). Writes JSON and a PNG.

Usage: bench/http_load.py SERVER_BIN MODEL_TOOL OUT_DIR [--samples N]
"""

import argparse
import json
import os
import re
import resource
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def connect(port):
    return socket.create_connection(("127.0.0.1", port), timeout=60)


def completion(prompt, max_tokens, stream):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens,
                       "stream": stream}).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: b\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % len(body)) + body


def models_latency(port):
    t = time.perf_counter()
    s = connect(port)
    s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    if not data.startswith(b"HTTP/1.1 200"):
        raise RuntimeError("GET /v1/models: %r" % data[:80])
    return time.perf_counter() - t


def ttft(port):
    t = time.perf_counter()
    s = connect(port)
    s.sendall(completion("ttft", 4, True))
    data = b""
    while b"data: {" not in data:
        d = s.recv(65536)
        if not d:
            raise RuntimeError("stream ended before a token: %r" % data[:200])
        data += d
    took = time.perf_counter() - t
    s.close()
    return took


def measure(port, samples):
    m = [models_latency(port) for _ in range(samples)]
    f = [ttft(port) for _ in range(samples)]
    return {"models_seconds": m, "ttft_seconds": f}


class Streams:
    """n SSE streams kept running (each restarted when it ends)."""

    def __init__(self, port, n, max_tokens):
        self.port, self.max_tokens = port, max_tokens
        self.stop = False
        self.completed = 0
        self.errors = 0
        self.bufs = {}
        self.socks = [self._start() for _ in range(n)]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _start(self):
        s = connect(self.port)
        s.sendall(completion("load", self.max_tokens, True))
        s.setblocking(False)
        self.bufs[s.fileno()] = b""
        return s

    def _run(self):
        poller = select.poll()
        fds = {}
        for s in self.socks:
            poller.register(s, select.POLLIN)
            fds[s.fileno()] = s
        while not self.stop:
            for fd, _ in poller.poll(200):
                s = fds[fd]
                try:
                    d = s.recv(65536)
                except BlockingIOError:
                    continue
                buf = self.bufs[fd] = (self.bufs[fd] + d)[-64:]
                if d and not buf.endswith(b"0\r\n\r\n"):
                    continue
                if b"[DONE]" in buf:
                    self.completed += 1
                else:
                    self.errors += 1
                poller.unregister(s)
                del fds[fd]
                s.close()
                n = self._start()
                poller.register(n, select.POLLIN)
                fds[n.fileno()] = n
        for s in fds.values():
            s.close()


def attackers(port):
    """Slowloris, slow bodies and SSE readers that never read."""
    socks, stop = [], threading.Event()
    for _ in range(64):
        s = connect(port)
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: b\r\n")
        socks.append(("header", s))
    for _ in range(32):
        s = connect(port)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: b\r\n"
                  b"Content-Length: 100000\r\n\r\n")
        socks.append(("body", s))
    for _ in range(16):
        s = connect(port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(completion("never read", 100000, True))
        socks.append(("reader", s))

    def drip():
        while not stop.wait(0.5):
            for kind, s in socks:
                try:
                    if kind == "header":
                        s.sendall(b"X-Slow: 1\r\n")
                    elif kind == "body":
                        s.sendall(b"a")
                except OSError:
                    pass
    t = threading.Thread(target=drip, daemon=True)
    t.start()
    return socks, stop


def summary(xs):
    return {"mean": statistics.fmean(xs), "p50": percentile(xs, 50),
            "p99": percentile(xs, 99), "n": len(xs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("model_tool")
    ap.add_argument("out_dir")
    ap.add_argument("--samples", type=int, default=30)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 16384), hard))
    os.makedirs(a.out_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ckv-http-load-")
    model = os.path.join(work, "tiny.gguf")
    subprocess.run([a.model_tool, "make-random", "--out", model, "--layers",
                    "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
                    "--ffn", "128", "--vocab", "byte", "--seed", "7"],
                   check=True, stdout=subprocess.DEVNULL)
    log = open(os.path.join(work, "server.log"), "w")
    flags = ["--model", model, "--listen", "127.0.0.1:0",
             "--metrics-address=", "--http-listen", "127.0.0.1:0",
             "--threads", "1", "--max-sessions", "512",
             "--http-max-connections-per-address", "4096",
             "--http-header-timeout-seconds", "60",
             "--http-body-timeout-seconds", "60",
             "--http-write-timeout-seconds", "120",
             "--drain-grace-seconds", "0"]
    proc = subprocess.Popen([a.server] + flags, stdout=log,
                            stderr=subprocess.STDOUT)
    port = None
    for _ in range(600):
        m = re.search(r"http listening on [0-9.]+:(\d+)",
                      open(log.name).read())
        if m and "serving" in open(log.name).read():
            port = int(m.group(1))
            break
        time.sleep(0.05)
    if port is None:
        sys.exit("server did not start:\n" + open(log.name).read())
    results = {"what": "GET /v1/models latency and streamed TTFT seen by "
               "other clients; tiny random model, --threads 1, "
               "--http-io-threads 2 (default)", "samples": a.samples}
    try:
        results["baseline"] = measure(port, a.samples)
        idle = [connect(port) for _ in range(1024)]
        streams = Streams(port, 256, 200)
        time.sleep(1.0)
        results["load"] = measure(port, a.samples)
        streams.stop = True
        streams.thread.join()
        results["load_streams"] = {"completed": streams.completed,
                                   "errors": streams.errors}
        for s in idle:
            s.close()
        socks, stop = attackers(port)
        time.sleep(1.0)
        results["attack"] = measure(port, a.samples)
        stop.set()
        for _, s in socks:
            s.close()
        results["baseline_again"] = measure(port, a.samples)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    table = {}
    base = {k: statistics.fmean(v + results["baseline_again"][k])
            for k, v in results["baseline"].items()}
    for phase in ("baseline", "load", "attack", "baseline_again"):
        table[phase] = {}
        for k, xs in results[phase].items():
            s = summary(xs)
            s["ratio_to_baseline"] = s["mean"] / base[k]
            table[phase][k] = s
    results["summary"] = table
    with open(os.path.join(a.out_dir, "http_load.json"), "w") as f:
        json.dump(results, f, indent=1)
    for phase in table:
        print("%-15s models mean %6.1f ms (x%.2f) p99 %6.1f ms | TTFT mean "
              "%6.1f ms (x%.2f) p99 %6.1f ms" % (
                  phase, 1000 * table[phase]["models_seconds"]["mean"],
                  table[phase]["models_seconds"]["ratio_to_baseline"],
                  1000 * table[phase]["models_seconds"]["p99"],
                  1000 * table[phase]["ttft_seconds"]["mean"],
                  table[phase]["ttft_seconds"]["ratio_to_baseline"],
                  1000 * table[phase]["ttft_seconds"]["p99"]))
    print("load streams completed %(completed)d, errors %(errors)d"
          % results["load_streams"])
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4))
        phases = list(table)
        xs = range(len(phases))
        for i, (k, label) in enumerate((("models_seconds", "GET /v1/models"),
                                        ("ttft_seconds", "streamed TTFT"))):
            ax.bar([x + 0.4 * i for x in xs],
                   [table[p][k]["ratio_to_baseline"] for p in phases], 0.4,
                   label=label)
        ax.set_xticks([x + 0.2 for x in xs])
        ax.set_xticklabels(phases)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_ylabel("mean latency / baseline (same run)")
        ax.set_title("HTTP front: other clients' latency under load and "
                     "attack\n1024 idle + 256 SSE streams; 64 slowloris, "
                     "32 slow bodies, 16 non-reading SSE", fontsize=9)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(a.out_dir, "http_load.png"), dpi=120)
    except ImportError:
        print("matplotlib missing: no PNG", file=sys.stderr)


if __name__ == "__main__":
    main()
