"""Host waits of a steady eager training step on the cuda backend (issue 27):
the reduced GPT of gpt_trace.py (tied embeddings, cross-entropy, AdamW, grad
clipping) trained live on an embedded server under cudaemu, whose
CUDAEMU_STATS counts every call that blocked the host on queued device work
and every device allocation. Between 3 and 5 steps the server must add
exactly one host wait per step -- the step's loss.item() -- and no cudaMalloc:
the index checks of embedding and cross-entropy stay on the device (the
session's device error word), embedding backward groups its indices on the
device, and small uploads share a staging slot. Run by run-tests.sh."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_BACKEND") != "cuda",
                                reason="counts the cuda backend's host waits under cudaemu (run-tests.sh)")

HERE = os.path.dirname(os.path.abspath(__file__))


def run(tmp_path, steps):
    stats = tmp_path / f"stats-{steps}"
    stats.mkdir()
    env = dict(os.environ, CUDAEMU_STATS=str(stats))
    env.pop("RGPU_SERVER", None)       # an embedded server of its own: its counts alone
    r = subprocess.run([sys.executable, os.path.join(HERE, "gpt_trace.py"), str(steps)], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("loss ") == steps, r.stdout
    files = list(stats.iterdir())
    assert len(files) == 1, files      # the server's (the client runs no CUDA)
    return json.loads(files[0].read_text())


def test_one_host_wait_per_step_and_no_allocation(tmp_path):
    a, b = run(tmp_path, 3), run(tmp_path, 5)
    waits = {k: (b["host_waits"].get(k, 0) - a["host_waits"].get(k, 0)) / 2
             for k in set(a["host_waits"]) | set(b["host_waits"])}
    assert sum(waits.values()) == 1, waits           # the loss.item() of each step, nothing else
    allocs = {k: (b["allocations"].get(k, 0) - a["allocations"].get(k, 0)) / 2 for k in ("cudaMalloc", "cudaFree")}
    assert allocs == {"cudaMalloc": 0, "cudaFree": 0}, allocs
    assert b["kernel_launches"] > a["kernel_launches"] > 0
