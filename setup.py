"""pip install .: the rgpu package, its C extension (stable ABI) and, built
by `make`, the rgpu-server binary the embedded local server runs.

Building needs the Debian packages of `make deps` (zstd, sqlite3, openblas)."""
import glob
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


PROGRAMS = ["rgpu-server", "rgpu-replay", "rgpu-diff", "rgpu-trace"]


class build_py_with_server(build_py):
    """The package carries the C programs (rgpu/bin/): the embedded server and
    the console scripts of rgpu_cli run them."""
    def run(self):
        super().run()
        subprocess.check_call(["make"] + [f"build/bin/{p}" for p in PROGRAMS])
        dst = os.path.join(self.build_lib, "rgpu", "bin")
        os.makedirs(dst, exist_ok=True)
        for p in PROGRAMS:
            shutil.copy2(f"build/bin/{p}", dst)


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
    py_modules=["rgpu_cli"],
    package_dir={"rgpu": "torchhook/rgpu", "": "torchhook"},
    ext_modules=[ext],
    cmdclass={"build_py": build_py_with_server},
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
