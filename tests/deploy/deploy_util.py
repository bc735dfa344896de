"""Helpers of the deployment tests: free ports, a tiny model, clusterkv-server
and nginx processes run as the current user in a temporary directory, and a
raw gRPC client built from the proto with protoc (python3-grpcio,
python3-protobuf)."""

import importlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DEPLOY = os.path.join(REPO, "deploy")
SERVICE = "/clusterkv.v1.ClusterKv/"


def free_port():
    """A TCP port that was free a moment ago (bind 127.0.0.1:0, read, close)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tiny_model(model_tool, path):
    subprocess.run([model_tool, "make-random", "--out", path, "--layers", "2",
                    "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn",
                    "128", "--vocab", "byte", "--seed", "7"],
                   check=True, stdout=subprocess.DEVNULL, timeout=60)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError("timed out waiting for " + what)


class Server:
    """One clusterkv-server on an ephemeral gRPC port (and, with http, an
    ephemeral --http-listen port); its log in a file."""

    def __init__(self, binary, model, workdir, name, extra=(), http=False):
        self.name = name
        self.log_path = os.path.join(workdir, name + ".log")
        self.metrics_port = free_port()
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "--model", model, "--listen", "127.0.0.1:0",
             "--metrics-address", "127.0.0.1:%d" % self.metrics_port,
             "--threads", "1", "--drain-grace-seconds", "0",
             *(["--http-listen", "127.0.0.1:0"] if http else []), *extra],
            stdout=self._log, stderr=subprocess.STDOUT)
        self.port = wait_for(self._listening_port, 30, name + " to listen")
        wait_for(lambda: "serving" in self.log(), 30, name + " to load")
        self.address = "127.0.0.1:%d" % self.port
        self.http_address = None
        if http:
            m = wait_for(lambda: re.search(r"http listening on [0-9.]+:(\d+)",
                                           self.log()), 30, name + " http")
            self.http_address = "127.0.0.1:%s" % m.group(1)

    def _listening_port(self):
        if self.proc.poll() is not None:
            raise RuntimeError("%s exited: %s" % (self.name, self.log()))
        m = re.search(r"listening on [0-9.]+:(\d+)", self.log())
        return int(m.group(1)) if m else None

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def scrape(self):
        url = "http://127.0.0.1:%d/metrics" % self.metrics_port
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def nginx_config(upstreams, listen_port, workdir, http_upstreams=(),
                 http_port=None):
    """deploy/nginx/clusterkv.conf with its example ports replaced: the gRPC
    upstream and listen port, and the HTTP API's (docs/http-api.md)."""
    with open(os.path.join(DEPLOY, "nginx", "clusterkv.conf")) as f:
        conf = f.read()
    if ("listen 127.0.0.1:8080 http2;" not in conf or
            "listen 127.0.0.1:8090;" not in conf):
        raise AssertionError("unexpected deploy/nginx/clusterkv.conf layout")

    def replace_servers(conf, name, addresses):
        block = re.search(r"upstream %s \{\n(.*?)\n  \}" % name, conf, re.S)
        servers = re.findall(r"^ *server 127\.0\.0\.1:\d+ (.*);$",
                             block.group(1), re.M)
        if len(servers) != 2:
            raise AssertionError("unexpected upstream %s layout" % name)
        lines = "".join("    server %s %s;\n" % (u, servers[0])
                        for u in addresses)
        body = re.sub(r"(^ *server 127\.0\.0\.1:\d+ .*;\n)+", lines,
                      block.group(1) + "\n", flags=re.M)
        return conf[:block.start(1)] + body.rstrip("\n") + conf[block.end(1):]

    conf = replace_servers(conf, "clusterkv", upstreams)
    conf = replace_servers(conf, "clusterkv_http",
                           http_upstreams or upstreams)
    conf = conf.replace("listen 127.0.0.1:8080", "listen 127.0.0.1:%d" %
                        listen_port)
    conf = conf.replace("listen 127.0.0.1:8090;", "listen 127.0.0.1:%d;" %
                        (http_port or free_port()))
    path = os.path.join(workdir, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    return path


class Nginx:
    def __init__(self, upstreams, workdir, http_upstreams=()):
        self.port = free_port()
        self.http_port = free_port()
        conf = nginx_config(upstreams, self.port, workdir, http_upstreams,
                            self.http_port)
        self.log_path = os.path.join(workdir, "nginx.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [shutil.which("nginx"), "-p", workdir, "-c", conf, "-e", "stderr"],
            stdout=self._log, stderr=subprocess.STDOUT)
        wait_for(self._accepting, 20, "nginx to listen")
        self.address = "127.0.0.1:%d" % self.port
        self.http_address = "127.0.0.1:%d" % self.http_port

    def _accepting(self):
        if self.proc.poll() is not None:
            with open(self.log_path) as f:
                raise RuntimeError("nginx exited: " + f.read())
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
            return True
        except OSError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful shutdown
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def load_proto(workdir):
    """clusterkv_pb2 generated with protoc into workdir, imported."""
    out = os.path.join(workdir, "pb")
    os.makedirs(out, exist_ok=True)
    subprocess.run(["protoc", "-I", os.path.join(REPO, "proto"),
                    "--python_out=" + out, "clusterkv/v1/clusterkv.proto"],
                   check=True, timeout=60)
    sys.path.insert(0, out)
    return importlib.import_module("clusterkv.v1.clusterkv_pb2")


class Client:
    """Calls ClusterKv methods with explicit x-session-id metadata."""

    def __init__(self, grpc, pb, address):
        self.grpc = grpc
        self.pb = pb
        self.channel = grpc.insecure_channel(address)

    def close(self):
        self.channel.close()

    def _text(self, message_type, text):
        """text as the field's type wants it (string or UTF-8 bytes)."""
        field = message_type.DESCRIPTOR.fields_by_name["text"]
        return text.encode() if field.type == field.TYPE_BYTES else text

    def _md(self, route):
        return (("x-session-id", route),) if route else None

    def unary(self, method, request, response_type, route=None):
        call = self.channel.unary_unary(
            SERVICE + method, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString)
        return call(request, metadata=self._md(route), timeout=30)

    def create(self, routing_key):
        return self.unary("CreateSession", self.pb.CreateSessionRequest(),
                          self.pb.SessionInfo, routing_key)

    def get(self, session_id):
        return self.unary("GetSession",
                          self.pb.GetSessionRequest(session_id=session_id),
                          self.pb.SessionInfo, session_id)

    def fork(self, session_id):
        return self.unary("ForkSession",
                          self.pb.ForkSessionRequest(session_id=session_id),
                          self.pb.SessionInfo, session_id)

    def prefill(self, session_id, text):
        call = self.channel.stream_stream(
            SERVICE + "Prefill",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=self.pb.PrefillResponse.FromString)
        req = self.pb.PrefillRequest(
            session_id=session_id, text=self._text(self.pb.PrefillRequest, text))
        events = list(call(iter([req]), metadata=self._md(session_id),
                           timeout=60))
        return events[-1].summary

    def decode(self, session_id, text, max_tokens=4):
        call = self.channel.unary_stream(
            SERVICE + "Decode",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=self.pb.DecodeResponse.FromString)
        req = self.pb.DecodeRequest(
            session_id=session_id, text=self._text(self.pb.DecodeRequest, text),
            sampling=self.pb.SamplingParams(max_tokens=max_tokens))
        events = list(call(req, metadata=self._md(session_id), timeout=60))
        return events[-1].summary

    def code_of(self, fn, *args):
        """The grpc.StatusCode name of fn(*args) ("OK" when it succeeds)."""
        try:
            fn(*args)
            return "OK"
        except self.grpc.RpcError as e:
            self.last_error = e.details()
            return e.code().name
