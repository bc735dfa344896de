"""Fixtures of the clusterkv package tests: a tiny random-weight model made
with `clusterkv-model make-random` and real `clusterkv-server` processes on
ephemeral loopback ports (one plain, one with TLS and bearer tokens).

Options: --server-bin, --model-tool (default: the repository's build/).
The tests import the *installed* package; run_installed.py installs it into
a temporary venv first (ctest: python_client_test).
"""

import os
import re
import signal
import subprocess
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
EXAMPLES = os.path.join(REPO, "client", "python", "examples")
TOKEN = "tok-py-5d1e9a"
MAX_PROMPT_TOKENS = 4096


def pytest_addoption(parser):
    parser.addoption("--server-bin", default=os.path.join(
        REPO, "build", "server", "clusterkv-server"))
    parser.addoption("--model-tool", default=os.path.join(
        REPO, "build", "model", "clusterkv-model"))


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError("timed out waiting for " + what)


class ServerProcess:
    """clusterkv-server on 127.0.0.1:0; `address` once it serves."""

    def __init__(self, binary, model, workdir, name, extra=()):
        self.log_path = os.path.join(workdir, name + ".log")
        self.name = name
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [binary, "--model", model, "--listen", "127.0.0.1:0",
                 "--metrics-address=", "--threads", "1",
                 "--drain-grace-seconds", "0", *extra],
                stdout=log, stderr=subprocess.STDOUT)
        try:
            port = wait_for(self._port, 60, name + " to listen")
            wait_for(lambda: "serving" in self.log(), 60, name + " to load")
        except Exception:
            self.stop()
            raise
        self.address = "127.0.0.1:%d" % port

    def _port(self):
        if self.proc.poll() is not None:
            raise RuntimeError("%s exited: %s" % (self.name, self.log()))
        m = re.search(r"listening on [0-9.]+:(\d+)", self.log())
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


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("clusterkv_py"))


@pytest.fixture(scope="session")
def model(request, workdir):
    """A 2-layer random model with the byte vocabulary (one token a byte)."""
    path = os.path.join(workdir, "tiny.gguf")
    subprocess.run([request.config.getoption("--model-tool"), "make-random",
                    "--out", path, "--layers", "2", "--dim", "64", "--heads",
                    "4", "--kv-heads", "2", "--ffn", "128", "--vocab", "byte",
                    "--seed", "7"], check=True, stdout=subprocess.DEVNULL,
                   timeout=120)
    return path


@pytest.fixture(scope="session")
def server(request, model, workdir):
    s = ServerProcess(request.config.getoption("--server-bin"), model, workdir,
                      "server", ["--max-prompt-tokens", str(MAX_PROMPT_TOKENS),
                                 "--policy", "clusterkv", "--budget", "64",
                                 "--max-sessions", "64"])
    yield s
    s.stop()


@pytest.fixture(scope="session")
def certificate(workdir):
    """A self-signed certificate for 127.0.0.1/localhost: (cert, key) paths."""
    cert = os.path.join(workdir, "server.crt")
    key = os.path.join(workdir, "server.key")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
         "2", "-subj", "/CN=localhost", "-keyout", key, "-out", cert,
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        timeout=60)
    return cert, key


@pytest.fixture(scope="session")
def secure_server(request, model, workdir, certificate):
    """TLS and a bearer token (tenant "alice")."""
    tokens = os.path.join(workdir, "tokens.txt")
    with open(tokens, "w") as f:
        f.write("%s alice\n" % TOKEN)
    cert, key = certificate
    s = ServerProcess(request.config.getoption("--server-bin"), model, workdir,
                      "secure", ["--tls-cert", cert, "--tls-key", key,
                                 "--auth-tokens-file", tokens])
    yield s
    s.stop()
