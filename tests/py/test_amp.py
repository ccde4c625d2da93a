"""Mixed precision on rgpu: torch.autocast("rgpu") follows PyTorch's CUDA autocast
policy, and torch.amp.GradScaler("rgpu") behaves as torch.amp.GradScaler("cpu").

Torch's CPU autocast uses a different policy (bfloat16 by default, other op
lists), so the CPU references here spell the CUDA policy out with explicit
casts. Expected output dtypes are written down as known values."""
import pytest
import torch
import torch.nn.functional as F

import rgpu
from rgpu import amp

DEV = "rgpu"
F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
LOW = [BF16, F16]
# values of a low-precision result / of an f32 result computed from low-precision inputs
TOL = {BF16: dict(rtol=1.6e-2, atol=1e-2), F16: dict(rtol=2e-3, atol=2e-3), F32: dict(rtol=1e-4, atol=1e-4)}


def rnd(*shape, seed=0, dtype=F32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# --- the policy table against the running torch --------------------------------------------

def test_policy_table_is_torchs_cuda_list():
    """Every op with an AutocastCUDA kernel in this torch is in the table (and
    nothing else that exists here is), and each got an AutocastPrivateUse1 kernel."""
    have = torch._C._dispatch_has_kernel_for_dispatch_key
    cuda = {n for n in torch._C._dispatch_get_all_op_names() if have(n, "AutocastCUDA")}
    ours = set()
    for name in amp.policy():
        func = amp._overload(name)
        if func is not None:
            ours.add(func.name().replace(".default", ""))
    assert ours == cuda
    missing = sorted(n for n in cuda if not have(n, "AutocastPrivateUse1"))
    assert not missing


def test_defaults():
    assert torch.get_autocast_dtype(DEV) is F16          # as CUDA
    assert torch.rgpu.get_amp_supported_dtype() == [F16, BF16]
    assert not torch.is_autocast_enabled(DEV)
    with torch.autocast(DEV):
        assert torch.is_autocast_enabled(DEV)
        assert (torch.ones(2, 3, device=DEV) @ torch.ones(3, 2, device=DEV)).dtype is F16


def test_disabled_autocast_leaves_ops_alone():
    x, w = rnd(3, 4).to(DEV), rnd(5, 4, seed=1).to(DEV)
    assert torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.AutocastPrivateUse1)
    assert F.linear(x, w).dtype is F32
    with torch.autocast(DEV, dtype=BF16):
        with torch.autocast(DEV, enabled=False):
            assert F.linear(x, w).dtype is F32
        assert F.linear(x, w).dtype is BF16
    with torch.autocast("cpu", dtype=BF16):        # another device's autocast: rgpu untouched
        assert F.linear(x, w).dtype is F32


# --- output dtypes and values under autocast ----------------------------------------------------

def _ce_cuda(y, t):
    """F.cross_entropy(y) for a low-precision y under CUDA's autocast: ATen's
    cross_entropy_loss calls log_softmax(y, 1, dtype=y.dtype), an explicit dtype
    that fp32_set_opt_dtype respects, so the log-probabilities are rounded to
    y's dtype; nll_loss (fp32 policy) then casts them to float32."""
    return F.nll_loss(F.log_softmax(y, 1, dtype=y.dtype).float(), t)


