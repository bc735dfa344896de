"""Build script of the `clusterkv` Python package.

The gRPC stubs are generated at build time from the repository's
proto/clusterkv/v1/clusterkv.proto with `protoc` and `grpc_python_plugin`
(Debian: protobuf-compiler, protobuf-compiler-grpc) into the built package as
`clusterkv.v1`; they are never committed.

There is deliberately no pyproject.toml: without one, pip (Debian 12's 23.0)
builds with the setuptools and wheel already installed (python3-setuptools,
python3-wheel) instead of downloading them into an isolated environment, so
`pip install ./client/python` works offline. Newer pips that always isolate
the build need `pip install --no-build-isolation ./client/python`.
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_FILE = "clusterkv/v1/clusterkv.proto"


def proto_root():
    """The folder holding clusterkv/v1/clusterkv.proto: the repository's
    proto/ (this package lives in client/python/ of a ClusterKV checkout)."""
    root = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
    if not os.path.isfile(os.path.join(root, PROTO_FILE)):
        raise SystemExit(
            "clusterkv: %s not found under %s; build the package from a "
            "ClusterKV checkout (pip install ./client/python)" % (PROTO_FILE, root))
    return root


def tool(name, package):
    path = shutil.which(name)
    if path is None:
        raise SystemExit("clusterkv: `%s` not found; install the Debian package "
                         "%s (scripts/setup.sh does)" % (name, package))
    return path


class BuildPyWithStubs(build_py):
    """build_py, then protoc writes clusterkv/v1/clusterkv_pb2{,_grpc}.py into
    the build folder next to the package's own modules."""

    def run(self):
        super().run()
        out = self.build_lib
        subprocess.run(
            [tool("protoc", "protobuf-compiler"), "-I", proto_root(),
             "--python_out=" + out, "--grpc_python_out=" + out,
             "--plugin=protoc-gen-grpc_python=" +
             tool("grpc_python_plugin", "protobuf-compiler-grpc"), PROTO_FILE],
            check=True)
        init = os.path.join(out, "clusterkv", "v1", "__init__.py")
        with open(init, "w") as f:
            f.write('"""Generated from proto/clusterkv/v1/clusterkv.proto."""\n')


setup(
    name="clusterkv",
    version="0.1.0",
    description="Python client of the ClusterKV inference service (gRPC)",
    package_dir={"": "src"},
    packages=["clusterkv"],
    package_data={"clusterkv": ["py.typed"]},
    python_requires=">=3.9",
    # Debian 12: python3-grpcio, python3-protobuf (their metadata satisfies
    # these, so pip downloads nothing).
    install_requires=["grpcio>=1.44", "protobuf>=3.20"],
    cmdclass={"build_py": BuildPyWithStubs},
    zip_safe=False,
)
