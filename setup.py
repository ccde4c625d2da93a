"""pip install .: the rgpu package, its C extension (stable ABI) and, built
by `make`, the rgpu-server binary the embedded local server runs.

Building needs the Debian packages of `make deps` (zstd, sqlite3, openblas)."""
import glob
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class build_py_with_server(build_py):
    def run(self):
        super().run()
        subprocess.check_call(["make", "build/bin/rgpu-server"])
        dst = os.path.join(self.build_lib, "rgpu", "bin")
        os.makedirs(dst, exist_ok=True)
        shutil.copy2("build/bin/rgpu-server", dst)


ext = Extension(
    "rgpu._C",
    sources=["recorder/pyext.c", "recorder/client.c"] + sorted(glob.glob("trace-format/*.c")),
    include_dirs=["trace-format", "recorder"],
    define_macros=[("_GNU_SOURCE", None), ("Py_LIMITED_API", "0x030B0000")],
    extra_compile_args=["-std=c11"],
    libraries=["zstd", "sqlite3", "pthread"],
    py_limited_api=True,
)

setup(
    packages=["rgpu"],
    package_dir={"rgpu": "torchhook/rgpu"},
    ext_modules=[ext],
    cmdclass={"build_py": build_py_with_server},
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