def _ln(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


# name: (fn, input shapes, expected dtype (L = the autocast dtype), CPU reference with explicit casts)
L = "low"
CASES = {
    "matmul": (lambda a, b: a @ b, [(3, 4), (4, 5)], L, lambda lo, a, b: a.to(lo) @ b.to(lo)),
    "matmul_batched": (torch.matmul, [(2, 3, 4), (4, 5)], L, lambda lo, a, b: torch.matmul(a.to(lo), b.to(lo))),
    "linear": (F.linear, [(2, 3, 4), (5, 4), (5,)], L,
               lambda lo, x, w, b: F.linear(x.to(lo), w.to(lo), b.to(lo))),
    "addmm": (torch.addmm, [(3, 5), (3, 4), (4, 5)], L, lambda lo, s, a, b: torch.addmm(s.to(lo), a.to(lo), b.to(lo))),
    "bmm": (torch.bmm, [(2, 3, 4), (2, 4, 5)], L, lambda lo, a, b: torch.bmm(a.to(lo), b.to(lo))),
    "baddbmm": (torch.baddbmm, [(2, 3, 5), (2, 3, 4), (2, 4, 5)], L,
                lambda lo, s, a, b: torch.baddbmm(s.to(lo), a.to(lo), b.to(lo))),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3), (4,)], L,
               lambda lo, x, w, b: F.conv2d(x.to(lo), w.to(lo), b.to(lo), padding=1)),
    "softmax": (lambda x: torch.softmax(x, -1), [(3, 5)], F32, lambda lo, x: torch.softmax(x, -1)),
    "softmax_of_low": (lambda a, b: torch.softmax(a @ b, -1), [(3, 4), (4, 5)], F32,
                       lambda lo, a, b: torch.softmax((a.to(lo) @ b.to(lo)).float(), -1)),
    "log_softmax_of_low": (lambda a, b: F.log_softmax(a @ b, 0), [(3, 4), (4, 5)], F32,
                           lambda lo, a, b: F.log_softmax((a.to(lo) @ b.to(lo)).float(), 0)),
    "layer_norm": (lambda x, w, b: _ln(x @ w, b, b), [(3, 4), (4, 6), (6,)], F32,
                   lambda lo, x, w, b: _ln((x.to(lo) @ w.to(lo)).float(), b, b)),
    "cross_entropy": (lambda x, w: F.cross_entropy(x @ w, torch.tensor([0, 4, 2], device=x.device)),
                      [(3, 4), (4, 5)], F32,
                      lambda lo, x, w: _ce_cuda(x.to(lo) @ w.to(lo), torch.tensor([0, 4, 2]))),
    "exp_sum_of_low": (lambda a, b: ((a @ b).exp(), (a @ b).sum()), [(3, 4), (4, 5)], F32,
                       lambda lo, a, b: ((a.to(lo) @ b.to(lo)).float().exp(), (a.to(lo) @ b.to(lo)).float().sum())),
    "cat_mixed": (lambda a, b, c: torch.cat([a @ b, c]), [(3, 4), (4, 5), (2, 5)], F32,
                  lambda lo, a, b, c: torch.cat([(a.to(lo) @ b.to(lo)).float(), c])),
    "addcmul_promote": (lambda s, a, b: torch.addcmul(s, a @ b, a @ b), [(3, 5), (3, 4), (4, 5)], F32,
                        lambda lo, s, a, b: torch.addcmul(s, (a.to(lo) @ b.to(lo)).float(),
                                                          (a.to(lo) @ b.to(lo)).float())),
    "addcmul_all_low": (lambda s, a, b: torch.addcmul((a @ b), a @ b, a @ b, value=0.5), [(3, 5), (3, 4), (4, 5)], L,
                        lambda lo, s, a, b: torch.addcmul(a.to(lo) @ b.to(lo), a.to(lo) @ b.to(lo),
                                                          a.to(lo) @ b.to(lo), value=0.5)),
    "relu_of_low": (lambda a, b: torch.relu(a @ b), [(3, 4), (4, 5)], L, lambda lo, a, b: torch.relu(a.to(lo) @ b.to(lo))),
    "mul_low_f32": (lambda a, b, c: (a @ b) * c, [(3, 4), (4, 5), (3, 5)], F32,
                    lambda lo, a, b, c: (a.to(lo) @ b.to(lo)) * c),
    "f64_not_cast": (torch.mm, [((3, 4), F64), ((4, 5), F64)], F64, lambda lo, a, b: a @ b),
}


def _inputs(shapes):
    out = []
    for i, s in enumerate(shapes):
        shape, dt = s if isinstance(s[0], tuple) else (s, F32)
        out.append(rnd(*shape, seed=10 + i, dtype=dt))
    return out


def _check(got, want, lo, label):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert isinstance(g, rgpu.RemoteTensor), label
        assert g.dtype == w.dtype, f"{label}: {g.dtype} != {w.dtype}"
        tol = TOL[lo] if w.dtype is F32 else TOL.get(w.dtype, dict(rtol=1e-6, atol=1e-6))
        torch.testing.assert_close(g.cpu(), w, **tol, msg=lambda m: f"{label}: {m}")


