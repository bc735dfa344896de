#!/usr/bin/python3
"""HTTP + gRPC soak of clusterkv-server (issue 27 §3; a program, and with a
short --seconds the ctest `http_grpc_soak_smoke`).

One server (a tiny random model, --http-listen) gets, at the same time:
  gRPC   clusterkv_soak --server with --grpc client threads (random mixes of
         valid and invalid calls: create/prefill/decode/fork/cancel/close,
         each call's status checked against what its action may get);
  HTTP   --sse client threads looping over: streamed completions and chats
         of mixed lengths read to [DONE], streams cancelled mid-way, requests
         whose client vanishes before the answer, slow SSE readers, and
         persistent sessions (x-session-id: KEY.new, then a streamed forked
         question on it). Every answer's status is checked: 200, or 429 with
         Retry-After (capacity that frees up), or 404/409 on a session
         (expired or busy); anything else is unexpected.
Before the load it measures one SSE stream alone (TTFT and inter-token
gaps: the baseline of the same run); during the load it samples the
server's RSS every second and the same latencies of the full streams.
Fails (exit 1) on any unexpected answer, a failed gRPC soak, a server that
does not drain to exit 0, or, when the load runs >= 300 s, RSS that moved
more than 5 % between the first and last fifth of the second half.
Writes WORK_DIR/http_grpc_soak.json and .png.

Usage: http_grpc_soak.py SERVER_BIN MODEL_TOOL SOAK_BIN WORK_DIR
           [--seconds 600] [--sse 64] [--grpc 64]
"""

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "deploy"))
import deploy_util  # noqa: E402

WORDS = ("the king said unto them behold a lion in the field and the "
         "people went up to the city of david").split()


def percentile(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def summary(xs):
    return {"n": len(xs), "mean": statistics.fmean(xs) if xs else None,
            "p50": percentile(xs, 50), "p99": percentile(xs, 99)}


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_action = {}
        self.unexpected = []
        self.ttft = []
        self.gaps = []
        self.sessions = []  # ids made over HTTP, closed over gRPC at the end

    def count(self, action, outcome):
        with self.lock:
            d = self.by_action.setdefault(action, {})
            d[outcome] = d.get(outcome, 0) + 1

    def bad(self, action, message):
        self.count(action, "UNEXPECTED")
        with self.lock:
            if len(self.unexpected) < 40:
                self.unexpected.append("%s: %s" % (action, message))


def prompt(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words))


