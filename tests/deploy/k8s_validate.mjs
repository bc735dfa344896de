// Validates Kubernetes objects against the API's OpenAPI schemas, as compiled
// by the npm packages kubernetes-models (the built-in kinds) and
// @kubernetes-models/prometheus-operator (the ServiceMonitor CRD).
//
// Usage: node k8s_validate.mjs NODE_MODULES_DIR DOCS.json
// DOCS.json: [{"name": "...", "object": {...}}, ...]. Prints, as JSON,
// [{"name": "...", "errors": ["/json/pointer: what", ...]}, ...]; exits 0
// (the caller judges the errors), 2 on a usage or loading error.
//
// Each object is checked for: a schema for its apiVersion and kind (the
// schemas require the exact apiVersion and kind strings), every field's type,
// format and enum, required fields, and unknown fields. The compiled
// validators do not reject unknown fields (the OpenAPI schemas have no
// "additionalProperties: false"), so the object is validated through proxies
// that record which keys the validator looks up: a schema property is always
// looked up, a map (labels, resources, ConfigMap data) is enumerated, so a
// key of a non-map object the validator never asked for is a field the schema
// does not have: what `kubectl apply --validate=strict` rejects.
import {existsSync, readFileSync} from "node:fs";
import {join} from "node:path";
import {pathToFileURL} from "node:url";

const [modules, docsPath] = process.argv.slice(2);
if (!modules || !docsPath) {
  console.error("usage: node k8s_validate.mjs NODE_MODULES_DIR DOCS.json");
  process.exit(2);
}

// Custom resources: apiVersion -> [package, schema name prefix].
const CRDS = {
  "monitoring.coreos.com/v1": [
    "@kubernetes-models/prometheus-operator",
    "ComGithubPrometheusOperatorPrometheusOperatorPkgApisMonitoringV1",
  ],
};

// The built-in group versions a current Kubernetes (1.34) serves, GA ones:
// kubernetes-models also keeps the schemas of removed ones (apps/v1beta1,
// policy/v1beta1, extensions/v1beta1, ...), which an API server refuses.
const SERVED = new Set([
  "v1", "admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1",
  "apiregistration.k8s.io/v1", "apps/v1", "authentication.k8s.io/v1",
  "authorization.k8s.io/v1", "autoscaling/v1", "autoscaling/v2", "batch/v1",
  "certificates.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1",
  "events.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1",
  "networking.k8s.io/v1", "node.k8s.io/v1", "policy/v1",
  "rbac.authorization.k8s.io/v1", "resource.k8s.io/v1", "scheduling.k8s.io/v1",
  "storage.k8s.io/v1",
]);

const capitalize = (s) => s.charAt(0).toUpperCase() + s.slice(1);

// The compiled schema file of apiVersion/kind, or null: core "v1" is
// IoK8sApiCoreV1<Kind>, "apps/v1" IoK8sApiAppsV1<Kind>, "policy/v1"
// IoK8sApiPolicyV1<Kind>, "networking.k8s.io/v1" IoK8sApiNetworkingV1<Kind>.
function schemaFile(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" ||
      !/^[A-Za-z0-9]+$/.test(kind)) {
    return null;
  }
  let pkg, name;
  if (CRDS[apiVersion]) {
    pkg = CRDS[apiVersion][0];
    name = CRDS[apiVersion][1] + kind;
  } else {
    if (!SERVED.has(apiVersion)) return null;
    const parts = apiVersion.split("/");
    const [group, version] = parts.length === 1 ? ["core", parts[0]] : parts;
    pkg = "kubernetes-models";
    name = "IoK8sApi" + capitalize(group.split(".")[0]) + capitalize(version) +
           kind;
  }
  const file = join(modules, pkg, "_schemas", name + ".js");
  return existsSync(file) ? file : null;
}

// A deep copy of `value` whose objects record the keys looked up in them.
function recorded(value, path, records) {
  if (Array.isArray(value)) {
    return value.map((v, i) => recorded(v, path + "/" + i, records));
  }
  if (value === null || typeof value !== "object") return value;
  const target = {};
  for (const [k, v] of Object.entries(value)) {
    target[k] = recorded(v, path + "/" + k.replace(/~/g, "~0").replace(/\//g, "~1"),
                         records);
  }
  const record = {path, keys: Object.keys(target), seen: new Set(),
                  enumerated: false};
  records.push(record);
  return new Proxy(target, {
    get(t, k, receiver) {
      if (typeof k === "string") record.seen.add(k);
      return Reflect.get(t, k, receiver);
    },
    has(t, k) {
      if (typeof k === "string") record.seen.add(k);
      return Reflect.has(t, k);
    },
    ownKeys(t) {
      record.enumerated = true;
      return Reflect.ownKeys(t);
    },
  });
}

function describe(e) {
  return (e.instancePath || "/") + ": " + e.keyword + " " +
         JSON.stringify(e.params);
}

async function validate(object) {
  if (object === null || typeof object !== "object" || Array.isArray(object)) {
    return ["/: not an object"];
  }
  const file = schemaFile(object.apiVersion, object.kind);
  if (!file) {
    return ["/: no schema for apiVersion " + JSON.stringify(object.apiVersion) +
            " kind " + JSON.stringify(object.kind)];
  }
  const {validate: check} = await import(pathToFileURL(file).href);
  const records = [];
  const ok = check(recorded(object, "", records));
  const errors = ok ? [] : (check.errors || []).map(describe);
  const unknown = [];
  for (const r of records) {
    if (r.enumerated) continue;  // a map: any key
    for (const k of r.keys) {
      if (!r.seen.has(k)) unknown.push(r.path + "/" + k);
    }
  }
  // Report an unknown field once, not again for the keys inside it.
  const outer = unknown.filter(
      (p) => !unknown.some((q) => p.startsWith(q + "/")));
  return errors.concat(outer.sort().map((p) => p + ": unknown field"));
}

try {
  const docs = JSON.parse(readFileSync(docsPath, "utf8"));
  const out = [];
  for (const {name, object} of docs) {
    out.push({name, errors: await validate(object)});
  }
  console.log(JSON.stringify(out, null, 1));
} catch (e) {
  console.error("k8s_validate: " + (e.stack || e));
  process.exit(2);
}
