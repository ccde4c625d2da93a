"""Golden traces: the reduced GPT's training (dropout on, clip, AdamW), eager
and compiled, records exactly the bytes it recorded when these digests were
taken. Refactors of the op table, the recorder or the hook must leave every
record byte as it was (op numbers, argument order and encoding, tensor and
storage ids, blob and template hashes); FREE batching depends on timing, so
FREEs count as the sorted set of freed ids (`rgpu-trace digest`).

A change that means to alter what is recorded updates GOLDEN below and says
why in its commit; the op-table hash then changes too, and an old trace is
refused with a version error (test_tools)."""
import os
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
BIN = os.environ.get("RGPU_BIN") or os.path.join(REPO, "build", "bin")

# torch version -> mode -> `rgpu-trace digest` line (taken with torch 2.13.0
# at commit 9a6dfcd, before the op-semantics refactor).
GOLDEN = {
    "2.13": {
        # retaken when attention (SDPA / SDPA_BACKWARD, dropout from Philox) and, in eager mode,
        # cross-entropy (CROSS_ENTROPY / CROSS_ENTROPY_BACKWARD) became one fused record each way
        "eager": "records * ops b05c8e3bb1a7709acf1ed4ae2078fc11 frees bb0c95e66a6b79903589b154fea1b963",
        # compiled: retaken at the frees-in-stream-order change (a compiled backward frees the saved
        # activations it is handed after their last use: FREEs inside its template, ALIAS where held),
        # and again at the fused attention records
        "compiled": "records * ops 19bb9ad797d1698e9936af418a7ab3fe frees 802e6fb664cb61f71ec4a825af60066c",
    },
}

PROGRAM = r"""
import sys, torch, rgpu
sys.path.insert(0, "tools")
from models.gpt import GPT, GPTConfig
from models.data import train_val, get_batch
compiled = sys.argv[1] == "compiled"
torch.manual_seed(0)
cfg = GPTConfig.tiny(dropout=0.1)
model = GPT(cfg).to("rgpu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True, capturable=compiled)
fwd = torch.compile(model, backend="rgpu") if compiled else model
def ostep():
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
if compiled:
    ostep = torch.compile(ostep, backend="rgpu")
train, _ = train_val(n_chars=20000)
g = torch.Generator().manual_seed(0)
for step in range(4):
    x, y = get_batch(train, 4, cfg.block_size, g, device="rgpu")
    _, loss = fwd(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    ostep()
    print(f"{loss.item():.6f}")
"""


def digest(tmp_path, mode):
    trace = tmp_path / f"{mode}.rgt"
    env = dict(os.environ, RGPU_RECORD=str(trace), PYTHONPATH=os.path.join(REPO, "torchhook"))
    env.pop("RGPU_SERVER", None)
    p = subprocess.run([sys.executable, "-c", PROGRAM, mode], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    losses = [float(v) for v in p.stdout.split()]
    assert len(losses) == 4 and all(3.0 < v < 4.5 for v in losses), p.stdout
    d = subprocess.run([os.path.join(BIN, "rgpu-trace"), "digest", str(trace)],
                       capture_output=True, text=True, timeout=120)
    assert d.returncode == 0, d.stderr
    return d.stdout.strip()


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_golden_trace_bytes(tmp_path, mode):
    ver = ".".join(torch.__version__.split(".")[:2])
    got = digest(tmp_path, mode)
    want = GOLDEN.get(ver, {}).get(mode)
    if want is None:
        # Another torch records other decompositions: the trace must still
        # be the same from run to run.
        (tmp_path / "again").mkdir()
        again = digest(tmp_path / "again", mode)
        assert got.split(" ", 2)[2] == again.split(" ", 2)[2], f"{got}\n{again}"
        return
    records, rest = got.split(" ", 2)[1], got.split(" ", 2)[2]
    assert int(records) > 100
    assert rest == want.split(" ", 2)[2], f"trace bytes changed: {got}\nwant        {want}"
