"""tools/bench/gpu.py, the side-by-side GPU benchmark, on this machine's CPU:
PyTorch CPU against an rgpu-server with the cpu backend, every family at a
thousandth of its size and the tiny GPT's training step. The benchmark's own
agreement check (each family's result on both sides, per-dtype tolerance) must
say yes for every line, and every line must be timed on both sides: what a
GPU host runs is then the same code with other sizes and devices. The check
itself can say no (a wrong checksum, a dropout that drops the wrong fraction,
a non-finite result)."""
import json
import os
import subprocess
import sys

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(REPO, "tools", "bench"))
import gpu  # noqa: E402

GROUPS = {"add", "gelu", "cast", "softmax", "layer_norm", "rms_norm", "cross_entropy", "sum", "dropout", "sdpa", "adamw",
          "conv2d", "matmul"}


def test_every_family_runs_on_both_sides_and_agrees(tmp_path):
    out = tmp_path / "gb.json"
    env = dict(os.environ)
    env.pop("RGPU_SERVER", None)
    r = subprocess.run([sys.executable, os.path.join(REPO, "tools", "bench", "gpu.py"), "--torch-device", "cpu",
                        "--backend", "cpu", "--scale", "0.001", "--models", "tiny", "--model-dtype", "f32",
                        "--no-compile", "--min-s", "0.01", "--max-iters", "3", "--json", str(out)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())["rows"]
    names = [x["name"] for x in rows]
    want = [f.name for f in gpu.families(0.001)] + ["tiny train step"]
    assert names == want, (names, want)
    assert {x["group"] for x in rows} == GROUPS | {"model"}
    for x in rows:
        assert "error" not in x["torch"] and "error" not in x["rgpu"], x
        assert x["torch"]["s"] > 0 and x["rgpu"]["s"] > 0, x
        assert x["agree"] is True, x
        assert x["ratio"] > 0
    assert "geometric mean of rgpu/PyTorch throughput" in r.stdout


def test_the_agreement_check_can_say_no():
    a = {"dtype": "float32", "check": {"sum": 10.0, "abs": 20.0, "finite": True}}
    assert gpu.agree(a, dict(a))[0] is True
    off = {"dtype": "float32", "check": {"sum": 10.01, "abs": 20.0, "finite": True}}
    assert gpu.agree(off, a)[0] is False
    bf = {"dtype": "bfloat16", "check": {"sum": 10.01, "abs": 20.0, "finite": True}}
    assert gpu.agree(bf, dict(bf, check={"sum": 10.0, "abs": 20.0, "finite": True}))[0] is True
    nan = {"dtype": "float32", "check": {"sum": float("nan"), "abs": float("nan"), "finite": False}}
    assert gpu.agree(nan, a)[0] is False
    assert gpu.agree({"check": {"dropped": 0.10}}, {"check": {"dropped": 0.101}})[0] is True
    assert gpu.agree({"check": {"dropped": 0.0}}, {"check": {"dropped": 0.1}})[0] is False
    assert gpu.agree({"check": {"loss": 4.2}}, {"check": {"loss": 4.5}})[0] is False


def test_gpt2_param_shapes_are_gpt2_small():
    import math
    assert sum(math.prod(s) for s in gpu.gpt2_param_shapes(1.0)) == 124_439_808   # nanoGPT's GPT-2 (lm_head tied to wte)
