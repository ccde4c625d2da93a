"""Host waits of a steady eager training step on the cuda backend (issue 27):
the reduced GPT of gpt_trace.py (tied embeddings, cross-entropy, AdamW, grad
clipping) trained live on an embedded server under cudaemu, whose
CUDAEMU_STATS counts every call that blocked the host on queued device work
and every device allocation. Between 3 and 5 steps the server must add
exactly one host wait per step -- the step's loss.item() -- and no cudaMalloc:
the index checks of embedding and cross-entropy stay on the device (the
session's device error word), embedding backward groups its indices on the
device, and small uploads share a staging slot. Compiled with graphs on, the
forward and backward add one graph launch each per step, bitwise the losses of
graphs off, with dropout too, and a compiled ResNet (batch norm) likewise. The server's own per-session log line (host waits, cudaMalloc,
graph launches, counted by the backend) agrees with the layer's counts. Run
by run-tests.sh."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_BACKEND") != "cuda",
                                reason="counts the cuda backend's host waits under cudaemu (run-tests.sh)")

HERE = os.path.dirname(os.path.abspath(__file__))


COMPILED = """
import sys, torch
sys.path.insert(0, sys.argv[2])
import rgpu
from models.gpt import GPT, GPTConfig
from models.train import train_val, get_batch
torch.manual_seed(0)
model = GPT(GPTConfig.tiny(dropout=float(sys.argv[3]))).to("rgpu")
cm = torch.compile(model, backend="rgpu")
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
train, _ = train_val(50_000)
g = torch.Generator().manual_seed(0)
for i in range(int(sys.argv[1])):
    x, y = get_batch(train, 4, 32, g)
    _, loss = cm(x.to("rgpu"), y.to("rgpu"))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("loss", loss.item().hex())
"""


# a small ResNet (batch norm, residuals, max pool), compiled, SGD with momentum
CNN = """
import sys, torch
sys.path.insert(0, sys.argv[2])
import rgpu
from models.cnn import ResNetSmall
torch.manual_seed(0)
model = ResNetSmall().to("rgpu")
cm = torch.compile(model, backend="rgpu")
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
g = torch.Generator().manual_seed(0)
for i in range(int(sys.argv[1])):
    x, y = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
    loss = torch.nn.functional.cross_entropy(cm(x.to("rgpu")), y.to("rgpu"))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("loss", loss.item().hex())
