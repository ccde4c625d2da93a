"""The cpu backend's results never depend on its thread count (issue 33):
a GPT trained 3 AdamW steps and a small CNN (conv2d, batch norm, max pool,
cross_entropy) trained 2 SGD steps

  * live, against rgpu-servers started with --threads 1 and --threads 3, give
    bitwise identical losses and parameters;
  * recorded (the --threads 1 run, RGPU_RECORD), replay with rgpu-replay
    --backend cpu --threads 1, 2 and 7 to byte-identical --dump-results, and
    the 7-thread replay verifies bitwise against what the live run received.

The sizes are chosen so that the pool really splits the work: activations of
128K-256K elements (the pointwise grain is 32K elements), GEMMs with M = 256
tokens, conv2d over a batch of 8 at 32x32. What breaks these tests: a kernel
that splits by the number of threads (chunk = n / threads), a reduction that
adds its partials in the order threads finish or with a float atomic, a random
op whose stream depends on which thread draws it, a GEMM blocked by thread.

The server is $RGPU_SERVER_BIN (else this checkout's build/bin/rgpu-server),
rgpu-replay the one beside it (or $RGPU_BIN/rgpu-replay)."""
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
SERVER = os.environ.get("RGPU_SERVER_BIN") or os.path.join(REPO, "build", "bin", "rgpu-server")
BIN = os.environ.get("RGPU_BIN") or os.path.dirname(os.path.abspath(SERVER))
REPLAY = os.path.join(BIN, "rgpu-replay")

# The training program, run in a child per server: prints one line per loss
# (float.hex: bitwise) and saves every parameter and buffer (read back with
# .cpu(), so they are wait results in the trace too) to argv[1].
PROGRAM = r"""
import sys, torch, rgpu
import torch.nn.functional as F
sys.path.insert(0, "tools")
from models.data import get_batch, train_val
from models.gpt import GPT, GPTConfig
from models.cnn import ResNetSmall

out = {}
# GPT: 2 layers, 4 heads, 128 wide, 64 characters, batch 4: M = 256 rows per GEMM,
# MLP activations 256x512 = 128K elements; dropout on (random ops on the server)
torch.manual_seed(0)
cfg = GPTConfig(n_layer=2, n_head=4, n_embd=128, block_size=64, dropout=0.1)
gpt = GPT(cfg).to("rgpu")
opt = torch.optim.AdamW(gpt.parameters(), lr=1e-3, weight_decay=0.1)
train, _ = train_val(n_chars=20000)
g = torch.Generator().manual_seed(0)
for _ in range(3):
    x, y = get_batch(train, 4, cfg.block_size, g, device="rgpu")
    _, loss = gpt(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(gpt.parameters(), 1.0)
    opt.step()
    print("gpt", loss.item().hex(), flush=True)
for k, v in gpt.state_dict().items():
    out["gpt." + k] = v.cpu()

# CNN: conv2d/batch norm/relu/max pool/linear, batch 8 of 3x32x32 (16x32x32
# activations: 128K elements), SGD with momentum
torch.manual_seed(0)
cnn = ResNetSmall(classes=10, width=16).to("rgpu")
sgd = torch.optim.SGD(cnn.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
gd = torch.Generator().manual_seed(1)
for _ in range(2):
    x = torch.randn(8, 3, 32, 32, generator=gd).to("rgpu")
    y = torch.randint(0, 10, (8,), generator=gd).to("rgpu")
    loss = F.cross_entropy(cnn(x), y)
    sgd.zero_grad()
    loss.backward()
    sgd.step()
    print("cnn", loss.item().hex(), flush=True)
for k, v in cnn.state_dict().items():
    out["cnn." + k] = v.cpu()
torch.save(out, sys.argv[1])
"""


