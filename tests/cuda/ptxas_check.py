#!/usr/bin/env python3
"""The hot CUDA kernels neither spill nor use a stack frame on sm_90
(issue 29 section 2): compiles each given .cu with nvcc --resource-usage
and fails on any entry function with stack frame, spill stores or spill
loads above zero. --self-test first compiles a planted kernel that needs
a stack frame and checks that it is reported.

  ptxas_check.py --nvcc NVCC --arch 90 --include ROOT FILE.cu...
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

PROPS = re.compile(r"Function properties for (\S+)\s*\n\s*(\d+) bytes stack "
                   r"frame, (\d+) bytes spill stores, (\d+) bytes spill loads")

PLANTED = r"""
__global__ void Planted(const int* idx, float* out) {
  float local[256];
  for (int i = 0; i < 256; ++i) local[i] = out[i] * i;
  out[threadIdx.x] = local[idx[threadIdx.x] & 255];
}
"""


def usage(args, path):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [args.nvcc, "-O3", "-DNDEBUG", "-std=c++17",
               "-DCLUSTERKV_HAVE_CUDA=1", f"-I{args.include}",
               f"--generate-code=arch=compute_{args.arch},code=[sm_{args.arch}]",
               "--resource-usage", "-x", "cu", "-c", path,
               "-o", os.path.join(tmp, "out.o")]
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        raise SystemExit(f"nvcc failed on {path}")
    text = r.stdout + r.stderr
    return [(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)))
            for m in PROPS.finditer(text)]


def bad(rows):
    return [r for r in rows if r[1] or r[2] or r[3]]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nvcc", required=True)
    p.add_argument("--arch", default="90")
    p.add_argument("--include", required=True)
    p.add_argument("--self-test", action="store_true")
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    if args.self_test:
        with tempfile.NamedTemporaryFile("w", suffix=".cu",
                                         delete=False) as f:
            f.write(PLANTED)
        try:
            if not bad(usage(args, f.name)):
                print("self-test: the planted stack frame was not reported")
                return 1
        finally:
            os.unlink(f.name)
    failures = 0
    for path in args.files:
        rows = usage(args, path)
        if not rows:
            print(f"{path}: no entry functions found")
            failures += 1
        for name, stack, stores, loads in rows:
            flag = "FAIL" if stack or stores or loads else "ok"
            print(f"{flag} {os.path.basename(path)} {name[:90]}: stack "
                  f"{stack}, spill stores {stores}, spill loads {loads}")
        failures += len(bad(rows))
    print(f"{failures} kernels over the limit")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
