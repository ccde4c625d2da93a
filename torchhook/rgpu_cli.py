"""Console scripts of an installed rgpu (pip install .): rgpu-server,
rgpu-replay, rgpu-diff and rgpu-trace run the C programs built into the
package (rgpu/bin/). A module of its own, outside the rgpu package, so that
starting the server does not import torch."""
import importlib.util
import os
import sys


def _exec(name):
    spec = importlib.util.find_spec("rgpu")            # finds the package without importing it
    path = os.path.join(list(spec.submodule_search_locations)[0], "bin", name)
    if not os.access(path, os.X_OK):
        sys.exit(f"{name}: not built into this rgpu install ({path} missing)")
    os.execv(path, [name] + sys.argv[1:])


def server():
    _exec("rgpu-server")


def replay():
    _exec("rgpu-replay")


def diff():
    _exec("rgpu-diff")


def trace():
    _exec("rgpu-trace")
