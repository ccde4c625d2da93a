"""Fused scaled-dot-product attention (SDPA / SDPA_BACKWARD records,
torchhook/rgpu/attention.py): F.scaled_dot_product_attention on rgpu against
PyTorch CPU's math path (the reference ATen's own CUDA kernels are tested
against), forward and the gradients of q, k and v, for causal and additive
and boolean masks, GQA, a given scale, fully masked rows, strided inputs,
float16/bfloat16; the calls the fused op does not take go to the composite
path and still agree; peak memory grows linearly in T, not quadratically.
Runs on whichever backend the server has (the cudaemu suite runs it on cuda)."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import rgpu
from rgpu import attention as rattn

G = torch.Generator().manual_seed(0)


def _randn(*shape, dtype=torch.float32):
    return torch.randn(shape, generator=G).to(dtype)


def _ref(q, k, v, mask=None, causal=False, scale=None, gqa=False, g=None):
    """Output and (dq, dk, dv) on CPU, math path, computed in float32."""
    qc, kc, vc = [t.detach().float().requires_grad_() for t in (q, k, v)]
    m = mask if mask is None or mask.dtype == torch.bool else mask.float()
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=m, is_causal=causal, scale=scale, enable_gqa=gqa)
    o.backward(g.float())
    return o.detach(), qc.grad, kc.grad, vc.grad


def _run(q, k, v, mask=None, causal=False, scale=None, gqa=False, g=None):
    dev = [t.to("rgpu").requires_grad_() for t in (q, k, v)]
    before = rattn.counts()["fused"]
    o = F.scaled_dot_product_attention(*dev, attn_mask=None if mask is None else mask.to("rgpu"),
                                       is_causal=causal, scale=scale, enable_gqa=gqa)
    fused = rattn.counts()["fused"] - before
    o.backward(g.to("rgpu"))
    return o.detach().cpu(), [t.grad.cpu() for t in dev], fused


def _check(q, k, v, tol=2e-5, **kw):
    g = _randn(*(q.shape[:3] + (v.shape[3],)), dtype=q.dtype)
    ro, rdq, rdk, rdv = _ref(q, k, v, g=g, **kw)
    o, (dq, dk, dv), fused = _run(q, k, v, g=g, **kw)
    assert fused == 1, "the call took the composite path"
    assert o.dtype == q.dtype and dq.dtype == q.dtype
    for name, got, want in (("out", o, ro), ("dq", dq, rdq), ("dk", dk, rdk), ("dv", dv, rdv)):
        err = (got.float() - want).abs().max().item()
        assert err <= tol * max(1.0, want.abs().max().item()), f"{name}: max error {err}"


CASES = {
    "plain": dict(shape=(2, 3, 37, 16), kv=(2, 3, 45, 16, 24)),
    "causal": dict(shape=(2, 3, 70, 16), kv=(2, 3, 70, 16, 16), causal=True),
    "causal_L_gt_S": dict(shape=(1, 2, 50, 32), kv=(1, 2, 33, 32, 32), causal=True),
    "scale": dict(shape=(1, 2, 20, 8), kv=(1, 2, 20, 8, 8), scale=0.3),
    "gqa": dict(shape=(2, 4, 40, 16), kv=(2, 2, 40, 16, 16), gqa=True, causal=True),
    "head_dim_128": dict(shape=(1, 1, 33, 128), kv=(1, 1, 33, 128, 100)),
    "one_row": dict(shape=(3, 2, 1, 8), kv=(3, 2, 9, 8, 8)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sdpa_matches_cpu(case):
    c = dict(CASES[case])
    q = _randn(*c.pop("shape"))
    B, H, S, E, Ev = c.pop("kv")
    _check(q, _randn(B, H, S, E), _randn(B, H, S, Ev), **c)


def test_float_mask_broadcast():
    q, k, v = _randn(2, 3, 24, 16), _randn(2, 3, 30, 16), _randn(2, 3, 30, 16)
    _check(q, k, v, mask=_randn(2, 1, 24, 30))


def test_bool_mask_with_fully_masked_rows():
    q, k, v = _randn(2, 2, 12, 8), _randn(2, 2, 12, 8), _randn(2, 2, 12, 8)
    mask = torch.rand(12, 12, generator=G) > 0.4
    mask[3] = False                      # row 3 sees no key: out 0, grads 0 (ATen's _safe_softmax)
    _check(q, k, v, mask=mask)
    o, _, _ = _run(q, k, v, mask=mask, g=torch.ones(2, 2, 12, 8))
    assert o[:, :, 3].abs().max().item() == 0.0


def test_strided_inputs_and_expanded_grad():
    # q, k, v as a GPT makes them: (B, T, 3C) split, viewed (B, T, H, D), transposed
    B, T, H, D = 2, 19, 3, 8
    x = _randn(B, T, 3 * H * D)
    ref_x = x.clone().requires_grad_()
    qkv = [t.view(B, T, H, D).transpose(1, 2) for t in ref_x.split(H * D, dim=2)]
    with sdpa_kernel(SDPBackend.MATH):
        F.scaled_dot_product_attention(*qkv, is_causal=True).sum().backward()
    rx = x.to("rgpu").requires_grad_()
    qkv = [t.view(B, T, H, D).transpose(1, 2) for t in rx.split(H * D, dim=2)]
    before = rattn.counts()["fused"]
    F.scaled_dot_product_attention(*qkv, is_causal=True).sum().backward()   # grad_out: a stride-0 expand
    assert rattn.counts()["fused"] == before + 1
    assert torch.allclose(rx.grad.cpu(), ref_x.grad, atol=2e-5, rtol=1e-5)


def test_output_specs_kept_per_layout_and_gradient_mask():
    """The outputs' metadata is kept per call shape (tensor.kept_specs: the
    meta kernels cost more than the rest of the call): the query's layout
    decides the output's strides as ATen's meta says, every time; which
    gradients a backward makes is part of what is kept."""
    B, T, H, D = 2, 19, 3, 8
    aten = torch.ops.aten

    def qkv(x, layout):
        if layout == "contiguous":
            return [t.reshape(B, H, T, D) for t in x.split(H * D, dim=2)]
        return [t.view(B, T, H, D).transpose(1, 2) for t in x.split(H * D, dim=2)]

    for _ in range(2):
        for layout in ("gpt", "contiguous"):
            x = _randn(B, T, 3 * H * D)
            want = aten._scaled_dot_product_fused_attention_overrideable.default(
                *[t.to("meta") for t in qkv(x, layout)], None, 0.0, True, False)[0].stride()
            ref_x = x.clone().requires_grad_()
            with sdpa_kernel(SDPBackend.MATH):
                ref = F.scaled_dot_product_attention(*qkv(ref_x, layout), is_causal=True)
            ref.sum().backward()
            rx = x.to("rgpu").requires_grad_()
            o = F.scaled_dot_product_attention(*qkv(rx, layout), is_causal=True)
            assert o.stride() == want, (layout, o.stride(), want)
            o.sum().backward()
            torch.testing.assert_close(o.detach().cpu(), ref.detach(), atol=2e-5, rtol=1e-5)
            torch.testing.assert_close(rx.grad.cpu(), ref_x.grad, atol=2e-5, rtol=1e-5)
    q, k, v = _randn(1, 2, 9, 8), _randn(1, 2, 9, 8), _randn(1, 2, 9, 8)
    for grads in ((True, False, False), (True, True, True), (False, False, True)):
        ts = [t.clone().requires_grad_(g) for t, g in zip((q, k, v), grads)]
        rs = [t.to("rgpu").requires_grad_(g) for t, g in zip((q, k, v), grads)]
        with sdpa_kernel(SDPBackend.MATH):
            F.scaled_dot_product_attention(*ts).sum().backward()
        F.scaled_dot_product_attention(*rs).sum().backward()
        for t, r, g in zip(ts, rs, grads):
            assert (r.grad is None) == (not g)
            if g:
                torch.testing.assert_close(r.grad.cpu(), t.grad, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes(dtype):
    q, k, v = (_randn(2, 2, 40, 32, dtype=dtype) for _ in range(3))
    _check(q, k, v, causal=True, tol=3e-2 if dtype == torch.bfloat16 else 4e-3)


def test_composite_path_for_what_the_fused_op_does_not_take():
    q, k, v = (_randn(1, 2, 10, 8, dtype=torch.float64) for _ in range(3))
    g = _randn(1, 2, 10, 8, dtype=torch.float64)
    before = rattn.counts()
    o, grads, fused = _run(q, k, v, causal=True, g=g)
    assert fused == 0 and rattn.counts()["composite"] == before["composite"] + 1
    qc, kc, vc = [t.clone().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(qc, kc, vc, is_causal=True).backward(g)
    assert torch.allclose(o, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-12)
    for got, want in zip(grads, (qc.grad, kc.grad, vc.grad)):
        assert torch.allclose(got, want, atol=1e-12)
    # sdpa_kernel without OVERRIDEABLE turns the fused op off, as it picks CUDA's kernels
    q32 = _randn(1, 2, 10, 8)
    with sdpa_kernel(SDPBackend.MATH):
        before = rattn.counts()
        o = F.scaled_dot_product_attention(q32.to("rgpu"), q32.to("rgpu"), q32.to("rgpu"), is_causal=True)
        assert rattn.counts()["fused"] == before["fused"]
    assert torch.allclose(o.cpu(), F.scaled_dot_product_attention(q32, q32, q32, is_causal=True), atol=1e-6)
    # a mask that requires grad (a learned bias) also goes the composite way, and its gradient is right
    q, k, v = (_randn(1, 2, 6, 4) for _ in range(3))
    bias = _randn(1, 2, 6, 6)
    rb = bias.to("rgpu").requires_grad_()
    F.scaled_dot_product_attention(q.to("rgpu"), k.to("rgpu"), v.to("rgpu"), attn_mask=rb).sum().backward()
    cb = bias.clone().requires_grad_()
    F.scaled_dot_product_attention(q, k, v, attn_mask=cb).sum().backward()
    assert torch.allclose(rb.grad.cpu(), cb.grad, atol=1e-5)


def test_records_are_the_fused_ops():
    """One SDPA record forward, one SDPA_BACKWARD backward; no softmax."""
    q, k, v = (_randn(1, 2, 16, 8).to("rgpu").requires_grad_() for _ in range(3))
    d0 = dict(rgpu.stats()["decomposed"])
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    o.backward(torch.ones_like(o))
    torch.rgpu.synchronize()
    d1 = rgpu.stats()["decomposed"]
    assert {n: c - d0.get(n, 0) for n, c in d1.items() if c != d0.get(n, 0)} == {}


def test_multihead_attention_module():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True)
    x = _randn(2, 11, 32)
    ref = mha(x, x, x, need_weights=False, is_causal=True,
              attn_mask=nn.Transformer.generate_square_subsequent_mask(11))[0]
    ref.sum().backward()
    want = [p.grad.clone() for p in mha.parameters()]
    dev = mha.to("rgpu")
    dev.zero_grad()
    before = rattn.counts()["fused"]
    out = dev(x.to("rgpu"), x.to("rgpu"), x.to("rgpu"), need_weights=False)[0]
    out_causal = dev(x.to("rgpu"), x.to("rgpu"), x.to("rgpu"), need_weights=False, is_causal=True,
                     attn_mask=nn.Transformer.generate_square_subsequent_mask(11).to("rgpu"))[0]
    out_causal.sum().backward()
    assert rattn.counts()["fused"] >= before + 2
    assert torch.allclose(out_causal.detach().cpu(), ref.detach(), atol=2e-5)
    assert out.shape == ref.shape
    for got, w in zip((p.grad.cpu() for p in dev.parameters()), want):
        assert torch.allclose(got, w, atol=5e-5, rtol=1e-4)


def _peak(T):
    q, k, v = (torch.randn(1, 2, T, 32, device="rgpu").requires_grad_() for _ in range(3))
    torch.rgpu.synchronize()
    base = torch.rgpu.memory_allocated()
    torch.rgpu.reset_peak_memory_stats()
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    o.backward(torch.ones_like(o))
    torch.rgpu.synchronize()
    return torch.rgpu.max_memory_allocated() - base


def test_peak_memory_is_linear_in_T():
    """From T=256 to T=1024 the math path's peak grows ~16x (the T^2 scores);
    the fused op's ~4x (issue 26: at most 4.5x)."""
    p256, p1024 = _peak(256), _peak(1024)
    assert p1024 <= 4.5 * p256, (p256, p1024)
    assert p1024 < 1024 * 1024 * 2 * 4, p1024       # less than one (2, T, T) float32 score tensor


