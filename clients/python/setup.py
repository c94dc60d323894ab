"""Builds compute_sdk with its protobuf modules, generated here from the repository's protos.

The generated modules are not committed: at build time `protoc --python_out` (Debian:
protobuf-compiler) writes compute/v1 and common/v1 into compute_sdk/_pb of the build, and their
imports of each other are pointed there, so the installed package owns no top-level names but
compute_sdk. The protos are read from ../../proto (this directory inside the checkout), or
from $COMPUTE_PROTO_DIR."""
import os
import re
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = ["common/v1/usage.proto", "compute/v1/compute.proto"]
PACKAGES = ["common", "compute"]  # the protos' top-level directories


def generate(out_dir):
    """Writes compute_sdk/_pb/... under out_dir."""
    proto_dir = os.environ.get("COMPUTE_PROTO_DIR") or os.path.join(HERE, "..", "..", "proto")
    protoc = shutil.which("protoc")
    if not protoc:
        raise SystemExit("compute_sdk: protoc is needed to build the SDK (Debian: "
                         "apt-get install protobuf-compiler)")
    if not os.path.exists(os.path.join(proto_dir, PROTOS[1])):
        raise SystemExit(f"compute_sdk: no {PROTOS[1]} under {proto_dir}: build from the "
                         "repository's checkout, or set COMPUTE_PROTO_DIR")
    pb_dir = os.path.join(out_dir, "compute_sdk", "_pb")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([protoc, f"-I{proto_dir}", "-I/usr/include", f"--python_out={tmp}"]
                       + PROTOS, check=True)
        shutil.rmtree(pb_dir, ignore_errors=True)
        for proto in PROTOS:
            rel = proto[:-len(".proto")] + "_pb2.py"
            with open(os.path.join(tmp, rel)) as f:
                code = f.read()
            # "from common.v1 import usage_pb2" -> "from compute_sdk._pb.common.v1 import ..."
            code = re.sub(r"^from (%s)\." % "|".join(PACKAGES), r"from compute_sdk._pb.\1.",
                          code, flags=re.M)
            dest = os.path.join(pb_dir, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w") as f:
                f.write(code)
    for root, _dirs, _files in os.walk(pb_dir):
        open(os.path.join(root, "__init__.py"), "a").close()


class BuildWithProtos(build_py):
    def run(self):
        super().run()
        generate(self.build_lib)


setup(cmdclass={"build_py": BuildWithProtos})