@pytest.mark.parametrize("lo", LOW, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_autocast_dtype_and_values(name, lo):
    fn, shapes, want_dt, ref = CASES[name]
    xs = _inputs(shapes)
    with torch.autocast(DEV, dtype=lo):
        got = fn(*[x.to(DEV) for x in xs])
    want = ref(lo, *xs)
    first = got[0] if isinstance(got, tuple) else got
    assert first.dtype is (lo if want_dt == L else want_dt), f"{name}: CUDA's policy gives {want_dt}"
    _check(got, want, lo, name)


def test_cpu_tensors_are_not_cast():
    a, b = rnd(3, 4), rnd(4, 5)
    with torch.autocast(DEV, dtype=BF16):
        assert (a @ b).dtype is F32


def test_promote_mixed_low_dtypes_raises_like_aten():
    a = rnd(3, 4).to(DEV)
    with torch.autocast(DEV, dtype=F16):
        with pytest.raises(RuntimeError, match="Unexpected floating ScalarType"):
            torch.addcmul(a.half(), a.bfloat16(), a.half())


def test_binary_cross_entropy_is_banned():
    x = torch.rand(4).to(DEV)
    with torch.autocast(DEV, dtype=BF16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(x, x)
        assert F.binary_cross_entropy_with_logits(x, x).dtype is F32


def test_norm_append_dtype_and_sum_opt_dtype():
    x = rnd(3, 4).to(DEV)
    with torch.autocast(DEV, dtype=BF16):
        h = x @ x.t()                                   # bf16
        assert torch.norm(h).dtype is F32               # norm.Scalar -> norm(..., dtype=float32)
        assert h.sum(0).dtype is F32                    # sum.dim_IntList: dtype=float32
        assert h.sum(0, dtype=BF16).dtype is BF16       # an explicit dtype is respected
        assert torch.cumsum(h, 1).dtype is F32
        assert torch.softmax(h, 1, dtype=F64).dtype is F64
        torch.testing.assert_close(torch.norm(h).cpu(), torch.norm((x.cpu().bfloat16() @ x.cpu().t().bfloat16()).float()),
                                   rtol=1e-5, atol=1e-5)


# --- backward through an autocast region ---------------------------------------------------------

def _mlp_params(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(16, 8, generator=g) * 0.3, torch.randn(16, generator=g) * 0.1,
            torch.randn(4, 16, generator=g) * 0.3, torch.randn(4, generator=g) * 0.1,
            torch.ones(16), torch.zeros(16)]


def _mlp(p, x, t, lo, explicit):
    """Linear -> LayerNorm -> GELU -> Linear -> cross_entropy. explicit: CUDA's
    autocast policy spelled out with casts (for CPU)."""
    w1, b1, w2, b2, g, be = p
    if explicit:
        h = F.linear(x.to(lo), w1.to(lo), b1.to(lo))
        h = F.layer_norm(h.float(), (16,), g, be)
        h = F.gelu(h)
        y = F.linear(h.to(lo), w2.to(lo), b2.to(lo))
        return _ce_cuda(y, t)
    h = F.linear(x, w1, b1)
    h = F.layer_norm(h, (16,), g, be)
    h = F.gelu(h)
    y = F.linear(h, w2, b2)
    return F.cross_entropy(y, t)


@pytest.mark.parametrize("lo", LOW, ids=["bf16", "f16"])
def test_backward_through_autocast_matches_cpu(lo):
    x, t = rnd(6, 8, seed=3), torch.tensor([0, 1, 2, 3, 1, 0])
    pc = [q.clone().requires_grad_() for q in _mlp_params(1)]
    pr = [q.to(DEV).requires_grad_() for q in _mlp_params(1)]
    lc = _mlp(pc, x, t, lo, True)
    with torch.autocast(DEV, dtype=lo):
        lr = _mlp(pr, x.to(DEV), t.to(DEV), lo, False)
    assert lr.dtype is F32
    lc.backward()
    lr.backward()
    torch.testing.assert_close(lr.detach().cpu(), lc.detach(), **TOL[lo])
    for k, (a, b) in enumerate(zip(pr, pc)):
        assert a.grad.dtype is F32, k                  # grads of f32 leaves come back f32 through the casts
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=5e-2, atol=TOL[lo]["atol"] * 2,
                                   msg=lambda m: f"grad {k}: {m}")


# --- GradScaler ---------------------------------------------------------------------------------

def _grads_for(step, params, inject):
    """Deterministic 'gradients' (scaled like GradScaler's loss would make them)."""
    out = []
    for i, p in enumerate(params):
        g = torch.sin(torch.arange(p.numel(), dtype=F32).reshape(p.shape) * (0.3 + 0.1 * i) + step) * 1024.0
        if inject and i == 1:
            g.view(-1)[2] = float("inf") if step % 2 else float("nan")
        out.append(g)
    return out


def test_grad_scaler_skips_inf_steps_and_tracks_scale_like_cpu():
    """Same gradients through GradScaler("rgpu") and GradScaler("cpu"): after
    every step the scale and growth tracker agree, an inf/nan step leaves the
    parameters bitwise unchanged and backs the scale off, and growth_interval
    clean steps grow it."""
    base = [rnd(3, 4, seed=5), rnd(4, seed=6), rnd(2, 2, seed=7)]
    pc = [torch.nn.Parameter(b.clone()) for b in base]
    pr = [torch.nn.Parameter(b.to(DEV)) for b in base]
    oc, orr = torch.optim.SGD(pc, lr=0.01), torch.optim.SGD(pr, lr=0.01)
    kw = dict(init_scale=1024.0, growth_factor=2.0, backoff_factor=0.25, growth_interval=3)
    sc, sr = torch.amp.GradScaler("cpu", **kw), torch.amp.GradScaler(DEV, **kw)
    bad_steps = {1, 5, 6}
    scales = []
    for step in range(10):
        gs = _grads_for(step, base, step in bad_steps)
        for p, g in zip(pc, gs):
            p.grad = g.clone()
        for p, g in zip(pr, gs):
            p.grad = g.to(DEV)
        sc.scale(torch.zeros(()))                       # lazily creates the scale tensors
        sr.scale(torch.zeros((), device=DEV))
        before = [p.detach().cpu().clone() for p in pr]
        sc.step(oc)
        sr.step(orr)
        if step in bad_steps:
            for b, p in zip(before, pr):
                assert torch.equal(p.detach().cpu(), b), f"step {step}: parameters changed"
        else:
            assert not torch.equal(pr[0].detach().cpu(), before[0])
        sc.update()
        sr.update()
        assert sr.get_scale() == sc.get_scale(), step
        assert sr._get_growth_tracker() == sc._get_growth_tracker(), step
        scales.append(sr.get_scale())
        for a, b in zip(pr, pc):
            torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-6, atol=1e-6)
    # 1024: step0 ok (1), step1 bad -> 256, 2,3,4 ok -> 512, 5 bad -> 128, 6 bad -> 32, 7,8,9 -> 64
    assert scales == [1024.0, 256.0, 256.0, 256.0, 512.0, 128.0, 32.0, 32.0, 32.0, 64.0]


