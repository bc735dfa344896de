"""Loopback multi-replica test of session affinity (deploy/README.md).

Two clusterkv-server processes behind nginx running deploy/nginx/clusterkv.conf
(ports replaced): sessions created and used through the proxy stay on one
replica each (forks on their parent's), and stopping one replica fails only
its sessions, with UNAVAILABLE, never an answer from the other replica.

Usage: test_affinity.py CLUSTERKV_SERVER CLUSTERKV_MODEL [CLUSTERKV]
Exit 77 (ctest: skipped) when nginx, protoc or python3-grpcio is missing.
"""

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_util as du  # noqa: E402

SKIP = 77
SERVER_BIN = MODEL_TOOL = CLIENT_BIN = None


def missing_tools():
    missing = [t for t in ("nginx", "protoc") if shutil.which(t) is None]
    for module in ("grpc", "google.protobuf"):
        try:
            __import__(module)
        except ImportError:
            missing.append("python module " + module)
    return missing


class AffinityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="ckv_affinity_")
        work = cls.tmp.name
        import grpc
        cls.pb = du.load_proto(work)
        model = os.path.join(work, "tiny.gguf")
        du.make_tiny_model(MODEL_TOOL, model)
        cls.replicas = []
        cls.nginx = None
        try:
            cls.replicas = [du.Server(SERVER_BIN, model, work, "replica%d" % i,
                                      http=True) for i in range(2)]
            cls.nginx = du.Nginx([r.address for r in cls.replicas], work,
                                 [r.http_address for r in cls.replicas])
        except Exception:
            cls.tearDownClass()
            raise
        cls.proxy = du.Client(grpc, cls.pb, cls.nginx.address)
        cls.direct = [du.Client(grpc, cls.pb, r.address) for r in cls.replicas]

    @classmethod
    def tearDownClass(cls):
        for c in getattr(cls, "direct", []) + [getattr(cls, "proxy", None)]:
            if c is not None:
                c.close()
        if cls.nginx is not None:
            cls.nginx.stop()
        for r in cls.replicas:
            r.stop()
        cls.tmp.cleanup()

    def owner(self, session_id):
        """Index of the one replica that knows the session (asserted)."""
        codes = [c.code_of(c.get, session_id) for c in self.direct]
        self.assertEqual(sorted(codes), ["NOT_FOUND", "OK"],
                         "session %s: %s" % (session_id, codes))
        return codes.index("OK")

    def create_until_both_replicas_hold_two(self):
        sessions = {0: [], 1: []}
        for _ in range(60):
            key = secrets.token_hex(8)
            info = self.proxy.create(key)
            self.assertTrue(info.session_id.startswith(key + "."),
                            info.session_id)
            sessions[self.owner(info.session_id)].append(info.session_id)
            if min(len(v) for v in sessions.values()) >= 2:
                return sessions
        self.fail("60 random routing keys all hashed to one replica: %s" %
                  sessions)

    def use_through_proxy(self, sid, i):
        summary = self.proxy.prefill(sid, "Document %d: the quick brown fox "
                                     "jumps over the lazy dog." % i)
        self.assertGreater(summary.session_tokens, 0)
        self.assertGreater(self.proxy.decode(sid, " Question?").generated_tokens,
                           0)
        child = self.proxy.fork(sid).session_id
        self.assertEqual(child.split(".")[0], sid.split(".")[0])
        self.assertEqual(self.proxy.decode(child, " Why?").session_tokens,
                         self.proxy.get(child).tokens)
        return child

    def http_post(self, path, body, headers):
        """(status, headers, JSON body) of an HTTP API call via the proxy."""
        req = urllib.request.Request(
            "http://%s%s" % (self.nginx.http_address, path),
            data=json.dumps(body).encode(), method="POST",
            headers=dict(headers, **{"Content-Type": "application/json"}))
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.headers, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.headers, json.loads(e.read())

    def test_http_api_sessions_stay_on_one_replica(self):
        """OpenAI-style HTTP requests (docs/http-api.md) through the proxy:
        x-session-id "KEY.new" creates a session; later HTTP requests naming
        it (continued or forked) reach the replica that holds it (a wrong
        replica would answer 404), for keys on both replicas."""
        owners = set()
        for _ in range(12):
            key = secrets.token_hex(8)
            status, headers, body = self.http_post(
                "/v1/completions", {"prompt": "A document.", "max_tokens": 2},
                {"x-session-id": key + ".new"})
            self.assertEqual(status, 200, body)
            sid = headers["x-session-id"]
            self.assertTrue(sid.startswith(key + "."), sid)
            replica = self.owner(sid)
            owners.add(replica)
            before = self.direct[replica].get(sid).tokens
            for _ in range(2):
                status, headers, body = self.http_post(
                    "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "Why?"}],
                     "max_tokens": 2}, {"x-session-id": sid})
                self.assertEqual(status, 200, body)
                after = int(headers["x-session-tokens"])
                self.assertEqual(after, before + body["usage"]["total_tokens"])
                before = after
            status, headers, body = self.http_post(
                "/v1/completions", {"prompt": " And?", "max_tokens": 1},
                {"x-session-id": sid, "x-session-fork": "1"})
            self.assertEqual(status, 200, body)
            self.assertEqual(self.owner(headers["x-session-id"]), replica)
            if len(owners) == 2:
                return
        self.fail("12 random routing keys all hashed to one replica")

    def test_sessions_stay_on_one_replica_and_fail_only_with_it(self):
        sessions = self.create_until_both_replicas_hold_two()
        for replica, ids in sessions.items():
            for i, sid in enumerate(list(ids)):
                child = self.use_through_proxy(sid, i)
                self.assertEqual(self.owner(child), replica)
                ids.append(child)
        # The per-call log: every proxied call of a session ran on its
        # replica; the other one saw only this test's direct GetSession probes.
        for replica, ids in sessions.items():
            for sid in ids:
                mine = self.calls_logged(replica, sid)
                self.assertIn("rpc=Decode code=OK", mine)
                self.assertEqual(set(self.calls_logged(1 - replica, sid)),
                                 {"rpc=GetSession code=NOT_FOUND"})
        # A malformed routing key is refused, not silently replaced.
        self.assertEqual(self.proxy.code_of(self.proxy.create, "bad key!"),
                         "INVALID_ARGUMENT")
        # An id unknown to the replica its key routes to: NOT_FOUND.
        bogus = sessions[1][0].split(".")[0] + ".s-0000000000000000ffff"
        self.assertEqual(self.proxy.code_of(self.proxy.get, bogus),
                         "NOT_FOUND")

        self.replicas[0].stop()
        for sid in sessions[0]:
            for _ in range(3):  # never rehashed onto the other replica
                self.assertEqual(self.proxy.code_of(self.proxy.get, sid),
                                 "UNAVAILABLE", sid)
            self.assertEqual(
                self.proxy.code_of(self.proxy.decode, sid, " More?"),
                "UNAVAILABLE", sid)
            self.assertEqual(self.proxy.last_error,
                             "clusterkv replica unavailable")
        for sid in sessions[1]:
            self.assertEqual(self.owner_after_stop(sid), "OK")
            self.assertGreater(
                self.proxy.decode(sid, " Again?").generated_tokens, 0)
        # New sessions: created on the live replica or UNAVAILABLE (the
        # client retries with a fresh key), nothing else.
        codes = [self.proxy.code_of(self.proxy.create, secrets.token_hex(8))
                 for _ in range(8)]
        self.assertTrue(set(codes) <= {"OK", "UNAVAILABLE"}, codes)

    def test_clusterkv_client_through_the_proxy(self):
        """The real client: sessions it creates through the proxy (with a
        routing key of its own) are usable through the proxy."""
        if not CLIENT_BIN:
            self.skipTest("no clusterkv client binary given")
        doc = os.path.join(self.tmp.name, "doc.txt")
        with open(doc, "w") as f:
            f.write("The quick brown fox jumps over the lazy dog. " * 4)
        for _ in range(6):
            sid = self.cli("session", "create").strip()
            self.assertRegex(sid, r"^[A-Za-z0-9_-]{1,64}\.",
                             "CreateSession sent no routing key")
            self.cli("session", "prefill", sid, "--file", doc)
            self.cli("session", "ask", sid, "--question", "Who?",
                     "--max-tokens", "3")
            self.cli("session", "close", sid)

    def cli(self, *args):
        r = subprocess.run([CLIENT_BIN, "--server", self.nginx.address,
                            "--progress", "off", *args],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, "clusterkv %s: %s" %
                         (" ".join(args), r.stderr))
        return r.stdout

    def calls_logged(self, replica, sid):
        """["rpc=R code=C", ...] of the replica's log lines naming sid."""
        pattern = r"rpc=(\w+) session=%s code=(\w+)" % re.escape(sid)
        return ["rpc=%s code=%s" % m for m in
                re.findall(pattern, self.replicas[replica].log())]

    def owner_after_stop(self, sid):
        return self.proxy.code_of(self.proxy.get, sid)


def main():
    global SERVER_BIN, MODEL_TOOL, CLIENT_BIN
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    SERVER_BIN, MODEL_TOOL = sys.argv[1], sys.argv[2]
    CLIENT_BIN = sys.argv[3] if len(sys.argv) > 3 else None
    missing = missing_tools()
    if missing:
        print("SKIPPED: missing %s (scripts/setup.sh installs them)" %
              ", ".join(missing))
        return SKIP
    result = unittest.main(argv=sys.argv[:1], exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