class HttpClient:
    """One client thread's connection to the HTTP port (reopened as needed)."""

    def __init__(self, port, tally, rng, closer=None):
        self.port = port
        self.tally = tally
        self.rng = rng
        self.closer = closer  # closes a session over gRPC (or None)

    def connect(self):
        # Generous: on a loaded machine a queued request waits its turn.
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)

    def send(self, conn, path, body, headers=()):
        data = json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        h.update(dict(headers))
        conn.request("POST", path, body=data, headers=h)

    def check_status(self, action, r, allowed=(200,)):
        """True when the answer is 200; tallies it; False for an expected
        refusal (429 with Retry-After, or a status in `allowed`)."""
        if r.status == 200:
            self.tally.count(action, "200")
            return True
        body = r.read()[:300]
        if r.status == 429 and r.getheader("Retry-After"):
            self.tally.count(action, "429")
            time.sleep(0.05 + 0.1 * self.rng.random())  # a client backs off
        elif r.status in allowed:
            self.tally.count(action, str(r.status))
        else:
            self.tally.bad(action, "HTTP %d %r" % (r.status, body))
        return False

    def read_stream(self, action, r, stop_after=None, slow=False):
        """Reads SSE events to [DONE]; returns (ttft, gaps) measured from the
        request's start (self.t0). stop_after: read that many events, then
        return None (the caller vanishes)."""
        first, last, gaps, events = None, None, [], 0
        while True:
            if slow:
                time.sleep(0.05)
            line = r.readline()
            if not line:
                self.tally.bad(action, "stream ended without [DONE]")
                return None
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            payload = line[6:]
            if payload == b"[DONE]":
                return first, gaps
            ev = json.loads(payload)
            if "error" in ev:
                self.tally.bad(action, "error event %r" % ev["error"])
                return None
            now = time.monotonic()
            if first is None:
                first = now - self.t0
            elif last is not None:
                gaps.append(now - last)
            last = now
            events += 1
            if stop_after is not None and events >= stop_after:
                return None

    def stream(self, action, path, body, stop_after=None, slow=False,
               headers=(), allowed=()):
        conn = self.connect()
        try:
            self.t0 = time.monotonic()
            self.send(conn, path, body, headers)
            r = conn.getresponse()
            if not self.check_status(action, r, allowed):
                return None
            if r.getheader("x-session-id"):
                with self.tally.lock:
                    self.tally.sessions.append(r.getheader("x-session-id"))
            return self.read_stream(action, r, stop_after, slow)
        except (OSError, http.client.HTTPException) as e:
            self.tally.bad(action, repr(e))
            return None
        finally:
            conn.close()

    def full(self):
        rng = self.rng
        chat = rng.random() < 0.5
        n = rng.choice((4, 16, 48))
        if chat:
            body = {"messages": [{"role": "user",
                                  "content": prompt(rng, rng.randint(3, 60))}],
                    "max_tokens": n, "stream": True,
                    "temperature": rng.choice((0, 0.8))}
            path = "/v1/chat/completions"
        else:
            body = {"prompt": prompt(rng, rng.randint(3, 150)),
                    "max_tokens": n, "stream": True}
            path = "/v1/completions"
        got = self.stream("stream_full", path, body)
        if got:
            with self.tally.lock:
                self.tally.ttft.append(got[0])
                self.tally.gaps.extend(got[1])

    def cancel(self):
        body = {"prompt": prompt(self.rng, 20), "max_tokens": 64,
                "stream": True}
        self.stream("stream_cancel", "/v1/completions", body,
                    stop_after=self.rng.randint(1, 4))

    def vanish(self):
        """Sends a request and closes before the answer (non-streaming)."""
        conn = self.connect()
        try:
            self.send(conn, "/v1/completions",
                      {"prompt": prompt(self.rng, 30), "max_tokens": 48})
            time.sleep(self.rng.random() * 0.05)
            self.tally.count("vanish", "sent")
        except OSError as e:
            self.tally.bad("vanish", repr(e))
        finally:
            conn.close()

    def slow(self):
        body = {"prompt": prompt(self.rng, 10), "max_tokens": 24,
                "stream": True}
        self.stream("stream_slow_reader", "/v1/completions", body, slow=True)

    def session(self):
        key = "soak%d" % self.rng.randrange(1 << 30)
        conn = self.connect()
        try:
            self.send(conn, "/v1/completions",
                      {"prompt": prompt(self.rng, 80), "max_tokens": 1},
                      {"x-session-id": key + ".new"})
            r = conn.getresponse()
            if not self.check_status("session_create", r):
                return
            r.read()
            sid = r.getheader("x-session-id")
        except (OSError, http.client.HTTPException) as e:
            self.tally.bad("session_create", repr(e))
            return
        finally:
            conn.close()
        if not sid:
            self.tally.bad("session_create", "no x-session-id in the answer")
            return
        with self.tally.lock:
            self.tally.sessions.append(sid)
        body = {"messages": [{"role": "user", "content": "who said it"}],
                "max_tokens": 8, "stream": True}
        # 404: the session expired; 409: busy (never here: one call at a time).
        with self.tally.lock:
            mark = len(self.tally.sessions)
        self.stream("session_fork_question", "/v1/chat/completions", body,
                    headers={"x-session-id": sid, "x-session-fork": "1"},
                    allowed=(404,))
        if self.closer is not None:  # done with the document: close both
            with self.tally.lock:
                mine = [x for x in self.tally.sessions[mark:]
                        if x.startswith(key + ".")] + [sid]
                for x in mine:
                    self.tally.sessions.remove(x)
            for x in mine:
                err = self.closer(x)
                if err:
                    self.tally.bad("session_close", err)

    def run(self, stop):
        actions = ((self.full, 0.55), (self.cancel, 0.12),
                   (self.vanish, 0.08), (self.slow, 0.1),
                   (self.session, 0.15))
        while not stop.is_set():
            x, acc = self.rng.random(), 0.0
            for fn, w in actions:
                acc += w
                if x < acc:
                    break
            fn()