def test_compiled_matches_eager():
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2.0

    q, k, v = (_randn(1, 2, 12, 8) for _ in range(3))
    want = f(q, k, v)
    cf = torch.compile(f, backend="rgpu")
    got = cf(q.to("rgpu"), k.to("rgpu"), v.to("rgpu")).cpu()
    assert torch.allclose(got, want, atol=2e-5)
    assert math.isfinite(got.sum().item())


def test_float64_records_direct():
    """The ops themselves in float64 (the client routes float64 to the
    composite path; the backends' double kernels run here): ATen's overrideable
    op and its backward called directly, against the math path in float64."""
    q, k, v = (_randn(2, 2, 21, 16, dtype=torch.float64) for _ in range(3))
    g = _randn(2, 2, 21, 16, dtype=torch.float64)
    mask = _randn(2, 2, 21, 21, dtype=torch.float64)
    aten = torch.ops.aten
    dq_, dk_, dv_ = (t.to("rgpu") for t in (q, k, v))
    r = aten._scaled_dot_product_fused_attention_overrideable(dq_, dk_, dv_, mask.to("rgpu"), 0.0, False, False,
                                                               scale=0.5)
    bw = aten._scaled_dot_product_fused_attention_overrideable_backward(
        g.to("rgpu"), dq_, dk_, dv_, mask.to("rgpu"), [True, True, True, False], r[0], r[1], r[2], r[3], r[4], r[5],
        0.0, False, r[6], r[7], scale=0.5)
    qc, kc, vc = [t.clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask, scale=0.5)
    o.backward(g)
    lse = torch.logsumexp(0.5 * q @ k.transpose(-1, -2) + mask, dim=-1)
    assert torch.allclose(r[0].cpu(), o.detach(), atol=1e-12)
    assert torch.allclose(r[1].cpu().double(), lse, atol=1e-5)        # logsumexp is float32 (ATen's meta)
    for got, want in zip(bw[:3], (qc.grad, kc.grad, vc.grad)):
        assert torch.allclose(got.cpu(), want, atol=1e-5)               # through the float32 logsumexp
    assert bw[3] is None


