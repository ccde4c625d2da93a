"""Index ops: module-level training of nn.EmbeddingBag against the CPU,
gradients of the decomposed ops (cdist, pdist, bilinear, addbmm, index_reduce,
scatter_reduce, embedding_bag with per_sample_weights), and determinism of
scatter_reduce."""
import pytest
import torch
import torch.nn.functional as F

import rgpu

DEV = "rgpu"


def _close(a, b, what, rtol=1e-5, atol=1e-5):
    torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


class _Bags(torch.nn.Module):
    def __init__(self, mode, padding_idx=None, max_norm=None):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(20, 6, mode=mode, padding_idx=padding_idx, max_norm=max_norm)
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x, offsets=None, psw=None):
        return self.head(self.bag(x, offsets, per_sample_weights=psw))


def _train(model, batches, steps=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, grads = [], []
    for s in range(steps):
        x, off, psw, y = batches[s % len(batches)]
        opt.zero_grad()
        loss = F.cross_entropy(model(x, off, psw), y)
        loss.backward()
        losses.append(loss.detach())
        grads.append(model.bag.weight.grad.detach().clone())
        opt.step()
    return losses, grads, model.bag.weight.detach()


def _batches(two_d, with_psw, dev):
    g = torch.Generator().manual_seed(3)
    out = []
    for _ in range(2):
        if two_d:
            x, off = torch.randint(0, 20, (4, 5), generator=g), None
        else:
            x, off = torch.randint(0, 20, (11,), generator=g), torch.tensor([0, 3, 3, 8])
        psw = torch.rand(x.shape, generator=g) if with_psw else None
        y = torch.randint(0, 3, (4,), generator=g)
        out.append(tuple(None if t is None else t.to(dev) for t in (x, off, psw, y)))
    return out


@pytest.mark.parametrize("mode,two_d,psw,pad,max_norm", [
    ("sum", False, False, None, None), ("mean", False, False, 2, None), ("max", False, False, None, None),
    ("sum", True, True, None, None), ("mean", True, False, None, 1.0), ("max", True, False, 5, None),
])
def test_embedding_bag_trains_like_cpu(mode, two_d, psw, pad, max_norm):
    torch.manual_seed(0)
    cpu = _Bags(mode, pad, max_norm)
    rg = _Bags(mode, pad, max_norm)
    rg.load_state_dict(cpu.state_dict())
    rg.to(DEV)
    lc, gc, wc = _train(cpu, _batches(two_d, psw, "cpu"))
    lr, gr, wr = _train(rg, _batches(two_d, psw, DEV))
    for s, (a, b) in enumerate(zip(lr, lc)):
        _close(a, b, f"loss {s}")
    for s, (a, b) in enumerate(zip(gr, gc)):
        _close(a, b, f"weight grad {s}")
    _close(wr, wc, "weight after training")


def _grads(fn, tensors):
    cl = [t.clone().requires_grad_() for t in tensors]
    rl = [t.to(DEV).requires_grad_() for t in tensors]
    oc, orr = fn(*cl), fn(*rl)
    w = torch.randn(oc.shape, generator=torch.Generator().manual_seed(9))
    (oc * w).sum().backward()
    (orr * w.to(DEV)).sum().backward()
    _close(orr, oc, "forward", 1e-4, 1e-4)
    for k, (a, b) in enumerate(zip(rl, cl)):
        _close(a.grad, b.grad, f"grad {k}", 1e-4, 1e-4)


GRADS = {
    "cdist_p2": (lambda a, b: torch.cdist(a, b), [(2, 4, 3), (2, 5, 3)]),
    "cdist_p2_mm": (lambda a, b: torch.cdist(a, b), [(30, 3), (4, 3)]),
    "cdist_p1_inf_3": (lambda a, b: torch.cdist(a, b, 1.0) + torch.cdist(a, b, float("inf")) + torch.cdist(a, b, 3.0),
                       [(4, 3), (5, 3)]),
    "pdist": (lambda a: F.pdist(a) + F.pdist(a, 1.0), [(5, 3)]),
    "bilinear": (lambda a, b, w, bias: F.bilinear(a, b, w, bias), [(4, 3), (4, 2), (5, 3, 2), (5,)]),
    "addbmm": (lambda x, a, b: torch.addbmm(x, a, b, beta=0.5), [(3, 5), (4, 3, 2), (4, 2, 5)]),
    "scatter_reduce_amax": (lambda x, s: torch.scatter_reduce(x, 0, torch.tensor([0, 2, 2, 1, 0]).to(x.device), s, "amax"),
                            [(4,), (5,)]),
    "scatter_reduce_mean": (lambda x, s: torch.scatter_reduce(x, 0, torch.tensor([0, 2, 2, 1, 0]).to(x.device), s,
                                                              "mean", include_self=False), [(4,), (5,)]),
    "segment_reduce": (lambda d: sum(torch.segment_reduce(d, r, lengths=torch.tensor([2, 0, 3, 1]).to(d.device),
                                                          initial=1.5) for r in ("sum", "mean", "max", "min", "prod")),
                       [(6, 2)]),
    "index_reduce_prod": (lambda x, s: torch.index_reduce(x, 0, torch.tensor([0, 2, 2]).to(x.device), s, "prod"),
                          [(3, 2), (3, 2)]),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_grads(name):
    fn, shapes = GRADS[name]
    g = torch.Generator().manual_seed(1)
    _grads(fn, [torch.randn(s, generator=g) for s in shapes])


def test_scatter_reduce_is_deterministic():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 300, generator=g).to(DEV)
    src = torch.randn(4, 5000, generator=g).to(DEV)
    ix = torch.randint(0, 300, (4, 5000), generator=g).to(DEV)
    r1 = torch.scatter_reduce(x, 1, ix, src, "mean").cpu()
    r2 = torch.scatter_reduce(x, 1, ix, src, "mean").cpu()
    assert torch.equal(r1, r2)
    want = torch.scatter_reduce(x.cpu(), 1, ix.cpu(), src.cpu(), "mean")
    torch.testing.assert_close(r1, want)


def test_gather_index_dtype_as_cpu():
    x = torch.randn(5)
    assert torch.gather(x.to(DEV), 0, torch.zeros(2, 0, dtype=torch.uint8, device=DEV)).shape == (2, 0)
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index"):
        torch.gather(x.to(DEV), 0, torch.ones(1, dtype=torch.uint8, device=DEV))


def test_decompositions_are_counted():
    before = rgpu.stats()["decomposed"].get("aten.addbmm.default", 0)
    torch.addbmm(torch.zeros(2, 2, device=DEV), torch.ones(3, 2, 2, device=DEV), torch.ones(3, 2, 2, device=DEV))
    assert rgpu.stats()["decomposed"].get("aten.addbmm.default", 0) == before + 1