def test_grad_scaler_unscale_half_and_strided_grads():
    g16 = (rnd(4, 6, seed=2) * 100).half()
    gt = rnd(6, 4, seed=3).t()                         # non-contiguous f32 grad
    for bad in (None, float("inf")):
        cpu = [g16.clone(), gt.clone().t().contiguous().t()]
        if bad is not None:
            cpu[1][1, 2] = bad
        rg = [cpu[0].to(DEV), cpu[1].to(DEV).t().contiguous().t()]
        assert not rg[1].is_contiguous()
        fc, fr = torch.zeros(()), torch.zeros((), device=DEV)
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, fc, torch.full((), 1 / 3))
        torch._amp_foreach_non_finite_check_and_unscale_(rg, fr, torch.full((), 1 / 3, device=DEV))
        for a, b in zip(rg, cpu):
            assert torch.equal(a.cpu(), b) or torch.equal(a.cpu().isnan(), b.isnan())
            torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0, equal_nan=True)
        assert fr.item() == fc.item() == (0.0 if bad is None else 1.0)


def test_grad_scaler_ops_never_wait():
    g = [torch.ones(3, device=DEV)]
    f, inv = torch.zeros((), device=DEV), torch.full((), 0.5, device=DEV)
    s, t = torch.full((), 8.0, device=DEV), torch.zeros((), dtype=torch.int32, device=DEV)
    rgpu.synchronize()
    w0 = rgpu.stats()["waits"]
    torch._amp_foreach_non_finite_check_and_unscale_(g, f, inv)
    torch._amp_update_scale_(s, t, f, 2.0, 0.5, 1)
    assert rgpu.stats()["waits"] == w0
    assert s.item() == 16.0 and g[0].tolist() == [0.5, 0.5, 0.5]