@pytest.mark.parametrize("causal", [False, True])
def test_dropout_is_philox_and_gradients_follow_the_mask(causal):
    """dropout_p > 0 runs fused: value columns holding the identity read the
    dropped, rescaled weights back out; they must be softmax * keep / (1 - p)
    with about 1 - p kept, the other columns and the gradients must be those
    of that same mask (the backward regenerates it from philox_seed/offset),
    and a rerun from the same seed is bitwise the same."""
    p, B, H, L, E, Ev = 0.3, 2, 2, 24, 8, 8
    q, k = _randn(B, H, L, E), _randn(B, H, L, E)
    v = torch.cat([torch.eye(L).expand(B, H, L, L), _randn(B, H, L, Ev)], dim=-1)
    g = _randn(B, H, L, L + Ev)

    def run():
        torch.manual_seed(123)
        dev = [t.to("rgpu").requires_grad_() for t in (q, k, v)]
        before = rattn.counts()["fused"]
        o = F.scaled_dot_product_attention(*dev, dropout_p=p, is_causal=causal)
        assert rattn.counts()["fused"] == before + 1
        o.backward(g.to("rgpu"))
        return o.detach().cpu(), [t.grad.cpu() for t in dev]

    out, grads = run()
    out2, grads2 = run()
    assert torch.equal(out, out2) and all(torch.equal(a, b) for a, b in zip(grads, grads2))
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(E)
    if causal:
        scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf)
    P = torch.softmax(scores, dim=-1)
    visible = P > 0
    keep = out[..., :L] != 0
    frac = (keep & visible).sum().item() / visible.sum().item()
    assert abs(frac - (1 - p)) < 0.06, frac
    Z = keep.float() / (1 - p)
    assert torch.allclose(out[..., :L], P * Z, atol=1e-6)
    qc, kc, vc = [t.clone().requires_grad_() for t in (q, k, v)]
    sc = (qc @ kc.transpose(-1, -2)) / math.sqrt(E)
    if causal:
        sc = sc.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf)
    ref = (torch.softmax(sc, dim=-1) * Z) @ vc
    ref.backward(g)
    assert torch.allclose(out, ref.detach(), atol=2e-5)
    for got, want in zip(grads, (qc.grad, kc.grad, vc.grad)):
        assert torch.allclose(got, want, atol=5e-5), (got - want).abs().max()


def test_dropout_compiled_matches_eager():
    """A compiled graph's SDPA with dropout draws the offsets eager mode would."""
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.25, is_causal=True) * 1.5

    q, k, v = (_randn(1, 2, 16, 8).to("rgpu") for _ in range(3))
    torch.manual_seed(7)
    want = [f(q, k, v).cpu() for _ in range(2)]
    cf = torch.compile(f, backend="rgpu")
    torch.manual_seed(7)
    got = [cf(q, k, v).cpu() for _ in range(2)]
    assert not torch.equal(want[0], want[1])          # a new offset each call
    for a, b in zip(got, want):
        assert torch.equal(a, b)