"""


def run(tmp_path, steps, compiled=False, graphs="0", dropout=0.0, script=None):
    tag = f"{steps}-{compiled}-{graphs}-{dropout}-{'cnn' if script else 'gpt'}"
    stats = tmp_path / f"stats-{tag}"
    stats.mkdir()
    log = tmp_path / f"server-{tag}.log"
    env = dict(os.environ, CUDAEMU_STATS=str(stats), RGPU_GRAPHS=graphs, RGPU_SERVER_LOG=str(log))
    env.pop("RGPU_SERVER", None)       # an embedded server of its own: its counts alone
    tools = os.path.join(HERE, "..", "..", "tools")
    argv = ["-c", script or COMPILED, str(steps), tools, str(dropout)] if compiled \
        else [os.path.join(HERE, "gpt_trace.py"), str(steps)]
    r = subprocess.run([sys.executable] + argv, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("loss ") == steps, r.stdout
    files = list(stats.iterdir())
    assert len(files) == 1, files      # the server's (the client runs no CUDA)
    d = json.loads(files[0].read_text())
    d["losses"] = [ln for ln in r.stdout.splitlines() if ln.startswith("loss ")]
    # the server's line for the session, at its end (before it answers the client's BYE)
    pat = re.compile(r"session 1: cuda: (\d+) ops, (\d+) host waits, (\d+) cudaMalloc, (\d+) cudaFree, "
                     r"(\d+) graph launches")
    for _ in range(100):
        m = pat.search(log.read_text() if log.exists() else "")
        if m:
            break
        time.sleep(0.1)
    assert m, log.read_text() if log.exists() else "no server log"
    d["server"] = dict(zip(("ops", "host_waits", "cudaMalloc", "cudaFree", "graph_launches"), map(int, m.groups())))
    return d


def server_per_step(a, b, steps):
    return {k: (b["server"][k] - a["server"][k]) / steps for k in a["server"]}


def test_one_host_wait_per_step_and_no_allocation(tmp_path):
    a, b = run(tmp_path, 3), run(tmp_path, 5)
    waits = {k: (b["host_waits"].get(k, 0) - a["host_waits"].get(k, 0)) / 2
             for k in set(a["host_waits"]) | set(b["host_waits"])}
    assert sum(waits.values()) == 1, waits           # the loss.item() of each step, nothing else
    allocs = {k: (b["allocations"].get(k, 0) - a["allocations"].get(k, 0)) / 2 for k in ("cudaMalloc", "cudaFree")}
    assert allocs == {"cudaMalloc": 0, "cudaFree": 0}, allocs
    assert b["kernel_launches"] > a["kernel_launches"] > 0
    srv = server_per_step(a, b, 2)
    assert (srv["host_waits"], srv["cudaMalloc"], srv["cudaFree"], srv["graph_launches"]) == (1, 0, 0, 0), srv
    assert srv["ops"] > 100, srv


def test_compiled_step_replays_forward_and_backward_as_one_graph_each(tmp_path):
    """torch.compile'd GPT with graphs on (RGPU_GRAPHS=1): from the third step
    its forward and backward templates replay as one cudaGraphLaunch each
    (their index and target checks captured with serials relative to each
    launch), the step still blocks the host once and allocates nothing, and
    the losses are bitwise those of graphs off."""
    a, b = run(tmp_path, 4, True, "1"), run(tmp_path, 6, True, "1")
    assert (b["graph_launches"] - a["graph_launches"]) / 2 == 2, (a["graph_launches"], b["graph_launches"])
    waits = sum(b["host_waits"].values()) - sum(a["host_waits"].values())
    assert waits / 2 == 1, (a["host_waits"], b["host_waits"])
    assert b["allocations"].get("cudaMalloc", 0) == a["allocations"].get("cudaMalloc", 0)
    srv = server_per_step(a, b, 2)
    assert (srv["host_waits"], srv["cudaMalloc"], srv["graph_launches"]) == (1, 0, 2), srv
    off = run(tmp_path, 6, True, "0")
    assert off["graph_launches"] == 0 and off["losses"] == b["losses"], (off["losses"], b["losses"])


def test_compiled_step_with_dropout_replays_as_graphs(tmp_path):
    """The same with dropout 0.1 (attention's and the residuals'): the random
    ops are captured reading their Philox pair from the graph instance's
    device buffer, written before each launch with the call's pair, so the
    forward and backward still replay as one graph launch each and the losses
    are bitwise those of graphs off (and not those without dropout)."""
    a, b = run(tmp_path, 4, True, "1", 0.1), run(tmp_path, 6, True, "1", 0.1)
    assert (b["graph_launches"] - a["graph_launches"]) / 2 == 2, (a["graph_launches"], b["graph_launches"])
    srv = server_per_step(a, b, 2)
    assert (srv["host_waits"], srv["cudaMalloc"], srv["graph_launches"]) == (1, 0, 2), srv
    off = run(tmp_path, 6, True, "0", 0.1)
    assert off["graph_launches"] == 0 and off["losses"] == b["losses"], (off["losses"], b["losses"])
    plain = run(tmp_path, 6, True, "0", 0.0)
    assert plain["losses"][2:] != b["losses"][2:]


def test_compiled_cnn_replays_as_graphs(tmp_path):
    """A compiled ResNet (batch norm with its running statistics, residuals,
    max pool; SGD with momentum) with graphs on: once its inputs have settled
    (by the eighth step) its forward and backward replay as one graph launch
    each per step, one host wait per step (the loss), no cudaMalloc, and the
    losses are bitwise those of graphs off."""
    a, b = run(tmp_path, 8, True, "1", script=CNN), run(tmp_path, 12, True, "1", script=CNN)
    srv = server_per_step(a, b, 4)
    assert (srv["host_waits"], srv["cudaMalloc"], srv["graph_launches"]) == (1, 0, 2), srv
    off = run(tmp_path, 12, True, "0", script=CNN)
    assert off["graph_launches"] == 0 and off["losses"] == b["losses"], (off["losses"], b["losses"])
