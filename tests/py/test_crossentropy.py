"""Fused cross-entropy (CROSS_ENTROPY / CROSS_ENTROPY_BACKWARD records,
torchhook/rgpu/crossentropy.py): F.cross_entropy over class indices on rgpu
against PyTorch CPU, loss and the gradient of the logits, every reduction,
with weights and ignore_index, 1-d logits, rows longer than a warp's
(the block kernel), every floating dtype; bad targets fail at the next wait
with ATen's message; double backward; the calls it does not take (label
smoothing, probabilities) still agree. Runs on whichever backend the server
has (the cudaemu suite runs it on cuda)."""
import pytest
import torch
import torch.nn.functional as F

import rgpu
from rgpu import crossentropy as rce

G = torch.Generator().manual_seed(0)


def _randn(*shape, dtype=torch.float32):
    return torch.randn(shape, generator=G).to(dtype)


def _run(x, t, w=None, **kw):
    xr = x.to("rgpu").requires_grad_()
    before = rce.counts()["fused"]
    loss = F.cross_entropy(xr, t.to("rgpu"), weight=None if w is None else w.to("rgpu"), **kw)
    fused = rce.counts()["fused"] - before
    g = _randn(*loss.shape, dtype=x.dtype)
    loss.backward(g.to("rgpu"))
    xc = x.clone().requires_grad_()
    ref = F.cross_entropy(xc.double(), t, weight=None if w is None else w.double(), **kw)
    ref.backward(g.double())
    return loss.detach().cpu(), xr.grad.cpu(), ref.detach(), xc.grad.double(), fused


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_cross_entropy_matches_cpu(reduction, weighted, dtype):
    C = 7
    x = _randn(9, C, dtype=dtype)
    t = torch.tensor([0, 1, 2, 6, 4, 5, 3, 2, 1])
    t[4] = -100                                  # ignore_index's default
    w = torch.rand(C, generator=G).to(dtype) + 0.5 if weighted else None
    loss, gx, ref, rgx, fused = _run(x, t, w, reduction=reduction)
    assert fused == 1 and loss.dtype == dtype and gx.dtype == dtype
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 3e-2, torch.float16: 3e-3}[dtype]
    assert torch.allclose(loss.double(), ref, atol=tol, rtol=tol), (loss, ref)
    assert torch.allclose(gx.double(), rgx, atol=tol, rtol=tol), (gx.double() - rgx).abs().max()
    assert gx[4].abs().max().item() == 0.0       # the ignored row


@pytest.mark.parametrize("C", [1500, 50])
def test_long_rows_and_ignore_index(C):
    x = _randn(5, C) * 4
    t = torch.tensor([C - 1, 0, 7, 7, 3])
    loss, gx, ref, rgx, _ = _run(x, t, ignore_index=7)
    assert torch.allclose(loss.double(), ref, atol=1e-5)
    assert torch.allclose(gx.double(), rgx, atol=1e-6)


def test_one_d_logits_and_all_ignored():
    x, t = _randn(6), torch.tensor(4)
    loss, gx, ref, rgx, fused = _run(x, t)
    assert fused == 1 and torch.allclose(loss.double(), ref, atol=1e-6) and torch.allclose(gx.double(), rgx, atol=1e-6)
    ign = torch.full((3,), -100)
    x3 = _randn(3, 4)
    got = F.cross_entropy(x3.to("rgpu"), ign.to("rgpu")).cpu()
    assert torch.isnan(got) and torch.isnan(F.cross_entropy(x3, ign))   # mean over no target: NaN, as ATen


def test_bad_target_fails_at_the_next_wait():
    x = _randn(3, 4).to("rgpu")
    loss = F.cross_entropy(x, torch.tensor([0, 9, 1]).to("rgpu"))
    with pytest.raises(rgpu.RemoteError, match="Target 9 is out of bounds"):
        loss.item()
    assert F.cross_entropy(x, torch.tensor([0, 3, 1]).to("rgpu")).item() > 0    # the session goes on


def test_one_record_forward():
    xc = _randn(4, 10)
    x = xc.to("rgpu").requires_grad_()
    t = torch.tensor([1, 2, 3, 4])
    tr = t.to("rgpu")
    torch.rgpu.synchronize()
    ops0 = rgpu.stats()["ops"]
    loss = F.cross_entropy(x, tr)
    assert rgpu.stats()["ops"] - ops0 == 1
    loss.backward()
    xc.requires_grad_()
    F.cross_entropy(xc, t).backward()
    assert torch.allclose(x.grad.cpu(), xc.grad, atol=1e-7)


def test_double_backward():
    x, t = _randn(4, 5, dtype=torch.float64), torch.tensor([0, 4, 2, 1])

    def gg(x, t):
        x = x.clone().requires_grad_()
        (gx,) = torch.autograd.grad(F.cross_entropy(x, t), x, create_graph=True)
        (h,) = torch.autograd.grad(gx.square().sum(), x)
        return gx.detach(), h

    for a, b in zip(gg(x.to("rgpu"), t.to("rgpu")), gg(x, t)):
        assert torch.allclose(a.cpu(), b, atol=1e-10)


def test_composite_for_what_it_does_not_take():
    x = _randn(5, 4)
    before = rce.counts()
    for kw, t in ((dict(label_smoothing=0.1), torch.tensor([0, 1, 2, 3, 0])),
                  ({}, torch.softmax(_randn(5, 4), -1))):
        got = F.cross_entropy(x.to("rgpu"), t.to("rgpu"), **kw).cpu()
        assert torch.allclose(got, F.cross_entropy(x, t, **kw), atol=1e-6)
    assert rce.counts()["fused"] == before["fused"] and rce.counts()["composite"] == before["composite"] + 2
