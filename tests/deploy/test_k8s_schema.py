"""The Kubernetes manifests validated against the Kubernetes API's OpenAPI
schemas: deploy/k8s/*.yaml as committed and the Helm chart rendered
(helm_render.py) with every values combination the deploy tests render, plus
one that takes the chart's optional branches. Each object is checked by
k8s_validate.mjs with the schema validators of the npm packages
kubernetes-models (built-in kinds, Kubernetes 1.34+ API) and
@kubernetes-models/prometheus-operator (the ServiceMonitor CRD): apiVersion
and kind, every field's type, format and enum, required fields, and unknown
fields. Negative cases (a wrong type, unknown fields at several depths, a
wrong apiVersion, a bad enum value, a missing required field) show that the
validator rejects what the API server would.

Usage: test_k8s_schema.py WORK_DIR
The packages are installed with npm into WORK_DIR/npm once (kept between
runs). A missing node or npm, or a failed install, fails the test.
"""

import copy
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_util as du  # noqa: E402
import helm_render  # noqa: E402
import yaml  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
CHART = os.path.join(du.DEPLOY, "helm", "clusterkv")
VALIDATOR = os.path.join(TESTS, "k8s_validate.mjs")
# Pinned: a new schema release must not change the test's verdict unseen.
# kubernetes-models 5.1.0 declares node >= 22; its validators are plain ES
# modules that run on Debian 12's node 20 (this test runs them there).
PACKAGES = {"kubernetes-models": "5.1.0",
            "@kubernetes-models/prometheus-operator": "6.0.0"}
WORK_DIR = None

# The values combinations the deploy tests render (test_deploy.py: the
# defaults, the committed renderings; http.enabled on and off with moved
# ports), and one through the chart's optional branches.
COMBINATIONS = {
    "defaults": {},
    "http on": {"http.enabled": True, "http.port": 9100,
                "router.httpPort": 9200},
    "http off": {"http.enabled": False, "http.port": 9100,
                 "router.httpPort": 9200},
    "optional branches": {
        "model.existingClaim": "", "model.hostPath": "/srv/models",
        "podAnnotations": {"example.com/owner": "ml"},
        "imagePullSecrets": [{"name": "registry"}],
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "affinity": {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100, "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {
                        "app.kubernetes.io/name": "clusterkv"}}}}]}},
        "server.extraArgs": ["--window=320"],
        "serviceMonitor.labels": {"release": "kube-prometheus-stack"},
        "router.serviceType": "LoadBalancer"},
}


def fail(message):
    print("test_k8s_schema: " + message, file=sys.stderr)
    sys.exit(1)


def install_packages(npm_dir):
    """`npm install` of PACKAGES once per WORK_DIR; later runs reuse it."""
    def installed():
        for name, version in PACKAGES.items():
            path = os.path.join(npm_dir, "node_modules", name, "package.json")
            if not os.path.exists(path):
                return False
            with open(path) as f:
                if json.load(f).get("version") != version:
                    return False
        return True
    if installed():
        return
    os.makedirs(npm_dir, exist_ok=True)
    with open(os.path.join(npm_dir, "package.json"), "w") as f:
        json.dump({"name": "k8s-schema-test", "private": True}, f)
    specs = ["%s@%s" % kv for kv in PACKAGES.items()]
    r = subprocess.run(["npm", "install", "--no-audit", "--no-fund",
                        "--engine-strict=false", "--loglevel=error", *specs],
                       cwd=npm_dir, capture_output=True, text=True,
                       timeout=180)
    if r.returncode != 0 or not installed():
        fail("npm install %s failed:\n%s%s" % (" ".join(specs), r.stdout,
                                                r.stderr))


