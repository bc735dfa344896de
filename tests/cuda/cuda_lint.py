#!/usr/bin/env python3
"""No CUDA work on the legacy default stream (issue 29 section 2).

Every kernel launch in kernels/cuda must name a stream (4 launch arguments,
the last not 0, nullptr, cudaStreamLegacy or cudaStreamPerThread), and no
synchronous copy, memset or device-wide synchronisation may appear outside
the runtime (cuda_runtime.cc implements Synchronize on purpose).
--self-test first checks that planted violations are caught.

  cuda_lint.py SOURCE_DIR [--self-test]
"""
import pathlib
import re
import sys

DEFAULT_STREAMS = {"0", "nullptr", "NULL", "cudaStreamLegacy",
                   "cudaStreamPerThread"}
SYNC_CALLS = re.compile(r"\b(cudaMemcpy|cudaMemset|cudaMemcpy2D|"
                        r"cudaDeviceSynchronize|cudaMemcpyToSymbol)\s*\(")
ALLOWED_SYNC = {"cuda_runtime.cc"}


def split_args(text):
    """Top-level comma split (parentheses, brackets, templates)."""
    args, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    args.append(cur.strip())
    return args


def problems(name, text):
    out = []
    code = re.sub(r"//[^\n]*", "", text)
    for m in re.finditer(r"<<<(.*?)>>>", code, re.S):
        line = code[:m.start()].count("\n") + 1
        args = split_args(m.group(1))
        if len(args) != 4:
            out.append(f"{name}:{line}: launch without a stream argument")
        elif args[3] in DEFAULT_STREAMS:
            out.append(f"{name}:{line}: launch on the default stream")
    if name not in ALLOWED_SYNC:
        for m in SYNC_CALLS.finditer(code):
            line = code[:m.start()].count("\n") + 1
            out.append(f"{name}:{line}: synchronous {m.group(1)}")
    return out


def self_test():
    bad = {
        "k<<<grid, 128>>>(x);": "launch without a stream",
        "k<<<grid, 128, 0, 0>>>(x);": "default stream",
        "k<<<dim3(a, b), 128, bytes, cudaStreamLegacy>>>(x);": "default",
        "cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice);": "synchronous",
        "cudaDeviceSynchronize();": "synchronous",
    }
    good = "k<<<dim3(a, b), kThreads, Bytes<T>(n, m), stream>>>(p);"
    ok = True
    for snippet, what in bad.items():
        found = problems("planted.cu", snippet)
        if not any(what in p for p in found):
            print(f"self-test: not caught ({what}): {snippet}")
            ok = False
    if problems("planted.cu", good):
        print(f"self-test: false alarm: {good}")
        ok = False
    return ok


def main():
    root = pathlib.Path(sys.argv[1])
    if "--self-test" in sys.argv and not self_test():
        return 1
    files = sorted(p for ext in ("*.cu", "*.cuh", "*.cc")
                   for p in (root / "kernels" / "cuda").glob(ext))
    if not files:
        print("no CUDA sources found under", root / "kernels" / "cuda")
        return 1
    found, launches = [], 0
    for f in files:
        text = f.read_text()
        launches += text.count("<<<")
        found += problems(f.name, text)
    for p in found:
        print(p)
    print(f"{len(files)} files, {launches} launches, {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
