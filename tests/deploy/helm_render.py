"""A small renderer of the Go-template subset the clusterkv chart uses, so the
tests can render deploy/helm/clusterkv without Helm (not packaged in Debian):
actions with whitespace trimming ({{- -}}), comments, if/else, range (with
"$i :=" and over lists), with, define/include, variables, pipes, and the
functions listed in FUNCS, with Helm's meaning. Anything else raises
NotImplementedError, so a template that outgrows this subset fails the tests
rather than rendering wrongly."""

import hashlib
import json
import os
import re

import yaml

ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
TOKEN = re.compile(r'\(|\)|\||"(?:[^"\\]|\\.)*"|[^\s()|]+')
BLOCKS = ("if", "range", "with", "define")


class Chart:
    """One chart directory, rendered as `helm template RELEASE CHART`."""

    def __init__(self, chart_dir, release="clusterkv", namespace="default"):
        self.dir = chart_dir
        with open(os.path.join(chart_dir, "values.yaml")) as f:
            self.default_values = yaml.safe_load(f)
        with open(os.path.join(chart_dir, "Chart.yaml")) as f:
            meta = yaml.safe_load(f)
        self.chart = {"Name": meta["name"], "Version": meta["version"],
                      "AppVersion": meta.get("appVersion", "")}
        self.release = {"Name": release, "Namespace": namespace,
                        "Service": "Helm"}
        self.defines = {}
        tpl = os.path.join(chart_dir, "templates", "_helpers.tpl")
        if os.path.exists(tpl):
            self._collect_defines(parse(tokenize(read(tpl))))

    def _collect_defines(self, nodes):
        for node in nodes:
            if node[0] == "define":
                self.defines[json.loads(node[1])] = node[2]

    def root(self, values):
        return {"Values": values, "Chart": self.chart, "Release": self.release,
                "Files": {"Get": lambda p: read(os.path.join(self.dir, p))}}

    def values(self, **overrides):
        """The default values with overrides: {"http.enabled": False}."""
        values = json.loads(json.dumps(self.default_values))
        for path, v in overrides.items():
            node = values
            keys = path.split(".")
            for k in keys[:-1]:
                node = node[k]
            node[keys[-1]] = v
        return values

    def render_text(self, text, values):
        nodes = parse(tokenize(text))
        self._collect_defines(nodes)
        root = self.root(values)
        return Renderer(self, root).run(nodes, root, {"$": root})

    def render(self, template, values):
        """The text of templates/TEMPLATE (or any chart file) rendered."""
        return self.render_text(read(os.path.join(self.dir, template)), values)


def read(path):
    with open(path) as f:
        return f.read()


def tokenize(text):
    """[("text", s) | ("action", body)] with {{- and -}} trimming applied."""
    out, pos, trim_next = [], 0, False
    for m in ACTION.finditer(text):
        chunk = text[pos:m.start()]
        if trim_next:
            chunk = chunk.lstrip(" \t\r\n")
        if m.group(1):
            chunk = chunk.rstrip(" \t\r\n")
        out.append(("text", chunk))
        out.append(("action", m.group(2).strip()))
        trim_next, pos = bool(m.group(3)), m.end()
    tail = text[pos:]
    out.append(("text", tail.lstrip(" \t\r\n") if trim_next else tail))
    return out


def parse(tokens):
    nodes, i = _parse(tokens, 0)
    if i != len(tokens):
        raise ValueError("unexpected {{ %s }}" % tokens[i][1])
    return nodes


def _parse(tokens, i):
    """Nodes up to an {{ end }} or {{ else }} (not consumed)."""
    nodes = []
    while i < len(tokens):
        kind, val = tokens[i]
        word = val.split(None, 1)[0] if kind == "action" and val else ""
        if kind == "text":
            nodes.append(("text", val))
        elif val.startswith("/*"):
            pass
        elif word in ("end", "else"):
            if val not in ("end", "else"):
                raise NotImplementedError("{{ %s }}" % val)
            return nodes, i
        elif word in BLOCKS:
            body, i = _parse(tokens, i + 1)
            other = []
            if i < len(tokens) and tokens[i][1] == "else":
                other, i = _parse(tokens, i + 1)
            if i >= len(tokens) or tokens[i][1] != "end":
                raise ValueError("{{ %s }} without {{ end }}" % val)
            nodes.append((word, val[len(word):].strip(), body, other))
        else:
            nodes.append(("expr", val))
        i += 1
    return nodes, i


