"""ctest http_front_test: the failures of issue 27 driven through real
clients against clusterkv-server's HTTP front (docs/http-api.md).

Raw sockets: pipelining, RFC 9112 framing errors, limits (413, 414, 431),
slow clients (408) while others are served, many concurrent SSE streams
without head-of-line waiting, the per-address connection cap (429), a
client that disconnects (streaming or not) being cancelled with its session
rolled back. curl: a 10 MB prompt (400, no Retry-After), capacity (429 with
Retry-After), /health, /tokenize and /detokenize, HTTPS with a certificate
made by openssl. The `openai` npm package
(installed into WORK_DIR/npm): openai_semantics.mjs.

Usage: http_front_test.py SERVER_BIN MODEL_TOOL WORK_DIR
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openai_client_test import (  # noqa: E402
    TOKEN, HERE, fail, install_openai, wait_for, Server)

AUTH = b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def read_until_closed(self, timeout=10):
        self.s.settimeout(timeout)
        try:
            while True:
                b = self.s.recv(65536)
                if not b:
                    return self.buf
                self.buf += b
        except (socket.timeout, ConnectionResetError):
            return self.buf

    def response(self, timeout=30):
        """One response with a Content-Length body: (status, headers, body)."""
        self.s.settimeout(timeout)
        while b"\r\n\r\n" not in self.buf:
            b = self.s.recv(65536)
            if not b:
                fail("connection closed before a response: %r" % self.buf)
            self.buf += b
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        while len(rest) < n:
            b = self.s.recv(65536)
            if not b:
                fail("connection closed inside a body")
            rest += b
        self.buf = rest[n:]
        return status, headers, rest[:n]

    def close(self):
        self.s.close()


def request(method, path, body=None, extra=b""):
    data = json.dumps(body).encode() if body is not None else b""
    head = b"%s %s HTTP/1.1\r\nHost: t\r\n%s%s" % (
        method.encode(), path.encode(), AUTH, extra)
    if body is not None:
        head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % (
            len(data))
    return head + b"\r\n" + data


def expect_status(raw, status, what):
    m = re.match(rb"HTTP/1.1 (\d+)", raw)
    if not m or int(m.group(1)) != status:
        fail("%s: expected %d, got %r" % (what, status, raw[:200]))


def check_framing(port):
    c = Conn(port)
    c.send(request("GET", "/health") + request("GET", "/v1/models") +
           request("GET", "/v1/models/nothing"))
    got = [c.response()[0] for _ in range(3)]
    if got != [200, 200, 404]:
        fail("pipelined answers out of order or missing: %s" % got)
    c.close()
    print("ok 3 pipelined requests in one write: 3 answers in order")
    bad = {
        "differing Content-Length": b"POST /v1/completions HTTP/1.1\r\n"
        b"Host: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "Content-Length + Transfer-Encoding": b"POST /v1/completions "
        b"HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "bad chunk size": b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
        b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        "no Host": b"GET /health HTTP/1.1\r\n\r\n",
    }
    for what, data in bad.items():
        c = Conn(port)
        c.send(data)
        raw = c.read_until_closed()  # the server closes: ends, no timeout
        expect_status(raw, 400, what)
        if b"Connection: close" not in raw:
            fail("%s: no Connection: close" % what)
        c.close()
    limits = {
        414: b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: t\r\n\r\n",
        431: b"GET /health HTTP/1.1\r\nHost: t\r\n" +
        b"".join(b"X-%d: y\r\n" % i for i in range(150)) + b"\r\n",
        413: b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
        b"Content-Length: 999999999\r\n\r\n",
    }
    for status, data in limits.items():
        c = Conn(port)
        c.send(data)
        expect_status(c.read_until_closed(), status, "limit %d" % status)
        c.close()
    c = Conn(port)  # 431 for a header too large (one long field)
    c.send(b"GET /health HTTP/1.1\r\nHost: t\r\nX: " + b"y" * 20000 +
           b"\r\n\r\n")
    expect_status(c.read_until_closed(), 431, "header bytes")
    c.close()
    c = Conn(port)  # Expect: 100-continue on a kept-alive connection
    c.send(request("GET", "/health"))
    if c.response()[0] != 200:
        fail("/health before the 100-continue request")
    body = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
    c.send(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + AUTH +
           b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
    c.s.settimeout(10)
    while b"\r\n\r\n" not in c.buf:
        c.buf += c.s.recv(4096)
    if not c.buf.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"):
        fail("no 100 Continue: %r" % c.buf[:80])
    c.buf = c.buf[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
    time.sleep(0.3)  # the body after a pause, on the same connection
    c.send(body)
    status, _, answer = c.response()
    if status != 200 or "choices" not in json.loads(answer):
        fail("100-continue request: %d %r" % (status, answer[:200]))
    c.close()
    c = Conn(port)  # a valid chunked body is read
    body = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
    c.send(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + AUTH +
           b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
           % (len(body), body))
    if c.response()[0] != 200:
        fail("chunked request body not served")
    c.close()
    print("ok framing: duplicate CL, CL+TE, bad chunk, no Host -> 400 and "
          "close; 413, 414, 431; 100-continue and chunked bodies read")


def timed_get(port, path="/v1/models"):
    t = time.monotonic()
    c = Conn(port)
    c.send(request("GET", path))
    status = c.response()[0]
    c.close()
    return status, time.monotonic() - t


def check_concurrency_and_slow_clients(port):
    # 8 slow clients sending a header line every 0.5 s (header timeout 2 s).
    slow = [Conn(port) for _ in range(8)]
    for c in slow:
        c.send(b"GET /health HTTP/1.1\r\n")
    # 64 concurrent SSE streams.
    streams = []
    for i in range(64):
        c = Conn(port)
        c.send(request("POST", "/v1/completions",
                       {"prompt": "stream %d" % i, "max_tokens": 900,
                        "stream": True}))
        streams.append(c)
    t0 = time.monotonic()
    worst = 0.0
    while time.monotonic() - t0 < 1.5:
        for c in slow:
            c.send(b"X-Slow: 1\r\n")
        status, took = timed_get(port)
        if status != 200:
            fail("/v1/models during load: %d" % status)
        worst = max(worst, took)
        time.sleep(0.5)
    if worst > 1.0:
        fail("/v1/models took %.2f s behind 64 streams and 8 slow clients"
             % worst)
    for c in streams:  # every stream is being served
        c.s.settimeout(20)
        got = b""
        while b"data: " not in got:
            b = c.s.recv(4096)
            if not b:
                break
            got += b
        if not got.startswith(b"HTTP/1.1 200") or b"data: " not in got:
            fail("a concurrent stream was not served: %r" % got[:200])
        c.close()
    for c in slow:
        expect_status(c.read_until_closed(timeout=10), 408, "slow client")
        c.close()
    print("ok 64 SSE streams + 8 slow clients: /v1/models worst %.0f ms, "
          "slow clients 408" % (worst * 1000))


def session_tokens(port, sid, prompt):
    c = Conn(port)
    c.send(request("POST", "/v1/completions",
                   {"prompt": prompt, "max_tokens": 1},
                   b"x-session-id: " + sid.encode() + b"\r\n"))
    status, headers, body = c.response()
    c.close()
    if status != 200:
        fail("session request: %d %s" % (status, body))
    usage = json.loads(body)["usage"]
    return headers["x-session-id"], int(headers["x-session-tokens"]), usage


def check_disconnect(server):
    """Returns the session it made (it stays open)."""
    port = server.port
    sid, tokens, _ = session_tokens(port, "new", "A session. ")
    for stream in (False, True):
        before = server.log().count("code=CANCELLED")
        c = Conn(port)
        c.send(request("POST", "/v1/completions",
                       {"prompt": "go on", "max_tokens": 100000,
                        "stream": stream},
                       b"x-session-id: " + sid.encode() + b"\r\n"))
        time.sleep(0.5)
        c.close()
        wait_for(lambda: server.log().count("code=CANCELLED") > before, 10,
                 "the disconnected request to be cancelled")
        line = [x for x in server.log().splitlines()
                if "code=CANCELLED" in x][-1]
        generated = int(re.search(r"generated_tokens=(\d+)", line).group(1))
        if generated >= 100000:
            fail("the disconnected request ran to the end: %s" % line)
        # The session holds what it held before: the next request adds
        # only its own tokens.
        _, after, usage = session_tokens(port, sid, ".")
        expected = tokens + usage["prompt_tokens"] + usage["completion_tokens"]
        if after != expected:
            fail("session not rolled back: %d tokens, expected %d"
                 % (after, expected))
        tokens = after
        print("ok client gone (%s): cancelled after %d tokens, session "
              "rolled back" % ("streaming" if stream else "not streaming",
                               generated))
    return sid


def curl(port, path, data=None, data_file=None, method=None):
    cmd = ["curl", "-sS", "--max-time", "60", "-D", "-", "-o", "-",
           "-H", "Authorization: Bearer " + TOKEN,
           "-H", "Content-Type: application/json"]
    if data is not None:
        cmd += ["-d", json.dumps(data)]
    if data_file is not None:
        cmd += ["--data-binary", "@" + data_file]
    if method:
        cmd += ["-X", method]
    r = subprocess.run(cmd + ["http://127.0.0.1:%d%s" % (port, path)],
                       capture_output=True, timeout=90)
    if r.returncode != 0:
        fail("curl %s: %s" % (path, r.stderr))
    out = r.stdout.decode("utf-8", "replace")
    # The last header block (after any 100 Continue).
    blocks = out.split("\r\n\r\n")
    i = 0
    while blocks[i].startswith("HTTP/1.1 100"):
        i += 1
    head, body = blocks[i], "\r\n\r\n".join(blocks[i + 1:])
    status = int(head.split()[1])
    return status, head.lower(), body


def check_curl(port, work):
    big = os.path.join(work, "big.json")
    with open(big, "w") as f:
        json.dump({"prompt": "a" * (10 << 20), "max_tokens": 4}, f)
    status, head, body = curl(port, "/v1/completions", data_file=big)
    err = json.loads(body)["error"]
    if status != 400 or err["param"] != "prompt" or "retry-after" in head:
        fail("10 MB prompt: %d %s %s" % (status, head, body[:300]))
    print("ok curl: 10 MB prompt -> 400 param=prompt code=%s, no "
          "Retry-After" % err["code"])
    status, _, body = curl(port, "/health")
    if status != 200 or json.loads(body)["status"] != "ok":
        fail("/health: %d %s" % (status, body))
    status, _, body = curl(port, "/tokenize",
                           {"content": "Hello", "with_pieces": True})
    pieces = json.loads(body)["tokens"]
    # llama.cpp's shape: a piece that is not valid UTF-8 is its byte list
    # (the byte vocabulary's space prefix is three byte tokens).
    joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str)
                      else bytes(p["piece"]) for p in pieces)
    if status != 200 or not joined.endswith(b"Hello"):
        fail("/tokenize: %d %s" % (status, body))
    status, _, body = curl(port, "/detokenize",
                           {"tokens": [p["id"] for p in pieces]})
    if (status != 200 or
            json.loads(body)["content"].encode() != joined):
        fail("/detokenize: %d %s" % (status, body))
    status, _, body = curl(port, "/detokenize", {"tokens": [-1]})
    if status != 400 or json.loads(body)["error"]["param"] != "tokens":
        fail("/detokenize bad id: %d %s" % (status, body))
    print("ok curl: /health, /tokenize (pieces), /detokenize round trip")


def check_metrics(port, work):
    """GET /metrics on the API port: served by the Beast I/O threads in the
    binary that links everything (the stack/TLS pitfall of the old
    exposer), token required, promtool-clean, counters that moved."""
    status, head, body = curl(port, "/metrics")
    if status != 200 or "text/plain; version=0.0.4" not in head:
        fail("/metrics: %d %s" % (status, head))
    m = re.search(r'^clusterkv_requests_total\{code="OK",'
                  r'rpc="http.Completions"\} (\d+)', body, re.M)
    if not m or int(m.group(1)) < 1:
        fail("/metrics has no OK http.Completions count:\n" + body[:2000])
    path = os.path.join(work, "scrape.txt")
    with open(path, "w") as f:
        f.write(body)
    if shutil.which("promtool") is None:
        fail("promtool is not installed (scripts/setup.sh: prometheus)")
    with open(path) as f:
        r = subprocess.run(["promtool", "check", "metrics"], stdin=f,
                           capture_output=True, text=True, timeout=60)
    if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
        fail("promtool check metrics: %s %s" % (r.stdout, r.stderr))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    raw.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = raw.recv(4096)
    raw.close()
    if not answer.startswith(b"HTTP/1.1 401"):
        fail("/metrics without a token: %r" % answer[:200])
    print("ok /metrics on the API port: %d OK completions, promtool clean, "
          "401 without a token" % int(m.group(1)))


def check_capacity(binary, model, work):
    """A second server: the file's context (long generations), one session
    at most, 4 connections per address."""
    server = Server(binary, model, work, ["--max-sessions", "1",
                                          "--http-max-connections-per-address",
                                          "4"])
    try:
        check_disconnect(server)  # its session holds the only slot
        status, head, body = curl(server.port, "/v1/completions",
                                  {"prompt": "x", "max_tokens": 1})
        if status != 429 or "retry-after:" not in head:
            fail("capacity: expected 429 with Retry-After, got %d %s"
                 % (status, head))
        print("ok capacity that frees up: 429 with Retry-After (%s)"
              % json.loads(body)["error"]["code"])
        # Four kept-alive connections, each proven admitted by an answer
        # (on a loaded machine an earlier client's close may not have been
        # seen yet: a 429 here is retried after a pause).
        idle = []
        deadline = time.monotonic() + 20
        while len(idle) < 4 and time.monotonic() < deadline:
            c = Conn(server.port)
            c.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, _ = c.response()
            if status == 200:
                idle.append(c)
            else:
                c.close()
                time.sleep(0.2)
        if len(idle) < 4:
            fail("could not hold 4 admitted connections from one address")
        extra = Conn(server.port)
        raw = extra.read_until_closed(timeout=5)
        expect_status(raw, 429, "5th connection from one address")
        for c in idle + [extra]:
            c.close()
        print("ok per-address cap: the 5th connection gets 429")
    finally:
        server.stop()


def check_tls(binary, model, work):
    """HTTPS with a self-signed certificate made here (openssl)."""
    key, cert = os.path.join(work, "key.pem"), os.path.join(work, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "1",
                    "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True,
                   capture_output=True, timeout=60)
    server = Server(binary, model, work, ["--tls-cert", cert,
                                          "--tls-key", key])
    try:
        base = "https://127.0.0.1:%d" % server.port
        r = subprocess.run(["curl", "-sS", "--cacert", cert, "-N",
                            "-H", "Authorization: Bearer " + TOKEN,
                            "-d", json.dumps({"prompt": "hi", "max_tokens": 3,
                                              "stream": True}),
                            base + "/v1/completions"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0 or not r.stdout.endswith("data: [DONE]\n\n"):
            fail("HTTPS stream: rc %d %r %s" % (r.returncode, r.stdout[-200:],
                                                 r.stderr))
        plain = subprocess.run(["curl", "-sS", "--max-time", "10",
                                "http://127.0.0.1:%d/health" % server.port],
                               capture_output=True, text=True, timeout=30)
        if plain.returncode == 0:
            fail("plain HTTP answered on the HTTPS port: %r" % plain.stdout)
        print("ok HTTPS: a streamed completion over TLS; plain HTTP refused")
    finally:
        server.stop()


def main():
    server_bin, model_tool, work = sys.argv[1:4]
    for tool in ("node", "npm", "curl", "openssl"):
        if shutil.which(tool) is None:
            fail(tool + " is not installed (scripts/setup.sh; node 20)")
    os.makedirs(work, exist_ok=True)
    install_openai(os.path.join(work, "npm"))
    model = os.path.join(work, "tiny.gguf")
    subprocess.run([model_tool, "make-random", "--out", model, "--layers", "2",
                    "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn",
                    "128", "--vocab", "byte", "--seed", "7"], check=True,
                   stdout=subprocess.DEVNULL, timeout=60)
    server = Server(server_bin, model, work,
                    ["--context-length", "1024", "--max-sessions", "128",
                     "--http-header-timeout-seconds", "2"])
    try:
        check_framing(server.port)
        check_concurrency_and_slow_clients(server.port)
        check_curl(server.port, work)
        check_metrics(server.port, work)
        script = os.path.join(work, "npm", "openai_semantics.mjs")
        shutil.copyfile(os.path.join(HERE, "openai_semantics.mjs"), script)
        r = subprocess.run(["node", script,
                            "http://127.0.0.1:%d/v1" % server.port, TOKEN],
                           capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stdout)
        if r.returncode != 0:
            fail("openai_semantics.mjs failed:\n%s\nserver log tail:\n%s"
                 % (r.stderr, server.log()[-3000:]))
    finally:
        server.stop()
    check_capacity(server_bin, model, work)
    check_tls(server_bin, model, work)
    print("PASS")


if __name__ == "__main__":
    main()