def validate(named_objects):
    """{name: [error, ...]} for [(name, object)] (k8s_validate.mjs)."""
    with tempfile.TemporaryDirectory(prefix="ckv-k8s-") as tmp:
        path = os.path.join(tmp, "docs.json")
        with open(path, "w") as f:
            json.dump([{"name": n, "object": o} for n, o in named_objects], f)
        r = subprocess.run(["node", VALIDATOR,
                            os.path.join(WORK_DIR, "npm", "node_modules"),
                            path], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError("k8s_validate.mjs failed:\n" + r.stderr)
    out = {d["name"]: d["errors"] for d in json.loads(r.stdout)}
    assert len(out) == len(named_objects), "duplicate names"
    return out


def committed_objects():
    """[(name, object)] of every document of deploy/k8s/*.yaml."""
    out = []
    for path in sorted(glob.glob(os.path.join(du.DEPLOY, "k8s", "*.yaml"))):
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        for i, d in enumerate(docs):
            out.append(("deploy/k8s/%s #%d %s" % (os.path.basename(path), i,
                                                  d.get("kind")), d))
    return out


def rendered_objects(label, overrides):
    """[(name, object)] of the chart rendered with value overrides."""
    chart = helm_render.Chart(CHART)
    templates = sorted(os.path.basename(p) for p in
                       glob.glob(os.path.join(CHART, "templates", "*.yaml")))
    out = []
    docs = helm_render.manifest_documents(chart, chart.values(**overrides),
                                          templates)
    for i, (template, doc) in enumerate(docs):
        d = yaml.safe_load(doc)
        out.append(("chart (%s) %s #%d %s" % (label, template, i,
                                              d.get("kind")), d))
    return out


class ManifestSchemaTest(unittest.TestCase):
    def test_committed_manifests_validate(self):
        objects = committed_objects()
        kinds = sorted({o["kind"] for _, o in objects})
        self.assertEqual(kinds, ["ConfigMap", "Deployment",
                                 "PodDisruptionBudget", "Service",
                                 "ServiceMonitor", "StatefulSet"])
        for name, errors in validate(objects).items():
            self.assertEqual(errors, [], name)

    def test_every_rendered_combination_validates(self):
        objects = []
        for label, overrides in COMBINATIONS.items():
            rendered = rendered_objects(label, overrides)
            self.assertGreaterEqual(len(rendered), 7, label)
            objects += rendered
        for name, errors in validate(objects).items():
            self.assertEqual(errors, [], name)
        # The optional branches were taken (not silently left out).
        sts = [o for n, o in objects
               if "optional" in n and o["kind"] == "StatefulSet"][0]
        pod = sts["spec"]["template"]["spec"]
        self.assertEqual(pod["volumes"][0]["hostPath"]["path"], "/srv/models")
        self.assertIn("podAntiAffinity", pod["affinity"])
        self.assertEqual(pod["imagePullSecrets"], [{"name": "registry"}])


class ValidatorBitesTest(unittest.TestCase):
    """Each broken copy of a committed object gets exactly the errors at the
    paths broken; the unbroken objects next to it none."""

    def broken(self):
        by_kind = {}
        for _, o in committed_objects():
            by_kind.setdefault(o["kind"], o)
        cases = {}

        def case(name, kind, edit, paths):
            o = copy.deepcopy(by_kind[kind])
            edit(o)
            cases[name] = (o, paths)

        def container(o):
            return o["spec"]["template"]["spec"]["containers"][0]

        case("wrong type", "StatefulSet",
             lambda o: o["spec"].update(replicas="two"), ["/spec/replicas"])
        case("wrong type in a list", "Service",
             lambda o: o["spec"]["ports"][0].update(port="grpc"),
             ["/spec/ports/0/port"])
        case("unknown nested field", "StatefulSet",
             lambda o: container(o)["livenessProbe"].update(grpcc={}),
             ["/spec/template/spec/containers/0/livenessProbe/grpcc"])
        case("unknown top-level field", "Service",
             lambda o: o.update(specs={}), ["/specs"])
        case("unknown metadata field", "PodDisruptionBudget",
             lambda o: o["metadata"].update(label={"a": "b"}),
             ["/metadata/label"])
        case("bad enum", "StatefulSet",
             lambda o: o["spec"].update(podManagementPolicy="parallel"),
             ["/spec/podManagementPolicy"])
        case("missing required field", "StatefulSet",
             lambda o: container(o).pop("name"),
             ["/spec/template/spec/containers/0"])
        case("wrong apiVersion", "Deployment",
             lambda o: o.update(apiVersion="apps/v1beta1"), ["/"])
        case("CRD unknown field", "ServiceMonitor",
             lambda o: o["spec"]["endpoints"][0].update(intervall="15s"),
             ["/spec/endpoints/0/intervall"])
        case("CRD bad duration", "ServiceMonitor",
             lambda o: o["spec"]["endpoints"][0].update(interval="15 s"),
             ["/spec/endpoints/0/interval"])
        return cases

    def test_broken_objects_are_rejected_where_broken(self):
        cases = self.broken()
        named = [(n, o) for n, (o, _) in cases.items()]
        named += committed_objects()
        result = validate(named)
        for name, (_, paths) in cases.items():
            errors = result[name]
            where = sorted({e.split(": ")[0] for e in errors})
            self.assertEqual(where, sorted(paths), "%s: %s" % (name, errors))
        for name, _ in committed_objects():
            self.assertEqual(result[name], [], name)

    def test_map_keys_are_not_unknown_fields(self):
        # Labels, annotations and resource maps take any key.
        o = copy.deepcopy([o for _, o in committed_objects()
                           if o["kind"] == "StatefulSet"][0])
        o["metadata"]["labels"]["anything.example.com/x"] = "y"
        o["metadata"]["annotations"] = {"any": "thing"}
        c = o["spec"]["template"]["spec"]["containers"][0]
        c["resources"]["limits"]["example.com/fpga"] = 1
        self.assertEqual(validate([("maps", o)])["maps"], [])


def main():
    global WORK_DIR
    if len(sys.argv) < 2:
        fail("usage: test_k8s_schema.py WORK_DIR")
    WORK_DIR = os.path.abspath(sys.argv.pop(1))
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            fail(tool + " is not installed (node 20 and npm: Debian's nodejs "
                 "and npm packages)")
    install_packages(os.path.join(WORK_DIR, "npm"))
    unittest.main(verbosity=2)


if __name__ == "__main__":
    main()