def start_server(tmp, threads):
    """rgpu-server --backend cpu --threads N on a Unix socket in tmp; returns
    (process, client environment)."""
    sock, tok = os.path.join(tmp, "sock"), os.path.join(tmp, "token")
    log = open(os.path.join(tmp, "server.log"), "wb")
    p = subprocess.Popen([SERVER, "--unix", sock, "--backend", "cpu", "--threads", str(threads),
                          "--journal", "none", "--token-file", tok, "--quiet"], stdout=log, stderr=log)
    deadline = time.monotonic() + 20
    while not os.path.exists(sock):
        assert p.poll() is None, "rgpu-server exited: " + open(log.name).read()
        assert time.monotonic() < deadline, "rgpu-server did not start"
        time.sleep(0.01)
    env = dict(os.environ, RGPU_SERVER="unix:" + sock, RGPU_TOKEN_FILE=tok,
               PYTHONPATH=os.path.join(REPO, "torchhook") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("RGPU_RECORD", None)
    return p, env


def stop(p):
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def train(tmp, threads, record=None):
    """The training program against a --threads server: (loss lines, state dict)."""
    import torch
    os.makedirs(tmp, exist_ok=True)
    p, env = start_server(tmp, threads)
    try:
        if record:
            env["RGPU_RECORD"] = record
        params = os.path.join(tmp, "params.pt")
        r = subprocess.run([sys.executable, "-c", PROGRAM, params], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        stop(p)
    losses = [line for line in r.stdout.splitlines() if line.startswith(("gpt ", "cnn "))]
    assert len(losses) == 5, r.stdout
    return losses, torch.load(params)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    if not os.path.exists(SERVER) or not os.path.exists(REPLAY):
        pytest.skip(f"{SERVER} or {REPLAY} not built")
    tmp = tmp_path_factory.mktemp("threads")
    trace = str(tmp / "train.rgt")
    one = train(str(tmp / "t1"), 1, record=trace)
    three = train(str(tmp / "t3"), 3)
    return tmp, trace, one, three


def test_live_losses_and_parameters_bitwise(live):
    import torch
    _, _, (loss1, par1), (loss3, par3) = live
    assert loss1 == loss3, f"losses at --threads 1 {loss1} and 3 {loss3}"
    assert par1.keys() == par3.keys()
    assert len(par1) > 20
    for k in par1:
        assert par1[k].dtype == par3[k].dtype and par1[k].shape == par3[k].shape, k
        assert torch.equal(par1[k], par3[k]), f"{k} differs between --threads 1 and 3"
    # the run trained: the GPT's loss moved and is finite
    vals = [float.fromhex(line.split()[1]) for line in loss1]
    assert all(v == v and 0 < v < 20 for v in vals) and vals[0] != vals[2]


def test_replay_bitwise_at_1_2_7_threads(live):
    tmp, trace, (losses, params), _ = live
    dumps = {}
    for t in (1, 2, 7):
        dump = str(tmp / f"dump{t}.txt")
        cmd = [REPLAY, trace, "--backend", "cpu", "--threads", str(t), "--dump-results", dump, "--quiet"]
        if t == 7:
            cmd.append("--verify")      # bitwise against the live (--threads 1) run's results
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        dumps[t] = open(dump, "rb").read()
    # every loss and every parameter/buffer read back is a result line
    assert dumps[1].count(b"\n") >= len(losses) + len(params), dumps[1][:500]
    for t in (2, 7):
        if dumps[t] != dumps[1]:
            a, b = dumps[1].splitlines(), dumps[t].splitlines()
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            pytest.fail(f"--threads {t} replay differs from --threads 1 at result line {first}: "
                        f"{a[first][:120] if first < len(a) else b''!r} vs {b[first][:120] if first < len(b) else b''!r}")


def test_replay_bitwise_across_vector_math_builds(live):
    """The cpu backend picks its vector math rows (exp, erf, tanh: GELU,
    softmax, cross-entropy, sigmoid) for the CPU it runs on: AVX-512, AVX2 or
    the x86-64 baseline. The same trace replays to byte-identical results with
    each (RGPU_CPU_ISA caps the choice), so a trace recorded on one host
    replays bitwise on another whatever its vector width."""
    tmp, trace, _, _ = live
    dumps = {}
    for isa in ("base", "avx2", "avx512"):
        dump = str(tmp / f"dump-{isa}.txt")
        env = dict(os.environ, RGPU_CPU_ISA=isa)
        r = subprocess.run([REPLAY, trace, "--backend", "cpu", "--threads", "2", "--dump-results", dump,
                            "--quiet"], capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        dumps[isa] = open(dump, "rb").read()
    assert dumps["base"].count(b"\n") > 10
    for isa in ("avx2", "avx512"):
        assert dumps[isa] == dumps["base"], f"RGPU_CPU_ISA={isa} replay differs from the baseline build"


# Float pointwise ops in float32, float16 and bfloat16 (float opmath): every
# family of kern_f32, lengths that leave tails at 4, 8 and 16 lanes, NaN, inf,
# -0 and denormals among the values, scalars and broadcasts, strided inputs,
# in-place forms; each result read back (a wait result in the trace).
POINTWISE = r"""
import sys, torch, rgpu
import torch.nn.functional as F
g = torch.Generator().manual_seed(3)
outs = []
for dt in (torch.float32, torch.float16, torch.bfloat16):
    for n in (1, 7, 29, 1000, 40003):
        x = (torch.randn(n, generator=g) * 3).to(dt)
        y = (torch.randn(n, generator=g) * 3).to(dt)
        if n >= 7:
            x[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-40, 0.0]).to(dt)
        w = torch.rand(n, generator=g).to(dt)
        a, b, c = x.to("rgpu"), y.to("rgpu"), w.to("rgpu")
        p = b.abs() + 0.5
        r = [a.exp(), a.log(), p.log1p(), a.sqrt(), p.rsqrt(), a.sigmoid(), a.tanh(), F.gelu(a), F.gelu(a, approximate="tanh"),
             F.silu(a), a.abs(), a.neg(), a.reciprocal(), a.floor(), a.sin(), a.cos(), torch.erf(a), a.relu(), a.sign(),
             a + b, a - 2.5 * b, a * b, a / p, a * 0.37, a ** 2, p ** b, torch.atan2(a, b), torch.maximum(a, b),
             torch.minimum(a, b), torch.fmod(a, p), a.clamp(-1, 2), torch.where(a > b, a, b), a < b,
             torch.lerp(a, b, 0.3), torch.lerp(a, b, 0.7), torch.lerp(a, b, c), torch.addcmul(a, b, c, value=0.5),
             torch.addcdiv(a, b, p, value=-0.25), torch.ops.aten.gelu_backward(b, a),
             torch.ops.aten.sigmoid_backward(b, c), torch.ops.aten.threshold_backward(b, a, 0.1),
             torch.ops.aten.tanh_backward(b, c), torch.ops.aten.silu_backward(b, a)]
        if n >= 29:
            m = a[: (n // 2) * 2].view(-1, 2)
            r += [m.t() * 2, m + m[:1], m.t().exp()]
        t = a.clone()
        t.mul_(0.999).lerp_(b, 0.1).addcdiv_(b, p, value=0.01).add_(c, alpha=-0.5)
        r.append(t)
        outs += [v.cpu() for v in r]
print(len(outs))
"""


def test_pointwise_bitwise_across_vector_builds(tmp_path):
    """kern_f32 (the float pointwise kernel of the cpu backend) runs in the
    build for this CPU, AVX-512, AVX2 or the baseline: a trace of every
    family over float32/float16/bfloat16, tails, NaN/inf/denormals,
    broadcasts, strided and in-place forms replays to byte-identical results
    with each (RGPU_CPU_ISA caps it)."""
    os.makedirs(tmp_path, exist_ok=True)
    p, env = start_server(str(tmp_path), 2)
    trace = str(tmp_path / "pw.rgt")
    try:
        env["RGPU_RECORD"] = trace
        r = subprocess.run([sys.executable, "-c", POINTWISE], env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        stop(p)
    dumps = {}
    for isa in ("base", "avx2", "avx512"):
        dump = str(tmp_path / f"dump-{isa}.txt")
        r = subprocess.run([REPLAY, trace, "--backend", "cpu", "--threads", "2", "--dump-results", dump, "--quiet"],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, RGPU_CPU_ISA=isa))
        assert r.returncode == 0, r.stdout + r.stderr
        dumps[isa] = open(dump, "rb").read()
    assert dumps["base"].count(b"\n") > 500
    for isa in ("avx2", "avx512"):
        if dumps[isa] != dumps["base"]:
            a, b = dumps["base"].splitlines(), dumps[isa].splitlines()
            first = next(i for i, (u, v) in enumerate(zip(a, b)) if u != v)
            pytest.fail(f"RGPU_CPU_ISA={isa} differs from the baseline at result line {first}")
