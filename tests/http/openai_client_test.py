"""ctest openai_client_test: clusterkv-server's OpenAI-compatible HTTP API
(docs/http-api.md) driven by clients nobody here wrote.

Starts clusterkv-server on a tiny random model with --http-listen on an
ephemeral port and a tokens file, installs the official `openai` npm package
into WORK_DIR/npm (kept between runs: installed once per build folder), runs
openai_client.mjs (chat and completions, streaming and not, a session
continued and forked, typed errors), then checks the SSE framing with
`curl -N`. Then, on a random model with Qwen2.5's (Hermes) chat template,
openai_tools.mjs (structured outputs, the prefix cache's cached_tokens, tool
calls), whose outputs are validated here with python3-jsonschema. A missing node, npm or curl, or a failed install, fails the test.

Usage: openai_client_test.py SERVER_BIN MODEL_TOOL WORK_DIR
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

OPENAI_NPM = "openai@4.95.0"
TOKEN = "openai-client-test-token"
HERE = os.path.dirname(os.path.abspath(__file__))


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    fail("timed out waiting for " + what)


def install_openai(npm_dir):
    """`npm install` once per build folder; later runs reuse node_modules."""
    marker = os.path.join(npm_dir, "node_modules", "openai", "package.json")
    if os.path.exists(marker):
        return
    os.makedirs(npm_dir, exist_ok=True)
    with open(os.path.join(npm_dir, "package.json"), "w") as f:
        json.dump({"name": "ckv-openai-client-test", "private": True}, f)
    r = subprocess.run(["npm", "install", "--no-audit", "--no-fund",
                        "--loglevel=error", OPENAI_NPM], cwd=npm_dir,
                       capture_output=True, text=True, timeout=240)
    if r.returncode != 0 or not os.path.exists(marker):
        fail("npm install %s failed:\n%s%s" % (OPENAI_NPM, r.stdout, r.stderr))


class Server:
    def __init__(self, binary, model, work, extra_flags=()):
        tokens = os.path.join(work, "tokens")
        with open(tokens, "w") as f:
            f.write("%s alice\n" % TOKEN)
        self.log_path = os.path.join(work, "server.log")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [binary, "--model", model, "--listen", "127.0.0.1:0",
                 "--metrics-address=", "--http-listen", "127.0.0.1:0",
                 "--auth-tokens-file", tokens, "--threads", "1",
                 "--drain-grace-seconds", "0"] + list(extra_flags),
                stdout=log, stderr=subprocess.STDOUT)
        self.port = wait_for(self._port, 60, "the HTTP port")
        wait_for(lambda: "serving" in self.log(), 60, "the model to load")

    def _port(self):
        if self.proc.poll() is not None:
            fail("clusterkv-server exited:\n" + self.log())
        m = re.search(r"http listening on [0-9.]+:(\d+)", self.log())
        return int(m.group(1)) if m else None

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.returncode != 0:
            fail("clusterkv-server exit code %d:\n%s"
                 % (self.proc.returncode, self.log()))


def curl_sse(port, path, body):
    r = subprocess.run(
        ["curl", "-sS", "-N", "--max-time", "60",
         "-H", "Authorization: Bearer " + TOKEN,
         "-H", "Content-Type: application/json", "-D", "-",
         "-d", json.dumps(body), "http://127.0.0.1:%d%s" % (port, path)],
        capture_output=True, text=True, timeout=90)
    if r.returncode != 0:
        fail("curl %s: %s" % (path, r.stderr))
    # Text mode turned the header lines' CRLF into LF.
    head, _, payload = r.stdout.partition("\n\n")
    return head, payload


def check_sse(port, path, body, text_of):
    head, payload = curl_sse(port, path, dict(body, stream=True))
    if "text/event-stream" not in head:
        fail("%s: no text/event-stream content type:\n%s" % (path, head))
    if not payload.endswith("data: [DONE]\n\n"):
        fail("%s: stream does not end with data: [DONE]:\n%r" % (path, payload))
    events = payload.split("\n\n")
    if events[-1] != "":
        fail("%s: trailing bytes after the last event: %r" % (path, events[-1]))
    events = events[:-2]  # [DONE] and the empty tail
    if not events:
        fail("%s: no data events before [DONE]" % path)
    text, finish = "", None
    for e in events:
        if not e.startswith("data: ") or "\n" in e:
            fail("%s: malformed SSE event %r" % (path, e))
        chunk = json.loads(e[len("data: "):])
        text += text_of(chunk)
        finish = chunk["choices"][0]["finish_reason"] or finish
    if finish not in ("stop", "length"):
        fail("%s: no finish_reason in the stream" % path)
    _, whole = curl_sse(port, path, dict(body, stream=False))
    whole = json.loads(whole)
    expected = text_of(whole)
    if text != expected:
        fail("%s: streamed %r != non-streamed %r" % (path, text, expected))
    print("ok curl -N %s: %d events, [DONE]" % (path, len(events)))


def make_model(model_tool, path, vocab, seed, extra=()):
    subprocess.run([model_tool, "make-random", "--out", path, "--layers", "2",
                    "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn",
                    "128", "--vocab", vocab, "--seed", str(seed)]
                   + list(extra), check=True, stdout=subprocess.DEVNULL,
                   timeout=60)


def run_node(work, name, port, timeout):
    """Copies tests/http/NAME next to node_modules and runs it."""
    script = os.path.join(work, "npm", name)
    shutil.copyfile(os.path.join(HERE, name), script)
    return subprocess.run(["node", script, "http://127.0.0.1:%d/v1" % port,
                           TOKEN], capture_output=True, text=True,
                          timeout=timeout)


def run_tools(server_bin, model_tool, work):
    """openai_tools.mjs on a random model with Qwen2.5's (Hermes) template
    and 32-token prefix-cache blocks; its outputs validated here."""
    import jsonschema  # python3-jsonschema; missing: the test fails
    template = os.path.join(HERE, "..", "fixtures", "chat",
                            "Qwen-Qwen2.5-7B-Instruct.jinja")
    model = os.path.join(work, "tools.gguf")
    make_model(model_tool, model, "byte-chatml", 9,
               ["--chat-template", template])
    server = Server(server_bin, model, work,
                    ["--prefix-cache-block-tokens", "32"])
    try:
        r = run_node(work, "openai_tools.mjs", server.port, 180)
        checked = 0
        for line in r.stdout.splitlines():
            if not line.startswith("validate "):
                print(line)
                continue
            item = json.loads(line[len("validate "):])
            try:
                jsonschema.validate(item["value"], item["schema"])
            except jsonschema.ValidationError as e:
                fail("output does not validate: %s\n%s" % (item["value"], e))
            checked += 1
        if r.returncode != 0:
            fail("openai_tools.mjs failed:\n%s\nserver log:\n%s"
                 % (r.stderr, server.log()))
        if checked < 5:
            fail("only %d outputs validated" % checked)
        print("ok %d outputs validate with python3-jsonschema" % checked)
    finally:
        server.stop()


def main():
    server_bin, model_tool, work = sys.argv[1:4]
    for tool in ("node", "npm", "curl"):
        if shutil.which(tool) is None:
            fail(tool + " is not installed (scripts/setup.sh; node 20)")
    os.makedirs(work, exist_ok=True)
    install_openai(os.path.join(work, "npm"))
    model = os.path.join(work, "tiny.gguf")
    make_model(model_tool, model, "byte", 7)
    server = Server(server_bin, model, work)
    try:
        r = run_node(work, "openai_client.mjs", server.port, 120)
        sys.stdout.write(r.stdout)
        if r.returncode != 0:
            fail("openai_client.mjs failed:\n%s\nserver log:\n%s"
                 % (r.stderr, server.log()))
        body = {"max_tokens": 6, "temperature": 0}
        check_sse(server.port, "/v1/chat/completions",
                  dict(body, messages=[{"role": "user", "content": "Hi"}]),
                  lambda c: (c["choices"][0].get("delta")
                             or c["choices"][0].get("message")
                             or {}).get("content") or "")
        check_sse(server.port, "/v1/completions",
                  dict(body, prompt="Once upon a time"),
                  lambda c: c["choices"][0]["text"])
    finally:
        server.stop()
    run_tools(server_bin, model_tool, work)
    print("PASS")


if __name__ == "__main__":
    main()
