#!/usr/bin/python3
"""Smoke test of a built clusterkv-server image, run with buildah (chroot
isolation, host network; run as root, after deploy/build-images.sh):

    python3 deploy/smoke-image.py [IMAGE]     (default clusterkv-server:cpu)

Checks, in order, and exits 1 at the first that fails:
  1. the image's user is non-root (its USER, and `id -u` inside);
  2. it holds no compiler (no gcc/g++/cc/c++/cpp/as/ld/clang/nvcc on PATH,
     no cc1/cc1plus, no gcc, g++, cpp, binutils or clang package installed);
  3. its ENTRYPOINT and CMD (--model=/models/model.gguf), with ports moved
     to free ones on 127.0.0.1 and --http-listen added, serve the demo model
     models/kjv-llama.gguf of this checkout, mounted read-only there;
  4. from outside: gRPC health SERVING, one Generate (tokens streamed, a
     summary), one HTTP chat completion, /metrics scraped (the Generate and
     the chat completion counted in clusterkv_requests_total);
  5. SIGTERM while a long Generate streams drains: health turns
     NOT_SERVING, a new Generate gets UNAVAILABLE, the stream ends (within
     --drain-grace-seconds), the process exits 0.
Prints the image's size and each step's time. Needs python3-grpcio,
python3-protobuf and protoc (scripts/setup.sh).
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "deploy"))
import deploy_util as du  # noqa: E402

import grpc  # noqa: E402

MODEL_DIR = os.path.join(ROOT, "models")
MODEL = "kjv-llama.gguf"
COMPILERS = ["gcc", "g++", "cc", "c++", "cpp", "as", "ld", "clang",
             "clang++", "nvcc", "x86_64-linux-gnu-gcc-12",
             "x86_64-linux-gnu-g++-12"]
COMPILER_PACKAGES = re.compile(
    r"^(gcc(-\d+)?|g\+\+(-\d+)?|cpp(-\d+)?|binutils.*|clang.*|"
    r"build-essential|cuda-nvcc.*|libgcc-\d+-dev)$")
HEALTH = {1: "SERVING", 2: "NOT_SERVING"}
T0 = time.monotonic()


def step(message):
    print("[%6.1f s] %s" % (time.monotonic() - T0, message), flush=True)


def fail(message):
    print("smoke-image: FAIL: " + message, file=sys.stderr, flush=True)
    sys.exit(1)


def buildah(*args, check=True, timeout=120):
    r = subprocess.run(["buildah", *args], capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        fail("buildah %s: %s" % (" ".join(args), r.stderr.strip()))
    return r


def run_in(ctr, *cmd):
    return buildah("run", "--isolation", "chroot", "--network", "host", ctr,
                   "--", *cmd, check=False)


def image_size(image):
    """buildah's size of the image ("193 MB"), or None when it is absent."""
    out = json.loads(buildah("images", "--json", image, check=False).stdout
                     or "[]")
    return out[0]["size"] if out else None


def tree_bytes(root):
    """Bytes of the regular files under root (the unpacked image)."""
    total = 0
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total


def health(channel):
    """grpc.health.v1 Check of the server ("" service): the status number
    (1 SERVING, 2 NOT_SERVING) or the gRPC code's name. Hand-encoded: the
    request is empty, the response is field 1 as a varint."""
    call = channel.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=lambda _: b"",
                               response_deserializer=lambda b: b)
    try:
        raw = call(None, timeout=5)
    except grpc.RpcError as e:
        return e.code().name
    return raw[1] if len(raw) >= 2 and raw[0] == 0x08 else 0


def fresh_health(address):
    with grpc.insecure_channel(address) as channel:
        return health(channel)


def check_user_and_compilers(image, ctr):
    cfg = json.loads(buildah("inspect", "--type", "image", image).stdout)
    user = cfg["OCIv1"]["config"].get("User", "")
    if user.split(":")[0] in ("", "0", "root"):
        fail("image user is %r (root)" % user)
    uid = run_in(ctr, "id", "-u").stdout.strip()
    if not uid.isdigit() or int(uid) == 0:
        fail("id -u inside the image: %r" % uid)
    step("user: image USER %s, id -u inside = %s" % (user, uid))
    found = run_in(ctr, "sh", "-c", " ".join(
        "command -v %s;" % c for c in COMPILERS)).stdout.split()
    mnt = buildah("mount", ctr).stdout.strip()
    try:
        cc1 = [os.path.join(d, f) for d, _, files in
               os.walk(os.path.join(mnt, "usr", "lib", "gcc")) for f in files
               if f in ("cc1", "cc1plus")]
        pkgs = subprocess.run(
            ["dpkg-query", "--admindir=" + os.path.join(mnt, "var/lib/dpkg"),
             "-W", "-f", "${Package}\n"], capture_output=True, text=True,
            check=True).stdout.split()
        unpacked = tree_bytes(mnt)
    finally:
        buildah("umount", ctr)
    bad_pkgs = [p for p in pkgs if COMPILER_PACKAGES.match(p)]
    if found or cc1 or bad_pkgs:
        fail("compiler in the image: %s" % (found + cc1 + bad_pkgs))
    step("no compiler: none of %s on PATH, no cc1/cc1plus, none of %d "
         "packages a compiler or binutils" % ("/".join(COMPILERS[:7]),
                                              len(pkgs)))
    step("unpacked: %.1f MB in files" % (unpacked / 1e6))
    return cfg, unpacked


