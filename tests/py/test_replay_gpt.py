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
from models.train import tiny_gpt_steps
for loss in tiny_gpt_steps(8, data_seed=0, clip=True):
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
