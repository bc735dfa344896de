"""Checks of deploy/: Prometheus config and rules (promtool), metric names
against a live scrape of clusterkv-server, the committed Kubernetes manifests,
the Helm chart's value references, the Envoy and nginx routing keys, the
Grafana dashboard and the Dockerfiles.

Usage: test_deploy.py CLUSTERKV_SERVER CLUSTERKV_MODEL
Checks whose tool is missing (promtool, python3-yaml) are skipped with a
message; scripts/setup.sh installs both.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_util as du  # noqa: E402

try:
    import yaml
    import helm_render  # needs yaml
except ImportError:
    yaml = None

SERVER_BIN = MODEL_TOOL = None
DEPLOY = du.DEPLOY
TESTS = os.path.dirname(os.path.abspath(__file__))
CHART = os.path.join(DEPLOY, "helm", "clusterkv")
METRIC = re.compile(r"\bclusterkv_[a-z0-9_]+\b")


def read(*parts):
    with open(os.path.join(*parts)) as f:
        return f.read()


def need_yaml():
    if yaml is None:
        raise unittest.SkipTest("python3-yaml missing (scripts/setup.sh)")


def load_yaml_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


class PrometheusTest(unittest.TestCase):
    def promtool(self, *args):
        if shutil.which("promtool") is None:
            self.skipTest("promtool missing (Debian package prometheus)")
        r = subprocess.run(["promtool", *args], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_check_config(self):
        self.promtool("check", "config",
                      os.path.join(DEPLOY, "prometheus", "prometheus.yml"))

    def test_check_rules(self):
        self.promtool("check", "rules",
                      os.path.join(DEPLOY, "prometheus", "rules.yml"))

    def test_rules_unit_tests(self):
        self.promtool("test", "rules", os.path.join(TESTS, "rules_test.yml"))

    def test_every_required_alert_exists(self):
        alerts = set(re.findall(r"- alert: (\w+)",
                                read(DEPLOY, "prometheus", "rules.yml")))
        for a in ("ClusterKvHighTimeToFirstToken", "ClusterKvQueueSaturated",
                  "ClusterKvAdmissionRejections", "ClusterKvHostKvNearLimit",
                  "ClusterKvLowSampledRecall"):
            self.assertIn(a, alerts)


class MetricNamesTest(unittest.TestCase):
    """Every clusterkv_* name in deploy/ and the rule tests is exported."""

    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory(prefix="ckv_scrape_") as work:
            model = os.path.join(work, "tiny.gguf")
            du.make_tiny_model(MODEL_TOOL, model)
            server = du.Server(SERVER_BIN, model, work, "scraped",
                               ["--max-sessions", "1"])
            try:
                cls.exercise(work, server.address)
                cls.scrape = server.scrape()
            finally:
                server.stop()
        cls.exported = set()
        for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", cls.scrape,
                                     re.M):
            cls.exported.add(name)
            if kind == "histogram":
                cls.exported |= {name + s for s in ("_bucket", "_sum",
                                                    "_count")}

    @staticmethod
    def exercise(work, address):
        """Labelled families appear once they have a child: a request and
        an admission rejection (the second session over --max-sessions 1)."""
        try:
            import grpc
        except ImportError:
            raise unittest.SkipTest("python3-grpcio missing (scripts/setup.sh)")
        client = du.Client(grpc, du.load_proto(work), address)
        try:
            client.create("")
            assert client.code_of(client.create, "") == "RESOURCE_EXHAUSTED"
        finally:
            client.close()

    def test_scrape_has_the_documented_families(self):
        for name in ("clusterkv_requests_total",
                     "clusterkv_time_to_first_token_seconds",
                     "clusterkv_kv_bytes", "clusterkv_attention_recall"):
            self.assertIn(name, self.exported)

    def test_names_used_are_exported(self):
        files = [os.path.join(DEPLOY, "prometheus", "rules.yml"),
                 os.path.join(DEPLOY, "grafana", "clusterkv-dashboard.json"),
                 os.path.join(TESTS, "rules_test.yml"),
                 *glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml")),
                 *glob.glob(os.path.join(CHART, "templates", "*"))]
        used = 0
        for path in files:
            for name in set(METRIC.findall(read(path))):
                used += 1
                self.assertIn(name, self.exported,
                              "%s uses %s, which clusterkv-server does not "
                              "export" % (os.path.relpath(path, du.REPO), name))
        self.assertGreater(used, 10)


class KubernetesManifestsTest(unittest.TestCase):
    def setUp(self):
        need_yaml()
        self.docs = load_yaml_docs(os.path.join(DEPLOY, "k8s",
                                                "clusterkv.yaml"))
        self.docs += load_yaml_docs(os.path.join(DEPLOY, "k8s",
                                                 "servicemonitor.yaml"))
        self.by_kind = {}
        for d in self.docs:
            self.by_kind.setdefault(d["kind"], []).append(d)

    def server_container(self):
        sts = self.by_kind["StatefulSet"][0]
        return sts["spec"]["template"]["spec"]["containers"][0]

    def test_kinds(self):
        for kind in ("StatefulSet", "Service", "PodDisruptionBudget",
                     "ServiceMonitor", "ConfigMap", "Deployment"):
            self.assertIn(kind, self.by_kind)

    def test_grpc_probes_on_the_grpc_port(self):
        c = self.server_container()
        port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            self.assertEqual(c[probe]["grpc"]["port"], port, probe)
        self.assertIn("--listen=0.0.0.0:%d" % port, c["args"])

    def test_gpu_and_memory_matched_to_kv_limits(self):
        c = self.server_container()
        self.assertGreaterEqual(c["resources"]["limits"]["nvidia.com/gpu"], 1)
        values = yaml.safe_load(read(CHART, "values.yaml"))
        host_kv = values["server"]["maxHostKvBytes"]
        self.assertIn("--max-host-kv-bytes=%d" % host_kv, c["args"])
        expected = (host_kv + values["memory"]["modelBytes"] +
                    values["memory"]["overheadBytes"])
        self.assertEqual(int(c["resources"]["limits"]["memory"]), expected)
        self.assertEqual(c["resources"]["requests"]["memory"],
                         c["resources"]["limits"]["memory"])

    def test_model_volume_and_non_root(self):
        sts = self.by_kind["StatefulSet"][0]["spec"]["template"]["spec"]
        self.assertTrue(sts["securityContext"]["runAsNonRoot"])
        mount = self.server_container()["volumeMounts"][0]
        self.assertEqual((mount["mountPath"], mount["readOnly"]),
                         ("/models", True))
        self.assertIn("--model=/models/model.gguf",
                      self.server_container()["args"])

    def test_selectors_match(self):
        sts = self.by_kind["StatefulSet"][0]
        pod_labels = sts["spec"]["template"]["metadata"]["labels"]
        for d in self.by_kind["PodDisruptionBudget"]:
            sel = d["spec"]["selector"]["matchLabels"]
            self.assertLessEqual(sel.items(), pod_labels.items())
        headless = [s for s in self.by_kind["Service"]
                    if s["spec"].get("clusterIP") == "None"][0]
        self.assertEqual(sts["spec"]["serviceName"],
                         headless["metadata"]["name"])
        sm = self.by_kind["ServiceMonitor"][0]["spec"]
        self.assertLessEqual(sm["selector"]["matchLabels"].items(),
                             headless["metadata"]["labels"].items())
        self.assertIn(sm["endpoints"][0]["port"],
                      [p["name"] for p in headless["spec"]["ports"]])

    def test_router_config_is_the_committed_envoy_config(self):
        cm = self.by_kind["ConfigMap"][0]["data"]["envoy.yaml"]
        self.assertEqual(yaml.safe_load(cm), yaml.safe_load(
            read(DEPLOY, "envoy", "envoy.yaml")))


class HelmChartTest(unittest.TestCase):
    def test_values_referenced_by_templates_exist(self):
        need_yaml()
        values = yaml.safe_load(read(CHART, "values.yaml"))
        yaml.safe_load(read(CHART, "Chart.yaml"))
        texts = [read(p) for p in glob.glob(os.path.join(CHART, "templates",
                                                         "*"))]
        texts.append(read(CHART, "files", "envoy.yaml"))
        # .Values.a.b and "$s := .Values.server" then $s.x
        refs = set()
        for t in texts:
            refs |= set(re.findall(r"\.Values((?:\.\w+)+)", t))
            for var, base in re.findall(r"(\$\w+) := \.Values((?:\.\w+)+)", t):
                for sub in re.findall(re.escape(var) + r"((?:\.\w+)+)", t):
                    refs.add(base + sub)
        self.assertGreater(len(refs), 20)
        for ref in sorted(refs):
            node = values
            for key in ref.strip(".").split("."):
                self.assertIsInstance(node, dict, ref)
                self.assertIn(key, node, ".Values%s is not in values.yaml" %
                              ref)
                node = node[key]

    def test_server_args_are_server_flags(self):
        # The server's own flag list (some flags come from the settings
        # schema's X-macros, not from ABSL_FLAG lines one can grep).
        out = subprocess.run([SERVER_BIN, "--helpfull"], capture_output=True,
                             text=True, timeout=30)
        flags = set(re.findall(r"^\s+--(\w+) \(", out.stdout + out.stderr,
                               re.M))
        self.assertIn("model", flags)
        args = re.findall(r"^\s+- --([\w-]+)=",
                          read(CHART, "templates", "statefulset.yaml"), re.M)
        self.assertGreater(len(args), 10)
        for a in args:
            self.assertIn(a.replace("-", "_"), flags, "--" + a)

    def test_committed_renderings_are_the_chart_rendered(self):
        """deploy/k8s/*.yaml and deploy/envoy/envoy.yaml are the chart with its
        default values, rendered by helm_render (checked against Helm's
        output format: the files it reproduced were written for Helm's)."""
        need_yaml()
        for path, text in helm_render.committed_renderings(DEPLOY).items():
            self.assertEqual(read(DEPLOY, path), text,
                             "deploy/%s differs from the chart rendered: run "
                             "python3 tests/deploy/helm_render.py" % path)

    def render_chart(self, **overrides):
        """{kind: [objects]} of the chart rendered with value overrides,
        the Envoy config parsed from the router's ConfigMap."""
        chart = helm_render.Chart(CHART)
        values = chart.values(**overrides)
        templates = [os.path.basename(p) for p in
                     glob.glob(os.path.join(CHART, "templates", "*.yaml"))]
        by_kind = {}
        for _, doc in helm_render.manifest_documents(chart, values, templates):
            d = yaml.safe_load(doc)
            by_kind.setdefault(d["kind"], []).append(d)
        envoy = yaml.safe_load(
            by_kind["ConfigMap"][0]["data"]["envoy.yaml"])
        return by_kind, envoy

    def test_http_api_follows_http_enabled(self):
        need_yaml()
        for enabled in (True, False):
            by_kind, envoy = self.render_chart(**{
                "http.enabled": enabled, "http.port": 9100,
                "router.httpPort": 9200})
            server = by_kind["StatefulSet"][0]["spec"]["template"]["spec"][
                "containers"][0]
            http_args = [a for a in server["args"]
                         if a.startswith("--http-listen")]
            ports = {p["name"]: p["containerPort"] for p in server["ports"]}
            services = {s["metadata"]["name"]: {p["name"]: p["port"]
                                                for p in s["spec"]["ports"]}
                        for s in by_kind["Service"]}
            router = by_kind["Deployment"][0]["spec"]["template"]["spec"][
                "containers"][0]
            router_ports = {p["name"]: p["containerPort"]
                            for p in router["ports"]}
            listeners = [l["name"] for l in
                         envoy["static_resources"]["listeners"]]
            clusters = [c["name"]
                        for c in envoy["static_resources"]["clusters"]]
            if enabled:
                self.assertEqual(http_args, ["--http-listen=0.0.0.0:9100"])
                # Plain HTTP on a non-loopback address needs --insecure.
                self.assertIn("--insecure", server["args"])
                self.assertEqual(ports["http"], 9100)
                self.assertEqual(services["clusterkv-headless"]["http"], 9100)
                self.assertEqual(services["clusterkv"]["http"], 9200)
                self.assertEqual(router_ports["http"], 9200)
                self.assertEqual(listeners, ["grpc_listener", "http_listener"])
                self.assertEqual(clusters, ["clusterkv", "clusterkv-http"])
                http = envoy["static_resources"]["listeners"][1]
                self.assertEqual(
                    http["address"]["socket_address"]["port_value"], 9200)
                endpoints = envoy["static_resources"]["clusters"][1][
                    "load_assignment"]["endpoints"][0]["lb_endpoints"]
                self.assertEqual(
                    {e["endpoint"]["address"]["socket_address"]["port_value"]
                     for e in endpoints}, {9100})
            else:
                self.assertEqual(http_args, [])
                self.assertNotIn("http", ports)
                for svc in services.values():
                    self.assertNotIn("http", svc)
                self.assertNotIn("http", router_ports)
                self.assertEqual(listeners, ["grpc_listener"])
                self.assertEqual(clusters, ["clusterkv"])
            # Either way every probe stays on gRPC health.
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                self.assertEqual(server[probe]["grpc"]["port"],
                                 ports["grpc"], probe)

    def test_large_numbers_rendered_as_integers(self):
        # Helm reads values as float64: big byte counts need int64.
        text = read(CHART, "templates", "statefulset.yaml")
        for key in ("maxHostKvBytes", "maxDeviceKvBytes"):
            self.assertRegex(text, r"int64 \$s\.%s" % key)


class RoutingKeyTest(unittest.TestCase):
    """nginx's map, Envoy's regex_rewrite and the server's RoutingKeyOf agree:
    the key is the id up to its first '.', or the whole id."""

    IDS = {"k1.s-00aa": "k1", "a-b_C.s-1.s-2": "a-b_C", "s-00ff": "s-00ff",
           "": ""}

    def test_nginx_map(self):
        conf = read(DEPLOY, "nginx", "clusterkv.conf")
        m = re.search(r'map \$http_x_session_id \$clusterkv_route \{\s*'
                      r'"~(.*?)" \$key;\s*default\s+\$http_x_session_id;', conf)
        self.assertIsNotNone(m)
        self.assertIn("hash $clusterkv_route consistent;", conf)
        # The HTTP API's upstream (docs/http-api.md) hashes on the same key.
        http = re.search(r"upstream clusterkv_http \{(.*?)\}", conf, re.S)
        self.assertIsNotNone(http)
        self.assertIn("hash $clusterkv_route consistent;", http.group(1))
        self.assertIn("grpc_next_upstream off;", conf)
        pattern = re.compile(m.group(1).replace("(?<key>", "(?P<key>"))
        for sid, key in self.IDS.items():
            match = pattern.search(sid)
            self.assertEqual(match.group("key") if match else sid, key, sid)

    def test_envoy_ring_hash(self):
        need_yaml()
        cfg = yaml.safe_load(read(DEPLOY, "envoy", "envoy.yaml"))
        cluster = cfg["static_resources"]["clusters"][0]
        self.assertEqual(cluster["lb_policy"], "RING_HASH")
        self.assertIn("grpc_health_check", cluster["health_checks"][0])
        hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0][
            "filters"][0]["typed_config"]
        route = hcm["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
        header = route["hash_policy"][0]["header"]
        self.assertEqual(header["header_name"], "x-session-id")
        rewrite = header["regex_rewrite"]
        pattern = re.compile(rewrite["pattern"]["regex"])
        for sid, key in self.IDS.items():
            self.assertEqual(pattern.sub(rewrite["substitution"], sid), key)

    def test_envoy_http_api_hashes_like_grpc(self):
        """The HTTP API's listener and cluster (docs/http-api.md) pick the
        same replica for a key as the gRPC ones: same hash policy, ring
        settings and hostnames, and the same gRPC health of each replica."""
        need_yaml()
        cfg = yaml.safe_load(read(DEPLOY, "envoy", "envoy.yaml"))
        resources = cfg["static_resources"]
        listeners = {l["name"]: l for l in resources["listeners"]}
        clusters = {c["name"]: c for c in resources["clusters"]}

        def hcm(listener):
            return listener["filter_chains"][0]["filters"][0]["typed_config"]

        def route(listener):
            return hcm(listener)["route_config"]["virtual_hosts"][0][
                "routes"][0]["route"]

        grpc_l, http_l = listeners["grpc_listener"], listeners["http_listener"]
        self.assertEqual(hcm(http_l)["codec_type"], "HTTP1")
        self.assertEqual(route(http_l)["cluster"], "clusterkv-http")
        self.assertEqual(route(http_l)["hash_policy"],
                         route(grpc_l)["hash_policy"])
        # Server-sent events: no route timeout, the gRPC streams' idle limit.
        self.assertEqual(route(http_l)["timeout"], "0s")
        self.assertEqual(hcm(http_l)["stream_idle_timeout"],
                         hcm(grpc_l)["stream_idle_timeout"])
        self.assertNotIn("retry_policy", route(http_l))

        grpc_c, http_c = clusters["clusterkv"], clusters["clusterkv-http"]
        for key in ("type", "lb_policy", "ring_hash_lb_config",
                    "common_lb_config", "health_checks"):
            self.assertEqual(http_c[key], grpc_c[key], key)
        self.assertTrue(http_c["common_lb_config"][
            "consistent_hashing_lb_config"]["use_hostname_for_hashing"])

        def endpoints(cluster):
            return [e["endpoint"] for e in
                    cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]]

        self.assertEqual([e["hostname"] for e in endpoints(http_c)],
                         [e["hostname"] for e in endpoints(grpc_c)])
        grpc_ports = {e["address"]["socket_address"]["port_value"]
                      for e in endpoints(grpc_c)}
        for e in endpoints(http_c):
            # Health: the gRPC port's grpc.health.v1, not the HTTP port.
            self.assertEqual({e["health_check_config"]["port_value"]},
                             grpc_ports)
            self.assertNotIn(e["address"]["socket_address"]["port_value"],
                             grpc_ports)
        # Envoy refuses gRPC health checks on a cluster without HTTP/2;
        # requests still go upstream as HTTP/1.1 (the downstream protocol,
        # HTTP1-only listener).
        opts = http_c["typed_extension_protocol_options"][
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        self.assertIn("http2_protocol_options",
                      opts["use_downstream_protocol_config"])
        self.assertIn("grpc_health_check", http_c["health_checks"][0])


class DashboardAndImagesTest(unittest.TestCase):
    def test_dashboard(self):
        dash = json.loads(read(DEPLOY, "grafana", "clusterkv-dashboard.json"))
        panels = [p for p in dash["panels"] if p["type"] != "row"]
        ids = [p["id"] for p in dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        titles = {p["title"] for p in panels}
        for t in ("Time to first token", "Inter-token latency",
                  "Tokens per second", "Active sessions", "Queue depth",
                  "KV bytes by tier", "Device cache hit rate",
                  "Host to device bytes", "Sampled top-k recall",
                  "Errors by code"):
            self.assertIn(t, titles)
        for p in panels:
            self.assertTrue(p["targets"], p["title"])
            for t in p["targets"]:
                self.assertTrue(METRIC.search(t["expr"]), t["expr"])

    def test_dockerfiles(self):
        for name in ("Dockerfile.cpu", "Dockerfile.cuda"):
            text = read(DEPLOY, name)
            self.assertRegex(text, r"(?m)^FROM .* AS build$")
            self.assertRegex(text, r"(?m)^USER 10001")
            self.assertRegex(text, r'(?m)^ENTRYPOINT \["clusterkv-server"')
            self.assertIn('VOLUME ["/models"]', text)
            for arg in re.findall(r"(?m)^ARG (\w+)", text):
                self.assertRegex(text, r"#\s+%s\s" % arg,
                                 "%s: build argument %s undocumented" %
                                 (name, arg))
        self.assertTrue(os.path.exists(os.path.join(du.REPO,
                                                    ".dockerignore")))


def main():
    global SERVER_BIN, MODEL_TOOL
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    SERVER_BIN, MODEL_TOOL = sys.argv[1], sys.argv[2]
    result = unittest.main(argv=sys.argv[:1], exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
