#!/usr/bin/env python3
"""Every constrained output of the schema corpus validates.

Runs schema_corpus_gen over tests/grammar/schemas/*.json and checks each
output with python3-jsonschema (Draft 2020-12, with its format checks):
it must have ended with end-of-generation, parse as JSON and validate.
Fails (never skips) when jsonschema is missing or the corpus has fewer
than 50 schemas.

Usage: validate_corpus.py GEN MODEL.gguf SCHEMA_DIR [SAMPLES] [MAX_TOKENS]
"""
import glob
import json
import subprocess
import sys

try:
    import jsonschema
    from importlib import metadata
    VERSION = metadata.version("jsonschema")
except ImportError:
    sys.exit("validate_corpus: python3-jsonschema is missing "
             "(scripts/setup.sh installs it)")


# The 2020-12 draft's format checks (FormatChecker() would check "time"
# as draft 3's %H:%M:%S).
FORMATS = getattr(jsonschema.Draft202012Validator, "FORMAT_CHECKER", None) \
    or jsonschema.draft202012_format_checker


def main():
    gen, model, schema_dir = sys.argv[1:4]
    samples = sys.argv[4] if len(sys.argv) > 4 else "3"
    max_tokens = sys.argv[5] if len(sys.argv) > 5 else "600"
    files = sorted(glob.glob(schema_dir + "/*.json"))
    if len(files) < 50:
        sys.exit(f"validate_corpus: {len(files)} schemas, need at least 50")
    run = subprocess.run([gen, model, samples, max_tokens] + files,
                         capture_output=True, text=True, check=False)
    if run.returncode != 0:
        sys.exit(f"validate_corpus: {gen} failed: {run.stderr}")
    failures, checked, per_schema = [], 0, {}
    for line in run.stdout.splitlines():
        rec = json.loads(line)
        name = rec["schema"]
        if "error" in rec:
            failures.append(f"{name}: does not compile: {rec['error']}")
            continue
        with open(name, encoding="utf-8") as f:
            schema = json.load(f)
        validator = jsonschema.Draft202012Validator(
            schema, format_checker=FORMATS)
        out = rec["output"]
        checked += 1
        per_schema[name] = per_schema.get(name, 0) + 1
        if not rec["ended"]:
            failures.append(f"{name} seed {rec['seed']}: did not end: {out!r}")
            continue
        try:
            value = json.loads(out)
        except json.JSONDecodeError as e:
            failures.append(f"{name} seed {rec['seed']}: not JSON ({e}): {out!r}")
            continue
        errors = [e.message for e in validator.iter_errors(value)]
        if errors:
            failures.append(f"{name} seed {rec['seed']}: {errors[0]}: {out!r}")
    missing = [f for f in files if f not in per_schema]
    for f in missing:
        if not any(x.startswith(f) for x in failures):
            failures.append(f"{f}: no output")
    print(f"validate_corpus: {len(files)} schemas, {checked} outputs checked "
          f"with jsonschema {VERSION}, "
          f"{len(failures)} failures")
    for f in failures[:20]:
        print("  " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
