"""Float16/bfloat16 attention on tensor cores (issue 26 item 1):
replayer/cuda/attention.cu's sdpa_fwd_wmma_kernel, sdpa_dq_wmma_kernel and
sdpa_dkv_wmma_kernel on cudaemu's WMMA emulation
(tests/cudaemu/cudaemu.h: warp-collective fragments, alignment checked). Run by
tests/cudaemu/run-tests.sh on the cuda backend in all three thread orders.

Each case (causal with L > S and L < S, GQA, float and boolean masks, a fully
masked row, head dims 16/80/128 and Ev != E (zero padding to 16), sizes that
are not multiples of the tiles, GPT-strided q/k/v, dropout) gives out and
logsumexp, and the gradients (dq, dk, dv), compared with:
  * a float64 reference of the math (out, lse, gradients);
  * the scalar kernel (RGPU_CUDA_SDPA_WMMA=0), dropout included (the same
    Philox keep decisions);
  * itself, run again in the same session: bitwise.
The WMMA kernels' launches are counted: one per forward; D, dq and dk/dv once
per backward."""
import os
import sys
import textwrap

import pytest
import torch

import rgpu  # noqa: F401  (registers the device)
from emu_child import run_counted

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_BACKEND") != "cuda",
                                reason="the tensor-core kernel is the cuda backend's (run-tests.sh)")

CASES = textwrap.dedent("""
    import torch
    f16, bf16 = torch.float16, torch.bfloat16

    def cases():
        # name, dtype, B, Hq, Hk, L, S, E, Ev, causal, mask ("", "float", "bool", "dead_row"), dropout, gpt_layout
        yield "plain_f16", f16, 1, 2, 2, 40, 40, 64, 64, False, "", 0.0, False
        yield "causal_bf16_long", bf16, 1, 2, 2, 70, 50, 32, 32, True, "", 0.0, False
        yield "causal_short_f16", f16, 2, 1, 1, 20, 75, 16, 16, True, "", 0.0, False
        yield "gqa_bf16", bf16, 1, 4, 2, 33, 33, 64, 64, False, "", 0.0, False
        yield "float_mask_f16", f16, 1, 2, 2, 24, 40, 32, 32, False, "float", 0.0, False
        yield "bool_mask_dead_row_bf16", bf16, 1, 2, 2, 24, 40, 32, 32, False, "dead_row", 0.0, False
        yield "head80_ev48_f16", f16, 1, 1, 1, 17, 35, 80, 48, False, "", 0.0, False
        yield "head128_bf16", bf16, 1, 1, 1, 65, 64, 128, 128, True, "", 0.0, False
        yield "gpt_layout_f16", f16, 2, 2, 2, 32, 32, 32, 32, True, "", 0.0, True
        yield "dropout_bf16", bf16, 1, 2, 2, 36, 36, 32, 32, True, "", 0.3, False

    def inputs(name, dt, B, Hq, Hk, L, S, E, Ev, causal, mask, p, gpt):
        g = torch.Generator().manual_seed(len(name))
        if gpt:   # q, k, v as views of one (B, L, 3, H, E) projection, as a GPT's
            qkv = torch.randn(B, L, 3, Hq, E, generator=g).to(dt)
            q, k, v = (qkv[:, :, t].transpose(1, 2) for t in range(3))
        else:
            q = torch.randn(B, Hq, L, E, generator=g).to(dt)
            k = torch.randn(B, Hk, S, E, generator=g).to(dt)
            v = torch.randn(B, Hk, S, Ev, generator=g).to(dt)
        bias = None
        if mask == "float":
            bias = (torch.randn(1, Hq, L, S, generator=g) * 2).to(dt)
        elif mask in ("bool", "dead_row"):
            bias = torch.rand(B, 1, L, S, generator=g) > 0.3
            if mask == "dead_row":
                bias[:, :, 3] = False
        gy = torch.randn(B, Hq, L, Ev, generator=g).to(dt)
        return q, k, v, bias, gy

    def run(dev, name, dt, B, Hq, Hk, L, S, E, Ev, causal, mask, p, gpt):
        import torch.nn.functional as F
        q, k, v, bias, gy = (t if t is None else t.to(dev) for t in inputs(name, dt, B, Hq, Hk, L, S, E, Ev, causal, mask, p, gpt))
        if bias is not None and bias.dtype == torch.bool:
            fb = torch.zeros(bias.shape, dtype=dt, device=dev).masked_fill(bias.logical_not(), float("-inf"))
        else:
            fb = bias
        fb = None if fb is None else fb.expand(B, Hq, L, S)
        torch.manual_seed(5)
        out, lse = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            q, k.repeat_interleave(Hq // Hk, 1), v.repeat_interleave(Hq // Hk, 1), fb, p, causal, False)[:2] \\
            if Hq != Hk else torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, fb, p, causal, False)[:2]
        q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
        torch.manual_seed(5)
        y = F.scaled_dot_product_attention(q2, k2, v2, attn_mask=bias, dropout_p=p, is_causal=causal,
                                           enable_gqa=Hq != Hk)
        y.backward(gy)
        return [t.detach().cpu() for t in (out, lse, y, q2.grad, k2.grad, v2.grad)]
""")

