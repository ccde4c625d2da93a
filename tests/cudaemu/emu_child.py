"""Shared by the cudaemu tests that count what a child process made the cuda
backend do: run a script with its own embedded server under CUDAEMU_STATS
and read back the server's counts and the tensors the script saved."""
import json
import os
import subprocess
import sys

import torch


def run_counted(tmp_path, tag, script, args=(), env=None, timeout=600):
    """Runs `python -c script OUT *args` with an embedded server of its own
    (RGPU_SERVER unset: its counts alone) and env added; returns (the
    CUDAEMU_STATS files' JSON, one per process, and torch.load(OUT))."""
    stats = tmp_path / f"stats-{tag}"
    stats.mkdir()
    out = tmp_path / f"out-{tag}.pt"
    e = dict(os.environ, CUDAEMU_STATS=str(stats), **(env or {}))
    e.pop("RGPU_SERVER", None)
    r = subprocess.run([sys.executable, "-c", script, str(out), *map(str, args)], env=e, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return [json.loads(f.read_text()) for f in stats.iterdir()], torch.load(out)
