"""The trace is the program: record the reduced GPT training live (dropout
on), then replay it offline. rgpu-replay --verify must reproduce every value
the live run received (bitwise: same backend), and two replays stepping side
by side (rgpu-diff --a cpu --b cpu) must agree bitwise on every op's output."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
BIN = os.environ.get("RGPU_BIN") or os.path.join(REPO, "build", "bin")

PROGRAM = r"""
import sys, torch, rgpu
sys.path.insert(0, "tools")
from models.gpt import GPT, GPTConfig
from models.data import train_val, get_batch
torch.manual_seed(0)
cfg = GPTConfig.tiny(dropout=0.1)
model = GPT(cfg).to("rgpu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
train, _ = train_val(n_chars=20000)
g = torch.Generator().manual_seed(0)
for step in range(8):
    x, y = get_batch(train, 4, cfg.block_size, g, device="rgpu")
    _, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"{loss.item():.6f}")
print(rgpu.stats()["ops"])
"""


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def test_gpt_training_trace_replays_and_verifies(tmp_path):
    trace = tmp_path / "gpt.rgt"
    env = dict(os.environ, RGPU_RECORD=str(trace), PYTHONPATH=os.path.join(REPO, "torchhook"))
    env.pop("RGPU_SERVER", None)
    p = run([sys.executable, "-c", PROGRAM], env=env, cwd=REPO)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split()
    losses, ops = [float(v) for v in lines[:-1]], int(lines[-1])
    assert len(losses) == 8 and ops > 1000

    r = run([os.path.join(BIN, "rgpu-replay"), str(trace), "--verify"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "8 results verified (bitwise)" in r.stdout + r.stderr, r.stdout + r.stderr

    d = run([os.path.join(BIN, "rgpu-diff"), str(trace), "--a", "cpu", "--b", "cpu", "--quiet"])
    assert d.returncode == 0, d.stdout + d.stderr
    assert f"{ops}" in d.stdout + d.stderr or "0 over tolerance" in d.stdout + d.stderr
