"""Random ops on rgpu: the (seed, offset) generator, distributions (statistics on
1e5 samples, not PyTorch's bit streams), determinism within and across
processes, dropout forward/backward, and the Philox contract of philox.h."""
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rgpu

DEV = "rgpu"
N = 100_000
TORCHHOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torchhook")
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def state():
    """(seed, offset) of the rgpu generator."""
    b = torch.rgpu.get_rng_state().numpy().tobytes()
    return int.from_bytes(b[:8], "little"), int.from_bytes(b[8:], "little")


def waits():
    return rgpu.stats()["waits"]


# --- a reference Philox4x32-10 (replayer/cpu/philox.h), vectorised over elements ----------

def philox(seed, offset, n):
    """w0..w3 (uint32 arrays of n) for elements 0..n-1 of a record carrying (seed, offset)."""
    i = np.arange(n, dtype=np.uint64)
    c0 = (i & 0xFFFFFFFF).astype(np.uint64)
    c1 = (i >> np.uint64(32)).astype(np.uint64)
    c2 = np.full(n, offset & 0xFFFFFFFF, dtype=np.uint64)
    c3 = np.full(n, offset >> 32, dtype=np.uint64)
    k0, k1 = seed & 0xFFFFFFFF, seed >> 32
    m32 = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & m32
        hi1, lo1 = p1 >> np.uint64(32), p1 & m32
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        k0 = (k0 + 0x9E3779B9) & 0xFFFFFFFF
        k1 = (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return [c.astype(np.uint32) for c in (c0, c1, c2, c3)]


def test_philox_reference_known_answers():
    w = philox(0, 0, 1)
    assert [int(x[0]) for x in w] == [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]


@pytest.mark.parametrize("seed", [0, 1234, 2**63 + 12345, 2**64 - 1])
def test_uniform_is_philox_of_seed_and_offset(seed):
    torch.rgpu.manual_seed(seed)
    x = torch.empty(3, 5, device=DEV)
    x.uniform_()                               # offset 0
    y = torch.empty(7, device=DEV).uniform_(-2.0, 3.0)  # offset 1
    w = philox(seed, 0, 15)
    want = (w[0] >> 8).astype(np.float32) * np.float32(2.0 ** -24)
    assert np.array_equal(x.cpu().numpy().ravel(), want)
    w = philox(seed, 1, 7)
    u = (w[0] >> 8).astype(np.float32) * np.float32(2.0 ** -24)
    want = np.float32(-2.0) + u * np.float32(5.0)
    assert np.array_equal(y.cpu().numpy(), want)


def test_elements_follow_logical_order_not_memory_order():
    torch.manual_seed(7)
    a = torch.empty(4, 6, device=DEV).uniform_()
    torch.manual_seed(7)
    b = torch.empty(6, 4, device=DEV).t().uniform_()      # non-contiguous, same logical shape
    assert torch.equal(a.cpu(), b.cpu())


def test_randperm_is_philox_sort():
    torch.rgpu.manual_seed(99)
    p = torch.randperm(50, device=DEV).cpu().numpy()
    w = philox(99, 0, 50)
    key = (w[0].astype(np.uint64) << np.uint64(32)) | w[1].astype(np.uint64)
    assert np.array_equal(p, np.lexsort((np.arange(50), key)))


# --- the generator state -------------------------------------------------------------------

def test_torch_manual_seed_reaches_rgpu_and_resets_offset():
    torch.manual_seed(5)
    torch.rand(3, device=DEV)
    assert state() == (5, 1)
    torch.manual_seed(1234)
    assert state() == (1234, 0)
    assert torch.rgpu.initial_seed() == 1234
    torch.manual_seed(-1)
    assert state() == (2**64 - 1, 0)


def test_each_random_record_advances_offset_by_one():
    torch.manual_seed(0)
    x = torch.empty(1000, device=DEV)
    calls = [lambda: x.uniform_(), lambda: x.normal_(), lambda: x.bernoulli_(0.5),
             lambda: x.random_(0, 3), lambda: torch.rand(10, device=DEV),
             lambda: torch.randn(2, 3, device=DEV), lambda: torch.randint(0, 5, (4,), device=DEV),
             lambda: torch.randperm(9, device=DEV), lambda: F.dropout(x, 0.3),
             lambda: torch.rand_like(x), lambda: torch.bernoulli(x.uniform_())]
    off = state()[1]
    for i, c in enumerate(calls):
        c()
        got = state()[1]
        assert got == off + (2 if i == len(calls) - 1 else 1), i
        off = got


def test_rng_state_roundtrip():
    torch.manual_seed(42)
    torch.rand(5, device=DEV)
    s = torch.rgpu.get_rng_state()
    assert s.dtype == torch.uint8 and s.shape == (16,) and s.device.type == "cpu"
    a = torch.rand(100, device=DEV).cpu()
    torch.rand(100, device=DEV)
    torch.rgpu.set_rng_state(s)
    assert state() == (42, 1)
    b = torch.rand(100, device=DEV).cpu()
    assert torch.equal(a, b)
    assert torch.rgpu.get_rng_state_all()[0].tolist() == torch.rgpu.get_rng_state().tolist()
    with pytest.raises(Exception):
        torch.rgpu.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_fork_rng():
    torch.manual_seed(3)
    before = state()
    with torch.random.fork_rng(device_type="rgpu"):
        torch.rgpu.manual_seed(77)
        torch.rand(10, device=DEV)
        assert state() == (77, 1)
    assert state() == before
    a = torch.rand(10, device=DEV).cpu()
    torch.manual_seed(3)
    assert torch.equal(a, torch.rand(10, device=DEV).cpu())


def test_seed_and_initial_seed():
    torch.rgpu.seed()
    s1 = torch.rgpu.initial_seed()
    torch.rgpu.seed()
    s2 = torch.rgpu.initial_seed()
    assert s1 != s2 and state() == (s2, 0)
    s = torch.seed()                 # torch.seed() seeds every device with one seed
    assert torch.rgpu.initial_seed() == s


def test_threads_never_share_an_offset():
    torch.manual_seed(11)
    outs = []
    lock = threading.Lock()

    def work():
        mine = [torch.rand(8, device=DEV) for _ in range(50)]
        with lock:
            outs.extend(mine)
    ts = [threading.Thread(target=work) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert state() == (11, 400)
    rows = {tuple(t.cpu().tolist()) for t in outs}
    assert len(rows) == 400


def test_random_op_in_backward_thread():
    class Noisy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):           # runs on autograd's rgpu worker thread
            return g + torch.rand_like(g) * 0

    torch.manual_seed(21)
    x = torch.ones(8, device=DEV, requires_grad=True)
    Noisy.apply(x).sum().backward()
    assert state() == (21, 1)
    assert x.grad.cpu().tolist() == [1.0] * 8


# --- determinism -----------------------------------------------------------------------------

def test_same_seed_same_values_bitwise():
    for make in (lambda: torch.rand(1000, device=DEV), lambda: torch.randn(33, 7, device=DEV),
                 lambda: torch.randint(-5, 5, (100,), device=DEV),
                 lambda: torch.randperm(300, device=DEV),
                 lambda: torch.empty(500, dtype=torch.float16, device=DEV).normal_(1, 2),
                 lambda: torch.bernoulli(torch.full((200,), 0.5, device=DEV))):
        torch.manual_seed(2024)
        a1, a2 = make().cpu(), make().cpu()
        torch.manual_seed(2024)
        b1, b2 = make().cpu(), make().cpu()
        assert torch.equal(a1, b1) and torch.equal(a2, b2)
        assert not torch.equal(a1, a2)
        torch.manual_seed(2025)
        assert not torch.equal(make().cpu(), a1)


_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
import torch, torch.nn.functional as F
import rgpu
torch.manual_seed(int(sys.argv[2]))
x = torch.ones(64, 33, device="rgpu")
torch.rand(5, device="rgpu")
y, m = torch.ops.aten.native_dropout(x, 0.4, True)
print("".join("1" if v else "0" for v in m.cpu().flatten().tolist()))
print(repr(torch.randn(4, device="rgpu").cpu().tolist()))
"""


def _child(seed):
    env = dict(os.environ)
    env.pop("RGPU_RECORD", None)
    r = subprocess.run([sys.executable, "-c", _CHILD, TORCHHOOK, str(seed)], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("\n")


def test_dropout_mask_is_a_pure_function_of_seed_offset_shape_across_processes():
    torch.manual_seed(31)
    x = torch.ones(64, 33, device=DEV)
    torch.rand(5, device=DEV)
    y, m = torch.ops.aten.native_dropout(x, 0.4, True)
    mine = "".join("1" if v else "0" for v in m.cpu().flatten().tolist())
    n = torch.randn(4, device=DEV).cpu().tolist()
    a = _child(31)
    b = _child(31)
    assert a[0] == b[0] == mine
    assert a[1] == b[1] == repr(n)
    assert _child(32)[0] != mine


# --- distributions ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_uniform_statistics(dtype):
    torch.manual_seed(1)
    x = torch.rand(N, device=DEV, dtype=dtype)
    assert x.dtype == dtype and x.shape == (N,)
    c = x.cpu().double()
    assert c.min() >= 0 and c.max() <= 1     # f16/bf16 rounding may reach 1 (as ATen)
    assert abs(c.mean() - 0.5) < 0.01
    assert abs(c.std() - 1 / math.sqrt(12)) < 0.01
    y = torch.empty(N, device=DEV, dtype=dtype).uniform_(-3, 5).cpu().double()
    assert y.min() >= -3 and y.max() <= 5 and abs(y.mean() - 1) < 0.06


def test_uniform_f32_half_open():
    torch.manual_seed(2)
    c = torch.rand(N, device=DEV).cpu()
    assert c.max() < 1 and c.min() >= 0
    assert len(torch.unique(c)) > 0.99 * N


@pytest.mark.parametrize("dtype", FLOATS)
def test_normal_statistics(dtype):
    torch.manual_seed(3)
    z = torch.randn(N, device=DEV, dtype=dtype)
    assert z.dtype == dtype
    c = z.cpu().double()
    assert abs(c.mean()) < 0.02 and abs(c.std() - 1) < 0.02
    assert torch.isfinite(c).all()
    g = torch.empty(N, device=DEV, dtype=dtype).normal_(2.0, 3.0).cpu().double()
    assert abs(g.mean() - 2) < 0.06 and abs(g.std() - 3) < 0.06
    # about 68% within one sigma
    assert abs(((c.abs() < 1).double().mean()) - 0.6827) < 0.01


def test_normal_functional_forms():
    torch.manual_seed(4)
    mean = torch.full((N,), 5.0, device=DEV)
    a = torch.normal(mean, 2.0)
    assert a.shape == (N,) and a.dtype == torch.float32
    c = a.cpu()
    assert abs(c.mean() - 5) < 0.05 and abs(c.std() - 2) < 0.05
    std = torch.full((N,), 0.5, device=DEV)
    b = torch.normal(1.0, std).cpu()
    assert abs(b.mean() - 1) < 0.02 and abs(b.std() - 0.5) < 0.02
    d = torch.normal(mean, std).cpu()
    assert abs(d.mean() - 5) < 0.02 and abs(d.std() - 0.5) < 0.02
    e = torch.normal(0.0, 1.0, (100, 10), device=DEV)
    assert e.shape == (100, 10) and type(e) is rgpu.RemoteTensor
    r = torch.randn_like(mean).cpu()
    assert abs(r.mean()) < 0.02 and abs(r.std() - 1) < 0.02


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.93, 1.0])
def test_bernoulli_frequency(p):
    torch.manual_seed(5)
    x = torch.empty(N, device=DEV).bernoulli_(p).cpu()
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert abs(x.mean().item() - p) < 0.01
    f = torch.bernoulli(torch.zeros(N, device=DEV), p).cpu()    # bernoulli.p: the scalar wins
    assert abs(f.mean().item() - p) < 0.01


def test_bernoulli_tensor_p():
    torch.manual_seed(6)
    p = torch.rand(N, device=DEV)
    b = torch.bernoulli(p)
    assert b.dtype == torch.float32 and b.shape == (N,)
    pc, bc = p.cpu(), b.cpu()
    # E[b | p] = p: b - p averages to 0, and high p gives more ones
    assert abs((bc - pc).mean()) < 0.01
    assert bc[pc > 0.9].mean() > 0.85 and bc[pc < 0.1].mean() < 0.15
    exact = torch.tensor([0.0, 1.0, 1.0, 0.0], dtype=torch.float64, device=DEV)
    assert torch.bernoulli(exact).cpu().tolist() == [0.0, 1.0, 1.0, 0.0]
    # bernoulli_(Tensor p) with p broadcast over self
    t = torch.empty(1000, 4, device=DEV).bernoulli_(torch.tensor([0.0, 1.0, 0.5, 0.25], device=DEV)).cpu()
    assert (t[:, 0] == 0).all() and (t[:, 1] == 1).all()
    assert abs(t[:, 2].mean() - 0.5) < 0.06 and abs(t[:, 3].mean() - 0.25) < 0.06
    # a CPU p is uploaded
    u = torch.empty(4, device=DEV).bernoulli_(torch.tensor([1.0, 0.0, 1.0, 0.0])).cpu()
    assert u.tolist() == [1.0, 0.0, 1.0, 0.0]
    # integer self
    k = torch.empty(N, dtype=torch.int64, device=DEV).bernoulli_(0.25).cpu()
    assert k.dtype == torch.int64 and abs(k.double().mean() - 0.25) < 0.01


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                                   torch.float32, torch.float64])
def test_randint_range_and_uniformity(dtype):
    torch.manual_seed(7)
    lo, hi = (0, 10) if dtype is torch.uint8 else (-4, 6)
    x = torch.randint(lo, hi, (N,), device=DEV, dtype=dtype)
    assert x.dtype == dtype and x.shape == (N,)
    c = x.cpu().double()
    assert c.min() == lo and c.max() == hi - 1
    assert (c == c.round()).all()
    counts = torch.bincount((c - lo).long(), minlength=10).double()
    assert (abs(counts / N - 0.1) < 0.01).all()


def test_random_overloads():
    torch.manual_seed(8)
    a = torch.empty(N, dtype=torch.int64, device=DEV).random_(5).cpu()
    assert a.min() == 0 and a.max() == 4
    b = torch.empty(N, dtype=torch.int32, device=DEV).random_(-3, 3).cpu()
    assert b.min() == -3 and b.max() == 2
    f = torch.empty(N, device=DEV).random_().cpu()          # [0, 2^24] for float32
    assert f.min() >= 0 and f.max() <= 2**24 and (f == f.round()).all() and f.max() > 2**23
    u = torch.empty(N, dtype=torch.uint8, device=DEV).random_().cpu()   # [0, 255]
    assert u.min() == 0 and u.max() == 255
    bo = torch.empty(N, dtype=torch.bool, device=DEV).random_().cpu()
    assert abs(bo.double().mean() - 0.5) < 0.01
    i8 = torch.empty(N, dtype=torch.int8, device=DEV).random_(-128, None).cpu()  # [from, max]
    assert i8.min() == -128 and i8.max() == 127
    big = torch.empty(N, dtype=torch.int64, device=DEV).random_().cpu()     # [0, 2^63 - 1]
    assert big.min() >= 0 and big.double().mean() > 2**61
    r = torch.randint_like(torch.empty(N, device=DEV), 3).cpu()
    assert r.dtype == torch.float32 and set(r.unique().tolist()) == {0.0, 1.0, 2.0}
    r2 = torch.randint_like(torch.empty(N, dtype=torch.int16, device=DEV), 10, 12).cpu()
    assert r2.dtype == torch.int16 and set(r2.unique().tolist()) == {10, 11}


@pytest.mark.parametrize("n,dtype", [(0, torch.int64), (1, torch.int64), (1000, torch.int64),
                                     (300, torch.int32), (257, torch.float32), (100, torch.uint8)])
def test_randperm_is_a_permutation(n, dtype):
    torch.manual_seed(9)
    p = torch.randperm(n, device=DEV, dtype=dtype)
    assert p.dtype == dtype and p.shape == (n,)
    c = p.cpu()
    assert torch.equal(c.sort().values, torch.arange(n, dtype=dtype))
    if n >= 100:
        assert not torch.equal(c, torch.arange(n, dtype=dtype))


def test_randperm_out_resizes():
    out = torch.empty(3, dtype=torch.int64, device=DEV)
    r = torch.randperm(10, out=out, device=DEV)
    assert r is out and out.shape == (10,)
    assert sorted(out.cpu().tolist()) == list(range(10))


# --- dropout -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout_keeps_one_minus_p_and_scales(dtype):
    torch.manual_seed(10)
    p = 0.3
    x = torch.ones(N, device=DEV, dtype=dtype)
    y = F.dropout(x, p)
    assert y.dtype == dtype and y.shape == (N,)
    c = y.cpu().double()
    kept = c != 0
    assert abs(kept.double().mean() - (1 - p)) < 0.01
    want = torch.tensor(1 / (1 - p), dtype=torch.float32).to(dtype).double()
    assert torch.allclose(c[kept], want.expand(int(kept.sum())), rtol=1e-2)


def test_native_dropout_outputs_and_eval():
    torch.manual_seed(12)
    x = torch.randn(100, 50, device=DEV)
    y, m = torch.ops.aten.native_dropout(x, 0.5, True)
    assert m.dtype == torch.bool and m.shape == x.shape and y.shape == x.shape
    xc, yc, mc = x.cpu(), y.cpu(), m.cpu()
    torch.testing.assert_close(yc, xc * mc * 2.0)
    y2, m2 = torch.ops.aten.native_dropout(x, 0.5, False)
    assert torch.equal(y2.cpu(), xc) and m2.cpu().all()


def test_dropout_module_train_eval_and_backward():
    torch.manual_seed(13)
    drop = torch.nn.Dropout(0.25)
    x = torch.randn(200, 30, device=DEV, requires_grad=True)
    y = drop(x)
    y.sum().backward()
    g = x.grad.cpu()
    yc, xc = y.detach().cpu(), x.detach().cpu()
    mask = yc != 0
    torch.testing.assert_close(g, mask.float() / 0.75)
    torch.testing.assert_close(yc, xc * mask / 0.75)
    drop.eval()
    assert torch.equal(drop(x).detach().cpu(), xc)


def test_dropout_backward_op():
    g = torch.randn(10, 10, device=DEV)
    m = (torch.arange(100) % 3 == 0).view(10, 10).to(DEV)
    r = torch.ops.aten.native_dropout_backward(g, m, 2.0)
    torch.testing.assert_close(r.cpu(), g.cpu() * m.cpu() * 2.0)


def test_dropout_p_edge_cases():
    x = torch.randn(1000, device=DEV)
    assert torch.equal(F.dropout(x, 0.0).cpu(), x.cpu())
    assert F.dropout(x, 0.5, training=False) is x


# --- errors at the call ----------------------------------------------------------------------

def test_errors_at_the_call():
    x = torch.empty(10, device=DEV)
    with pytest.raises(RuntimeError, match="from=2.0 > to=1.0"):
        x.uniform_(2, 1)
    with pytest.raises(RuntimeError, match="to-from"):
        torch.empty(3, dtype=torch.float16, device=DEV).uniform_(-60000, 60000)
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        x.normal_(0, -1)
    with pytest.raises(RuntimeError, match="p to be in"):
        x.bernoulli_(1.5)
    with pytest.raises(NotImplementedError):
        torch.empty(3, dtype=torch.int64, device=DEV).uniform_()
    with pytest.raises(RuntimeError, match="from=5 >= to=5"):
        x.random_(5, 5)
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.empty(3, dtype=torch.uint8, device=DEV).random_(0, 300)
    with pytest.raises(NotImplementedError, match="generator"):
        torch.rand(3, device=DEV, generator=torch.Generator())
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        torch.ops.aten.native_dropout(x, 1.5, True)


def test_randint_like_keeps_torchs_overload_objects():
    """torch caches each OpOverload on its packet; asking the packet with an
    explicit __getattr__ made a second object, and ops registered by object
    (random_.from) stopped being found ("not supported") after randint_like."""
    aten = torch.ops.aten
    f = getattr(aten.random_, "from")
    torch.randint_like(torch.ones(3, device="rgpu"), 10)
    assert getattr(aten.random_, "from") is f
    x = torch.empty(6, device="rgpu").random_(2, 5)
    assert ((x.cpu() >= 2) & (x.cpu() < 5)).all()