def start_server(ctr, cfg, workdir):
    grpc_port, metrics_port, http_port = (du.free_port() for _ in range(3))
    entry = cfg["OCIv1"]["config"].get("Entrypoint") or []
    if not entry or os.path.basename(entry[0]) != "clusterkv-server":
        fail("entrypoint is %r" % entry)
    # The image's CMD (--model=/models/model.gguf), the demo model bound
    # there: buildah 1.28 mounts the image's VOLUME /models over a bind
    # mount of /models itself, not over one of a file in it.
    default_args = cfg["OCIv1"]["config"].get("Cmd") or []
    cmd = [*entry, *default_args,
           "--listen=127.0.0.1:%d" % grpc_port,
           "--metrics-address=127.0.0.1:%d" % metrics_port,
           "--http-listen=127.0.0.1:%d" % http_port,
           "--threads=2", "--drain-grace-seconds=5"]
    log_path = os.path.join(workdir, "server.log")
    log = open(log_path, "w")
    proc = subprocess.Popen(
        ["buildah", "run", "--isolation", "chroot", "--network", "host",
         "-v", os.path.join(MODEL_DIR, MODEL) + ":/models/model.gguf:ro", ctr, "--", *cmd],
        stdout=log, stderr=subprocess.STDOUT)
    step("started in the image: " + " ".join(cmd))
    return proc, log_path, grpc_port, metrics_port, http_port


def server_pid(root_pid):
    """The host pid of clusterkv-server among root_pid's descendants."""
    children = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append((int(p), comm))
    todo = [root_pid]
    while todo:
        for pid, comm in children.get(todo.pop(), []):
            if comm.startswith("clusterkv-serv"):
                return pid
            todo.append(pid)
    return None


def check_healthcheck(ctr, cfg, grpc_port):
    """The image's HEALTHCHECK command, run inside the image against the
    smoke's port, exits 0 while the server is SERVING."""
    hc = (cfg.get("Docker", {}).get("config", {}).get("Healthcheck") or {})
    test = hc.get("Test") or []
    if test[:1] != ["CMD"] or "127.0.0.1:50051" not in test:
        fail("image HEALTHCHECK is %r (build with --format docker)" % hc)
    cmd = [a.replace("127.0.0.1:50051", "127.0.0.1:%d" % grpc_port)
           for a in test[1:]]
    r = run_in(ctr, *cmd)
    if r.returncode != 0:
        fail("HEALTHCHECK %s exited %d: %s" % (cmd, r.returncode,
                                               r.stdout + r.stderr))
    step("HEALTHCHECK in the image (%s) exits 0" % " ".join(cmd))


def generate(channel, pb):
    call = channel.unary_stream(
        du.SERVICE + "Generate",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.DecodeResponse.FromString)
    req = pb.GenerateRequest(prompt=b"In the beginning",
                             sampling=pb.SamplingParams(max_tokens=8))
    events = list(call(req, timeout=60))
    tokens = [e for e in events if e.WhichOneof("event") == "token"]
    summary = events[-1].summary if events else None
    if not tokens or summary is None or summary.generated_tokens < 1:
        fail("Generate returned %d tokens, summary %s" % (len(tokens),
                                                          summary))
    return summary