def truthy(v):
    return v not in (None, False, 0, "") and v != [] and v != {}


def go_str(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return "" if v is None else str(v)


class _GoYamlDumper(yaml.SafeDumper):
    """Quotes like Helm's toYaml: double quotes, only where needed."""


def _represent_str(dumper, s):
    plain = s != "" and yaml.safe_load(s) == s and s.strip() == s
    return dumper.represent_scalar("tag:yaml.org,2002:str", s,
                                   style=None if plain else '"')


_GoYamlDumper.add_representer(str, _represent_str)


def to_yaml(v):
    return yaml.dump(v, Dumper=_GoYamlDumper, default_flow_style=False,
                     sort_keys=True).rstrip("\n")


def indent(n, s):
    return "\n".join(" " * n + line for line in s.split("\n"))


def required(message, v):
    if not truthy(v):
        raise ValueError(message)
    return v


FUNCS = {
    "add": lambda *a: sum(a),
    "int": int, "int64": int,
    "until": lambda n: list(range(n)),
    "printf": lambda fmt, *a: fmt.replace("%v", "%s") % a,
    "quote": lambda v: json.dumps(go_str(v)),
    "contains": lambda sub, s: sub in s,
    "trunc": lambda n, s: s[:n],
    "trimSuffix": lambda suf, s: s[:-len(suf)] if suf and s.endswith(suf)
    else s,
    "toYaml": to_yaml,
    "indent": indent,
    "nindent": lambda n, s: "\n" + indent(n, s),
    "sha256sum": lambda s: hashlib.sha256(s.encode()).hexdigest(),
    "required": required,
}


class Renderer:
    def __init__(self, chart, root):
        self.chart, self.root = chart, root
        self.funcs = dict(FUNCS, include=self.include, tpl=self.tpl)

    def include(self, name, dot):
        return self.run(self.chart.defines[name], dot, {"$": self.root})

    def tpl(self, text, dot):
        nodes = parse(tokenize(text))
        return self.run(nodes, dot, {"$": self.root})

    def run(self, nodes, dot, scope):
        out = []
        for node in nodes:
            kind = node[0]
            if kind == "text":
                out.append(node[1])
            elif kind == "expr":
                m = re.match(r"(\$\w+)\s*:=\s*(.*)$", node[1], re.S)
                if m:
                    scope[m.group(1)] = self.pipeline(m.group(2), dot, scope)
                else:
                    out.append(go_str(self.pipeline(node[1], dot, scope)))
            elif kind == "define":
                pass
            else:
                out.append(self.block(node, dot, scope))
        return "".join(out)

    def block(self, node, dot, scope):
        kind, arg, body, other = node
        inner = dict(scope)
        if kind == "range":
            m = re.match(r"(\$\w+)\s*:=\s*(.*)$", arg, re.S)
            items = self.pipeline(m.group(2) if m else arg, dot, scope)
            parts = []
            for item in items or []:
                if m:
                    inner[m.group(1)] = item
                parts.append(self.run(body, item, inner))
            return "".join(parts) if items else self.run(other, dot, inner)
        value = self.pipeline(arg, dot, scope)
        if not truthy(value):
            return self.run(other, dot, inner)
        return self.run(body, value if kind == "with" else dot, inner)

    def pipeline(self, text, dot, scope):
        tokens = TOKEN.findall(text)
        value, i = self.command(tokens, 0, dot, scope, None)
        while i < len(tokens) and tokens[i] == "|":
            value, i = self.command(tokens, i + 1, dot, scope, value)
        return value

    def command(self, tokens, i, dot, scope, piped):
        """One command of a pipeline: a function call or a single term."""
        name = tokens[i]
        if name in self.funcs:
            args, i = [], i + 1
            while i < len(tokens) and tokens[i] not in ("|", ")"):
                v, i = self.term(tokens, i, dot, scope)
                args.append(v)
            if piped is not None:
                args.append(piped)
            return self.funcs[name](*args), i
        if re.match(r"^[a-z]\w*$", name) and name not in ("true", "false"):
            raise NotImplementedError("template function " + name)
        value, i = self.term(tokens, i, dot, scope)
        if callable(value):  # a method such as .Files.Get
            args = []
            while i < len(tokens) and tokens[i] not in ("|", ")"):
                v, i = self.term(tokens, i, dot, scope)
                args.append(v)
            return value(*args), i
        if piped is not None:
            raise NotImplementedError("pipe into a non-function")
        return value, i

    def term(self, tokens, i, dot, scope):
        t = tokens[i]
        if t == "(":
            value, i = self.command(tokens, i + 1, dot, scope, None)
            while tokens[i] == "|":
                value, i = self.command(tokens, i + 1, dot, scope, value)
            return value, i + 1  # past ")"
        if t.startswith('"'):
            return json.loads(t), i + 1
        if re.match(r"^-?\d+$", t):
            return int(t), i + 1
        if t in ("true", "false"):
            return t == "true", i + 1
        if t.startswith("$"):
            var, _, path = t.partition(".")
            return self.field(scope[var], path), i + 1
        if t.startswith("."):
            return self.field(dot, t[1:]), i + 1
        raise NotImplementedError("template term " + t)

    @staticmethod
    def field(value, path):
        for key in filter(None, path.split(".")):
            if not isinstance(value, dict) or key not in value:
                raise KeyError("no field %s in %r" % (key, path))
            value = value[key]
        return value


# `helm template` prints objects in install order; these are the chart's.
KIND_ORDER = ["PodDisruptionBudget", "ConfigMap", "Service", "Deployment",
              "StatefulSet", "ServiceMonitor"]


def manifest_documents(chart, values, templates):
    """[(template file, rendered document text)] in `helm template` order."""
    docs = []
    for name in templates:
        text = chart.render(os.path.join("templates", name), values)
        for doc in re.split(r"(?m)^---\n", text):
            doc = "\n".join(l.rstrip() for l in doc.split("\n")).strip("\n")
            if doc:
                kind = re.search(r"(?m)^kind: (\w+)", doc).group(1)
                docs.append((KIND_ORDER.index(kind), len(docs), name, doc))
    return [(name, doc) for _, _, name, doc in sorted(docs)]


def manifest_text(chart, values, templates, header):
    """A multi-document file as `helm template` writes it, after HEADER (the
    committed file's comment block)."""
    out = [header.rstrip("\n") + "\n"]
    for name, doc in manifest_documents(chart, values, templates):
        out.append("---\n# Source: %s/templates/%s\n%s\n" %
                   (chart.chart["Name"], name, doc))
    return "".join(out)


# The committed renderings of the chart with its default values: the path,
# the templates in it, and how many comment lines head it.
K8S_FILES = {
    "k8s/clusterkv.yaml": ["pdb.yaml", "router.yaml", "services.yaml",
                           "statefulset.yaml"],
    "k8s/servicemonitor.yaml": ["servicemonitor.yaml"],
}
ENVOY_COPY = "envoy/envoy.yaml"
ENVOY_HEADER_LINES = 2


def committed_renderings(deploy_dir):
    """{path under deploy/: the text it should have}, its header kept."""
    chart = Chart(os.path.join(deploy_dir, "helm", "clusterkv"))
    values = chart.values()
    out = {}
    for path, templates in K8S_FILES.items():
        header = read(os.path.join(deploy_dir, path)).split("\n---\n")[0]
        out[path] = manifest_text(chart, values, templates, header)
    old = read(os.path.join(deploy_dir, ENVOY_COPY)).split("\n")
    out[ENVOY_COPY] = ("\n".join(old[:ENVOY_HEADER_LINES]) + "\n" +
                       chart.render("files/envoy.yaml", values))
    return out


def split_documents(text):
    """The YAML documents of a rendered multi-document text, parsed."""
    return [d for d in yaml.safe_load_all(text) if d is not None]


if __name__ == "__main__":
    # Rewrites deploy/k8s/*.yaml and deploy/envoy/envoy.yaml from the chart.
    deploy = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "deploy")
    for path, text in committed_renderings(deploy).items():
        with open(os.path.join(deploy, path), "w") as f:
            f.write(text)
        print("wrote deploy/" + path)
