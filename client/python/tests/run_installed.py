#!/usr/bin/env python3
"""ctest driver of the Python package (python_client_test): proves that
`pip install ./client/python` works offline, then runs the pytest suite
against the installed package.

1. copies client/python and proto/ of this checkout to a temporary folder
   (so the build leaves nothing in the source tree),
2. makes a venv there with --system-site-packages (Debian's python3-grpcio,
   python3-protobuf, python3-pytest stay visible),
3. `pip install --no-index` of the copied client/python (nothing can be
   downloaded: the build uses the venv's setuptools and the system's wheel),
4. runs `python -m pytest` on client/python/tests with the venv's python
   outside the source tree, passing the rest of the arguments to pytest.

Usage: run_installed.py [--work-dir DIR] [--keep] -- [PYTEST ARGS]
(e.g. -- --server-bin build/server/clusterkv-server --model-tool ...).
Exit status: pytest's, or 1 when a prerequisite is missing (never skipped).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PACKAGE))


def missing_prerequisites():
    missing = []
    for module in ("grpc", "google.protobuf", "pytest", "setuptools", "wheel",
                   "venv", "ensurepip"):
        try:
            __import__(module)
        except ImportError:
            missing.append("python module %s (%s)" % (module, sys.executable))
    for tool in ("protoc", "grpc_python_plugin", "openssl"):
        if shutil.which(tool) is None:
            missing.append("program " + tool)
    return missing


def copy_sources(destination):
    ignore = shutil.ignore_patterns("build", "dist", "*.egg-info",
                                    "__pycache__", ".pytest_cache")
    package = os.path.join(destination, "client", "python")
    shutil.copytree(PACKAGE, package, ignore=ignore)
    shutil.rmtree(os.path.join(package, "src", "clusterkv", "v1"),
                  ignore_errors=True)
    shutil.copytree(os.path.join(REPO, "proto"),
                    os.path.join(destination, "proto"), ignore=ignore)
    return package


def step(what, command, **kwargs):
    print("run_installed: %s: %s" % (what, " ".join(command)), flush=True)
    return subprocess.run(command, **kwargs).returncode


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work-dir", help="parent of the temporary folder")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary folder")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    missing = missing_prerequisites()
    if missing:
        print("run_installed: missing (scripts/setup.sh installs them): " +
              ", ".join(missing), file=sys.stderr)
        return 1
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ckv_python_", dir=args.work_dir)
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull,
               PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONDONTWRITEBYTECODE="1")
    try:
        package = copy_sources(os.path.join(work, "src"))
        venv = os.path.join(work, "venv")
        python = os.path.join(venv, "bin", "python")
        if step("venv", [sys.executable, "-m", "venv",
                         "--system-site-packages", venv]) != 0:
            return 1
        if step("install", [python, "-m", "pip", "install", "--no-index",
                            "--no-cache-dir", package], env=env) != 0:
            return 1
        status = step("pytest", [python, "-m", "pytest", "-q", "-p",
                                 "no:cacheprovider", HERE, *args.pytest_args],
                      cwd=work, env=env)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