def test_grad_scaler_op_errors_at_the_call():
    f, inv = torch.zeros((), device=DEV), torch.full((), 0.5, device=DEV)
    with pytest.raises(RuntimeError, match="found_inf must be a 1-element tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_([torch.ones(2, device=DEV)], torch.zeros(2, device=DEV), inv)
    with pytest.raises(RuntimeError, match="inv_scale must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_([torch.ones(2, device=DEV)], f, inv.double())
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        torch._amp_foreach_non_finite_check_and_unscale_([torch.ones(2, dtype=torch.int64, device=DEV)], f, inv)
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor"):
        torch._amp_update_scale_(torch.ones((), device=DEV), torch.zeros((), dtype=torch.int64, device=DEV), f,
                                 2.0, 0.5, 3)


# --- training ----------------------------------------------------------------------------------

def test_mlp_autocast_bf16_gradscaler_10_steps_matches_cpu():
    """10 steps of autocast(bf16) + GradScaler + SGD on rgpu against the same on
    CPU with CUDA's policy as explicit casts and GradScaler("cpu"). The two differ
    only in the rounding of bf16 results where the summation order of mm/addmm
    differs (one bf16 ulp, 2^-8 relative, on some elements); losses are means over
    the batch, so they stay within 2% and parameters within 1e-2 after 10 steps."""
    lo = BF16
    xs = [rnd(8, 8, seed=100)] * 10                    # one batch: the loss must go down
    ts = [torch.randint(0, 4, (8,), generator=torch.Generator().manual_seed(200))] * 10
    pc = [torch.nn.Parameter(q.clone()) for q in _mlp_params(9)]
    pr = [torch.nn.Parameter(q.to(DEV)) for q in _mlp_params(9)]
    oc, orr = torch.optim.SGD(pc, lr=0.1, momentum=0.9), torch.optim.SGD(pr, lr=0.1, momentum=0.9)
    sc, sr = torch.amp.GradScaler("cpu", growth_interval=4), torch.amp.GradScaler(DEV, growth_interval=4)
    losses_c, losses_r = [], []
    for s in range(10):
        oc.zero_grad()
        orr.zero_grad()
        lc = _mlp(pc, xs[s], ts[s], lo, True)
        with torch.autocast(DEV, dtype=lo):
            lr = _mlp(pr, xs[s].to(DEV), ts[s].to(DEV), lo, False)
        sc.scale(lc).backward()
        sr.scale(lr).backward()
        sc.step(oc)
        sr.step(orr)
        sc.update()
        sr.update()
        losses_c.append(lc.item())
        losses_r.append(lr.item())
        assert sr.get_scale() == sc.get_scale()
    torch.testing.assert_close(torch.tensor(losses_r), torch.tensor(losses_c), rtol=2e-2, atol=1e-3)
    assert losses_r[-1] < 0.5 * losses_r[0], losses_r  # it trains
    for a, b in zip(pr, pc):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-2, atol=1e-2)


def test_module_under_autocast_keeps_f32_params():
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(DEV)
    before = [p.detach().cpu() for p in m.parameters()]
    with torch.autocast(DEV, dtype=BF16):
        y = m(torch.ones(2, 8, device=DEV))
    assert y.dtype is BF16
    y.float().sum().backward()
    for p, q in zip(m.parameters(), before):
        assert p.dtype is F32 and p.grad.dtype is F32
        assert torch.equal(p.detach().cpu(), q)
