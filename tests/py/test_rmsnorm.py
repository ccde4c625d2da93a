"""Fused RMS norm (RMS_NORM / RMS_NORM_BACKWARD records, torchhook/rgpu/rmsnorm.py):
F.rms_norm and nn.RMSNorm on rgpu against PyTorch CPU, output and the
gradients of the input and the weight, for several normalized shapes, with
and without weight, eps given or not, every floating dtype; double backward;
one record each way; torch.compile (which traces the composite) agrees.
Runs on whichever backend the server has (the cudaemu suite runs it on cuda)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import rgpu
from rgpu import rmsnorm as rrms

G = torch.Generator().manual_seed(0)


def _randn(*shape, dtype=torch.float32):
    return torch.randn(shape, generator=G).to(dtype)


CASES = [((8,), (3, 5, 8), True, 1e-5), ((4, 6), (2, 4, 6), False, None), ((64,), (33, 64), True, 1e-6),
         ((1000,), (3, 1000), True, 1e-5), ((1500,), (2, 1500), False, 1e-5), ((5,), (5,), True, 0.1)]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_rms_norm_matches_cpu(case, dtype):
    shape, xs, has_w, eps = CASES[case]
    x, g = _randn(*xs, dtype=dtype), _randn(*xs, dtype=dtype)
    w = _randn(*shape, dtype=dtype) if has_w else None
    xr = x.to("rgpu").requires_grad_()
    wr = w.to("rgpu").requires_grad_() if has_w else None
    before = rrms.counts()["fused"]
    y = F.rms_norm(xr, shape, wr, eps)
    assert rrms.counts()["fused"] == before + 1
    y.backward(g.to("rgpu"))
    xc = x.clone().requires_grad_()
    wc = w.clone().requires_grad_() if has_w else None
    yc = F.rms_norm(xc.double(), shape, None if wc is None else wc.double(), eps).to(dtype)
    yc.backward(g)
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    assert y.dtype == dtype and xr.grad.dtype == dtype
    for got, want in ((y.detach(), yc.detach()), (xr.grad, xc.grad)) + (((wr.grad, wc.grad),) if has_w else ()):
        got = got.cpu().double()
        want = want.double()
        assert torch.allclose(got, want, atol=tol * max(1.0, want.abs().max().item()), rtol=tol), \
            (got - want).abs().max()


def test_one_record_each_way():
    x = _randn(4, 32).to("rgpu").requires_grad_()
    w = _randn(32).to("rgpu").requires_grad_()
    torch.rgpu.synchronize()
    ops0 = rgpu.stats()["ops"]
    y = F.rms_norm(x, (32,), w)
    ops1 = rgpu.stats()["ops"]
    y.backward(torch.ones_like(y))
    ops2 = rgpu.stats()["ops"]
    assert ops1 - ops0 == 1                 # RMS_NORM
    assert ops2 - ops1 <= 3                 # ones_like's fill, RMS_NORM_BACKWARD, (an accumulate)


def test_module_trains_like_cpu():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.RMSNorm(32), nn.GELU(), nn.Linear(32, 4))
    rnet = copy.deepcopy(net).to("rgpu")
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    ropt = torch.optim.SGD(rnet.parameters(), lr=0.1)
    for _ in range(3):
        x = _randn(8, 16)
        for m, o, xx in ((net, opt, x), (rnet, ropt, x.to("rgpu"))):
            m(xx).square().mean().backward()
            o.step()
            o.zero_grad()
    for p, q in zip(rnet.parameters(), net.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5)


def test_double_backward():
    x = _randn(3, 8, dtype=torch.float64)
    w = _randn(8, dtype=torch.float64)

    def gg(x, w):
        x = x.clone().requires_grad_()
        w = w.clone().requires_grad_()
        y = F.rms_norm(x, (8,), w)
        (gx,) = torch.autograd.grad(y.square().sum(), x, create_graph=True)
        gx.sum().backward()
        return gx.detach(), w.grad

    got = gg(x.to("rgpu"), w.to("rgpu"))
    want = gg(x, w)
    for a, b in zip(got, want):
        assert torch.allclose(a.cpu(), b, atol=1e-10)


def test_compiled_matches_eager():
    def f(x, w):
        return F.rms_norm(x, (16,), w) * 2.0

    x, w = _randn(4, 16), _randn(16)
    got = torch.compile(f, backend="rgpu")(x.to("rgpu"), w.to("rgpu")).cpu()
    assert torch.allclose(got, f(x, w), atol=1e-5)


def test_composite_for_what_it_does_not_take():
    x = _randn(3, 4).to("rgpu")
    before = rrms.counts()
    y = F.rms_norm(x, (4,), torch.ones(4, dtype=torch.float32).to("rgpu").to(torch.complex64).real)
    assert rrms.counts()["fused"] == before["fused"] + 1        # a real view of a complex weight is a float tensor
    with pytest.raises(RuntimeError):
        F.rms_norm(x, (5,))                                      # ATen's own message from the composite
    assert rrms.counts()["composite"] == before["composite"] + 1
    assert torch.allclose(y.cpu(), F.rms_norm(x.cpu(), (4,)), atol=1e-6)