def session_closer(server, work_dir):
    """A function closing one session over gRPC: None when it is closed or
    unknown (expired), else the error."""
    import grpc
    pb = deploy_util.load_proto(work_dir)
    c = deploy_util.Client(grpc, pb, server.address)

    def close(sid):
        code = c.code_of(c.unary, "CloseSession",
                         pb.CloseSessionRequest(session_id=sid),
                         pb.CloseSessionResponse, sid)
        return None if code in ("OK", "NOT_FOUND") else (
            "CloseSession %s: %s" % (sid, code))
    return close


def baseline(port, requests):
    """One SSE stream alone: the TTFT and gap figures without load."""
    t = Tally()
    c = HttpClient(port, t, random.Random(99))
    for _ in range(requests):
        c.full()
    return t


def plot(report, path):
    import matplotlib  # Debian's python3-matplotlib (scripts/setup.sh)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    ts = [s[0] for s in report["rss_samples"]]
    a.plot(ts, [s[1] / 1024 for s in report["rss_samples"]])
    a.set_xlabel("s")
    a.set_ylabel("server RSS (MiB)")
    a.set_title("RSS during the load")
    names = ["TTFT p50", "TTFT p99", "gap p50", "gap p99"]
    base = report["baseline"]
    load = report["load"]
    vals = lambda d: [d["ttft"]["p50"] or 0, d["ttft"]["p99"] or 0,
                      d["gap"]["p50"] or 0, d["gap"]["p99"] or 0]
    xs = range(len(names))
    b.bar([x - 0.2 for x in xs], [v * 1e3 for v in vals(base)], 0.4,
          label="1 stream")
    b.bar([x + 0.2 for x in xs], [v * 1e3 for v in vals(load)], 0.4,
          label="%d SSE + %d gRPC" % (report["sse_clients"],
                                    report["grpc_clients"]))
    b.set_xticks(list(xs))
    b.set_xticklabels(names)
    b.set_ylabel("ms")
    b.legend()
    b.set_title("SSE latency")
    fig.suptitle("clusterkv-server HTTP+gRPC soak, %.0f s" %
                 report["seconds"])
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def rss_drift(samples):
    """Relative RSS change between the first and last fifth of the second
    half of the run (the first half is warm-up: pools and caches grow)."""
    half = [kib for _, kib in samples[len(samples) // 2:]]
    if len(half) < 10:
        return None
    k = max(1, len(half) // 5)
    a = statistics.median(half[:k])
    b = statistics.median(half[-k:])
    return (b - a) / a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("model_tool")
    ap.add_argument("soak")
    ap.add_argument("work_dir")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--sse", type=int, default=64)
    ap.add_argument("--grpc", type=int, default=64)
    ap.add_argument("--baseline-requests", type=int, default=20)
    args = ap.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    model = os.path.join(args.work_dir, "tiny.gguf")
    deploy_util.make_tiny_model(args.model_tool, model)
    clients = args.sse + args.grpc
    server = deploy_util.Server(
        args.server, model, args.work_dir, "server", http=True, extra=(
            "--max-sessions", str(clients * 3), "--max-queued-requests",
            str(clients * 2), "--max-host-kv-bytes", str(256 << 20),
            "--max-prompt-tokens", "1024", "--max-session-tokens", "2048",
            "--threads", "2",
            # The prefix cache keeps KV of one-shot prompts by design; off,
            # so that the gRPC soak's "KV back at baseline" check sees leaks.
            "--prefix-cache-bytes", "0"))
    port = int(server.http_address.split(":")[1])
    failures = []
    try:
        base = baseline(port, args.baseline_requests)
        tally = Tally()
        stop = threading.Event()
        grpc_json = os.path.join(args.work_dir, "grpc_soak.json")
        soak = subprocess.Popen(
            [args.soak, "--server", server.address, "--server-pid",
             str(server.proc.pid), "--clients", str(args.grpc), "--seconds",
             str(args.seconds + 3), "--seed", "3", "--json", grpc_json],
            stdout=open(os.path.join(args.work_dir, "grpc_soak.log"), "w"),
            stderr=subprocess.STDOUT)
        closer = session_closer(server, args.work_dir)
        threads = [threading.Thread(
            target=HttpClient(port, tally, random.Random(i), closer).run,
            args=(stop,))
            for i in range(args.sse)]
        time.sleep(1.5)  # the soak reads its baseline before any HTTP session
        t0 = time.monotonic()
        for t in threads:
            t.start()
        samples = []
        while time.monotonic() - t0 < args.seconds:
            samples.append((round(time.monotonic() - t0, 1),
                            rss_kib(server.proc.pid)))
            time.sleep(1)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        # The gRPC soak runs 3 s longer: close the HTTP sessions meanwhile.
        failures += [e for e in map(closer, tally.sessions) if e]
        soak_rc = soak.wait(timeout=300)
        grpc = json.load(open(grpc_json)) if os.path.exists(grpc_json) else {}
        if soak_rc != 0:
            failures.append("gRPC soak exit %d: %s" % (
                soak_rc, grpc.get("failure", "see grpc_soak.log")))
        if tally.unexpected:
            failures.append("%d unexpected HTTP outcome(s): %s" % (
                sum(d.get("UNEXPECTED", 0) for d in tally.by_action.values()),
                "; ".join(tally.unexpected[:5])))
        drift = rss_drift(samples)
        if args.seconds >= 300 and drift is not None and abs(drift) > 0.05:
            failures.append("RSS drift %.1f %% > 5 %%" % (drift * 100))
    finally:
        server.stop()
    if server.proc.returncode != 0:
        failures.append("server exit code %s" % server.proc.returncode)
    report = {
        "what": "clusterkv-server on a tiny random model (2 layers, d 64); "
                "%d SSE client threads + clusterkv_soak with %d gRPC "
                "clients for %.0f s" % (args.sse, args.grpc, args.seconds),
        "seconds": args.seconds, "sse_clients": args.sse,
        "grpc_clients": args.grpc,
        "baseline": {"ttft": summary(base.ttft), "gap": summary(base.gaps)},
        "load": {"ttft": summary(tally.ttft), "gap": summary(tally.gaps)},
        "http_outcomes": tally.by_action,
        "http_unexpected": tally.unexpected,
        "grpc_soak": {k: grpc.get(k) for k in (
            "requests", "requests_per_second", "unexpected",
            "sessions_created", "generated_tokens", "errors_by_code",
            "kv_bytes_baseline_ok", "failure")},
        "rss_samples": samples,
        "rss_mib_first_last": [samples[0][1] / 1024, samples[-1][1] / 1024]
        if samples else None,
        "rss_drift_second_half": drift,
        "failures": failures,
    }
    out = os.path.join(args.work_dir, "http_grpc_soak.json")
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    plot(report, os.path.join(args.work_dir, "http_grpc_soak.png"))
    print(json.dumps({k: report[k] for k in (
        "what", "baseline", "load", "http_outcomes", "grpc_soak",
        "rss_mib_first_last",
        "rss_drift_second_half", "failures")}, indent=1))
    print("JSON:", out)
    if failures:
        print("FAIL: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