def http_json(url, body=None):
    req = urllib.request.Request(
        url, data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        fail("%s: HTTP %d %s" % (url, e.code, e.read().decode()[:500]))


def chat(http_port):
    base = "http://127.0.0.1:%d/v1" % http_port
    _, models = http_json(base + "/models")
    model = models["data"][0]["id"]
    status, out = http_json(base + "/chat/completions", {
        "model": model, "max_tokens": 8, "messages": [
            {"role": "user", "content": "Who made the heaven and the earth?"}]})
    message = out["choices"][0]["message"]
    if (status != 200 or out.get("object") != "chat.completion" or
            message.get("role") != "assistant" or
            out["usage"]["completion_tokens"] < 1):
        fail("chat completion: %d %s" % (status, out))
    return out


def drain(proc, pid, channel, pb, log_path):
    """SIGTERM while a long Generate streams: health leaves SERVING, a new
    call is refused UNAVAILABLE, the running stream ends, the process exits
    0."""
    first_token = threading.Event()
    stream = {"tokens": 0, "end": None}

    def long_generate():
        call = channel.unary_stream(
            du.SERVICE + "Generate",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.DecodeResponse.FromString)
        req = pb.GenerateRequest(prompt=b"And God said", sampling=pb.SamplingParams(
            max_tokens=100000, ignore_eos=True))
        try:
            for e in call(req, timeout=60):
                if e.WhichOneof("event") == "token":
                    stream["tokens"] += 1
                    first_token.set()
                else:
                    stream["end"] = "summary, finish %s" % pb.FinishReason.Name(
                        e.summary.finish_reason)
        except grpc.RpcError as e:
            stream["end"] = e.code().name
        first_token.set()

    t = threading.Thread(target=long_generate)
    t.start()
    if not first_token.wait(60) or stream["tokens"] == 0:
        fail("the long Generate streamed no token: %s" % stream)
    os.kill(pid, signal.SIGTERM)
    t_term = time.monotonic()
    states, refused = [], None
    while proc.poll() is None and time.monotonic() - t_term < 30:
        h = health(channel)
        if not states or states[-1] != h:
            states.append(h)
        if h == 2 and refused is None:
            try:
                generate(channel, pb)
                refused = "OK"
            except grpc.RpcError as e:
                refused = e.code().name
        time.sleep(0.05)
    t.join(30)
    if proc.poll() is None:
        fail("still running 30 s after SIGTERM")
    if proc.returncode != 0:
        fail("exit status %d after SIGTERM; log:\n%s" % (
            proc.returncode, open(log_path).read()))
    if 2 not in states:
        fail("health never NOT_SERVING while draining: %s" % states)
    if refused != "UNAVAILABLE":
        fail("a new Generate while draining got %s" % refused)
    if stream["end"] is None:
        fail("the running stream did not end: %s" % stream)
    step("SIGTERM (pid %d) during a Generate stream: health %s, a new "
         "Generate %s, the stream ended with %s after %d tokens, exit status "
         "0 after %.1f s" % (pid, " -> ".join(HEALTH.get(h, str(h)) for h in states),
                             refused,
                             stream["end"], stream["tokens"],
                             time.monotonic() - t_term))


def requests_total(text):
    """{(labels text): value} of clusterkv_requests_total."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r"^clusterkv_requests_total\{([^}]*)\} (\S+)$", text, re.M)}


def main():
    image = sys.argv[1] if len(sys.argv) > 1 else "clusterkv-server:cpu"
    if not os.path.exists(os.path.join(MODEL_DIR, MODEL)):
        fail("demo model %s missing" % os.path.join(MODEL_DIR, MODEL))
    size = image_size(image)
    if size is None:
        fail("no image %s (deploy/build-images.sh)" % image)
    step("image %s: %s (buildah images)" % (image, size))
    ctr = buildah("from", "--pull-never", "--name",
                  "ckv-smoke-%d" % os.getpid(), image).stdout.strip()
    proc = None
    workdir = tempfile.mkdtemp(prefix="ckv-smoke-")
    try:
        cfg, unpacked = check_user_and_compilers(image, ctr)
        pb = du.load_proto(workdir)
        proc, log_path, grpc_port, metrics_port, http_port = start_server(
            ctr, cfg, workdir)
        channel = grpc.insecure_channel("127.0.0.1:%d" % grpc_port)
        try:
            # A fresh channel per try: a failed one backs off for seconds.
            du.wait_for(lambda: proc.poll() is not None or
                        fresh_health("127.0.0.1:%d" % grpc_port) == 1, 120,
                        "health SERVING")
        except TimeoutError as e:
            fail("%s; log:\n%s" % (e, open(log_path).read()))
        if proc.poll() is not None:
            fail("server exited %d; log:\n%s" % (proc.returncode,
                                                 open(log_path).read()))
        step("gRPC health SERVING on 127.0.0.1:%d" % grpc_port)
        check_healthcheck(ctr, cfg, grpc_port)
        s = generate(channel, pb)
        step("Generate: %d tokens, finish %s, text %r" % (
            s.generated_tokens, pb.FinishReason.Name(s.finish_reason),
            s.text))
        c = chat(http_port)
        step("HTTP chat completion: %d tokens, finish %s, content %r" % (
            c["usage"]["completion_tokens"], c["choices"][0]["finish_reason"],
            c["choices"][0]["message"]["content"]))
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" %
                                    metrics_port, timeout=10) as r:
            metrics = r.read().decode()
        counts = requests_total(metrics)
        families = sorted(set(re.findall(r"^# TYPE (clusterkv_\w+)", metrics,
                                         re.M)))
        generate_ok = sum(v for k, v in counts.items() if "Generate" in k)
        http_ok = sum(v for k, v in counts.items() if "chat" in k.lower())
        if generate_ok < 1 or http_ok < 1:
            fail("/metrics: clusterkv_requests_total does not count the "
                 "calls: %s" % counts)
        step("/metrics: %d clusterkv_ families; requests_total %s" % (
            len(families), counts))
        pid = server_pid(proc.pid)
        if pid is None:
            fail("no clusterkv-server process under buildah run")
        drain(proc, pid, channel, pb, log_path)
        channel.close()
        log_tail = open(log_path).read().strip().splitlines()[-3:]
        print("server log (last lines):\n  " + "\n  ".join(log_tail))
        print("smoke-image: PASS (%s, %s, %.1f MB unpacked, %.1f s)" % (
            image, size, unpacked / 1e6, time.monotonic() - T0))
    finally:
        if proc is not None and proc.poll() is None:
            pid = server_pid(proc.pid)
            if pid:
                os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.wait()
        buildah("rm", ctr, check=False)


if __name__ == "__main__":
    main()