CHILD = CASES + textwrap.dedent("""
    import sys, rgpu
    # every case twice in one session: the second pass is the rerun
    torch.save([{c[0]: run("rgpu", *c) for c in cases()} for _ in range(2)], sys.argv[1])
""")

ns = {}
exec(CASES, ns)
CASE_LIST = list(ns["cases"]())


def reference(case):
    """out, lse in float64 by the math (no dropout), and the gradients of out."""
    name, dt, B, Hq, Hk, L, S, E, Ev, causal, mask, p, gpt = case
    q, k, v, bias, gy = ns["inputs"](*case)
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    kk, vv = k.repeat_interleave(Hq // Hk, 1), v.repeat_interleave(Hq // Hk, 1)
    s = q @ kk.transpose(-1, -2) / E ** 0.5
    if bias is not None:
        s = s + (bias.double() if bias.dtype != torch.bool else
                 torch.zeros(bias.shape, dtype=torch.float64).masked_fill(bias.logical_not(), float("-inf")))
    if causal:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    dead = torch.isinf(lse).unsqueeze(-1)   # every key masked: out 0, no gradient (ATen's _safe_softmax)
    w = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    out = w @ vv
    out.backward(gy.double())
    return out.detach(), lse.detach(), q.grad, k.grad, v.grad


def child(tmp_path, tag, wmma):
    stats, res = run_counted(tmp_path, tag, CHILD, env={"RGPU_CUDA_SDPA_WMMA": wmma})
    assert len(stats) == 1, stats
    launches = {n: sum(k["launches"] for k in stats[0]["kernels"] if k["name"].startswith(n))
                for n in ("sdpa_fwd_wmma_kernel", "sdpa_D_kernel", "sdpa_dq_wmma_kernel", "sdpa_dkv_wmma_kernel")}
    return launches, res


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    t = tmp_path_factory.mktemp("wmma")
    (n, (a, b)), (n_off, (off, _)) = child(t, "wmma", "1"), child(t, "scalar", "0")
    return (n, a), (n, b), (n_off, off)


def test_every_forward_and_backward_on_tensor_cores(runs):
    (n, _), _, (n_off, _) = runs
    # forward: the op itself, then F.scaled_dot_product_attention; its backward: D, dq, then dk/dv; two passes
    c = 2 * len(CASE_LIST)
    assert n == {"sdpa_fwd_wmma_kernel": 2 * c, "sdpa_D_kernel": c, "sdpa_dq_wmma_kernel": c,
                 "sdpa_dkv_wmma_kernel": c}, n
    assert sum(n_off.values()) == 0, n_off


TOL = {torch.float16: dict(atol=1e-2, rtol=1e-2), torch.bfloat16: dict(atol=4e-2, rtol=4e-2)}


@pytest.mark.parametrize("case", CASE_LIST, ids=[c[0] for c in CASE_LIST])
def test_equal_to_reference_and_scalar_kernel(runs, case):
    (_, res), (_, again), (_, scalar) = runs
    name, dt, p = case[0], case[1], case[11]
    got = res[name]
    for i in range(6):
        assert torch.equal(got[i], again[name][i]), f"{name} output {i}: a rerun differs"
    tol = TOL[dt]
    for i, what in enumerate(("out", "lse", "y", "dq", "dk", "dv")):
        torch.testing.assert_close(got[i].float(), scalar[name][i].float(), **tol, msg=f"{name} {what} vs scalar")
    if p == 0.0:
        out, lse, dq, dk, dv = reference(case)
        want = {"out": out, "lse": lse, "y": out, "dq": dq, "dk": dk, "dv": dv}
        for i, what in enumerate(("out", "lse", "y", "dq", "dk", "dv")):
            w = want[what]
            if what == "lse":   # fully masked rows: -inf on both sides
                assert torch.equal(torch.isinf(got[i]), torch.isinf(w)), name
                g, w = got[i][~torch.isinf(w)], w[~torch.isinf(w)]
            else:
                g = got[i]
            torch.testing.assert_close(g.double(), w.to(torch.float64), **tol, msg=f"{name} {what} vs float64")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
