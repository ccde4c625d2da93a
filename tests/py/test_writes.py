"""Ops that write an argument write what CPU writes, and a handler that does not
write its argument fails loudly (torchhook/rgpu/writes.py).

The _foreach_* forms here are torch.optim's (Adam amsgrad: _foreach_maximum_;
Adamax: _foreach_maximum_ of a list); every in-place, out= and foreach variant
of torch's OpInfo databases runs in test_opinfo.py."""
import torch
import pytest

import rgpu  # noqa: F401
from rgpu import dispatch, writes

aten = torch.ops.aten


def _pair(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    cpu = [torch.randn(s, generator=g) for s in shapes]
    return cpu, [t.to("rgpu") for t in cpu]


def _same(cpu, got):
    for a, b in zip(cpu, got):
        torch.testing.assert_close(b.cpu(), a, rtol=0, atol=0)


def test_foreach_maximum_minimum_list_inplace():
    # the repro: the targets must change
    a = [torch.tensor([1., 5.]), torch.tensor([3.])]
    b = [torch.tensor([4., 2.]), torch.tensor([7.])]
    ar, br = [t.to("rgpu") for t in a], [t.to("rgpu") for t in b]
    torch._foreach_maximum_(a, b)
    torch._foreach_maximum_(ar, br)
    assert [t.cpu().tolist() for t in ar] == [[4.0, 5.0], [7.0]]
    _same(a, ar)
    torch._foreach_minimum_(a, b)
    torch._foreach_minimum_(ar, br)
    _same(a, ar)


@pytest.mark.parametrize("name", ["maximum", "minimum", "clamp_min", "clamp_max"])
@pytest.mark.parametrize("other", ["list", "scalar", "scalarlist"])
def test_foreach_binary_inplace_forms(name, other):
    x, xr = _pair((3, 4), (5,), (), seed=1)
    y, yr = _pair((3, 4), (5,), (), seed=2)
    arg_c, arg_r = {"list": (y, yr), "scalar": (0.1, 0.1), "scalarlist": ([0.1, -0.2, 0.3],) * 2}[other]
    ip = getattr(torch, f"_foreach_{name}_")
    oop = getattr(torch, f"_foreach_{name}")
    _same(oop(x, arg_c), oop(xr, arg_r))
    ip(x, arg_c)
    ip(xr, arg_r)
    _same(x, xr)


def test_foreach_out_and_functional_forms():
    x, xr = _pair((2, 3), (4,), seed=3)
    y, yr = _pair((2, 3), (4,), seed=4)
    out_c = [torch.empty_like(t) for t in x]
    out_r = [torch.empty_like(t) for t in xr]
    aten._foreach_maximum.List_out(x, y, out=out_c)
    aten._foreach_maximum.List_out(xr, yr, out=out_r)
    _same(out_c, out_r)
    aten._foreach_add.List_out(x, y, alpha=2.0, out=out_c)
    aten._foreach_add.List_out(xr, yr, alpha=2.0, out=out_r)
    _same(out_c, out_r)
    _same(aten._foreach_copy.default(x, y), aten._foreach_copy.default(xr, yr))
    _same(aten._foreach_zero.default(x), aten._foreach_zero.default(xr))
    for o in (2, 1, 3, 0.5):
        for a, b in zip(torch._foreach_powsum(x, o), torch._foreach_powsum(xr, o)):
            torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("amsgrad", [False, True])
def test_adam_amsgrad_foreach_and_adamax(amsgrad):
    torch.manual_seed(0)
    for cls, kw in ((torch.optim.Adam, {"amsgrad": amsgrad}), (torch.optim.AdamW, {"amsgrad": amsgrad}),
                    (torch.optim.Adamax, {})):
        p = [torch.randn(4, 3), torch.randn(3)]
        pr = [torch.nn.Parameter(t.to("rgpu")) for t in p]
        pc = [torch.nn.Parameter(t.clone()) for t in p]
        oc, orr = cls(pc, lr=0.1, foreach=True, **kw), cls(pr, lr=0.1, foreach=True, **kw)
        for step in range(4):
            for ps, opt in ((pc, oc), (pr, orr)):
                opt.zero_grad()
                loss = sum(((q * (step + 1)) ** 2).sum() for q in ps)
                loss.backward()
                opt.step()
        for a, b in zip(pc, pr):
            torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)
        for sa, sb in zip(oc.state.values(), orr.state.values()):
            for k in sa:
                torch.testing.assert_close(sb[k].cpu(), sa[k], rtol=1e-5, atol=1e-6)


# --- the rule: a handler that does not write fails -----------------------------------

def _break(func, monkeypatch, handler):
    """Install handler as func's dispatch handler, wrapped as dispatch wraps it."""
    w = writes.written_args(func)
    monkeypatch.setitem(dispatch._HANDLERS, id(func), writes.checked(handler, func, w))


@pytest.mark.parametrize("func,call", [
    (aten.add_.Tensor, lambda x, y: x.add_(y)),
    (aten.mul_.Scalar, lambda x, y: aten.mul_.Scalar(x, 3.0)),
    (aten.add.out, lambda x, y: torch.add(x, y, out=x)),
    (aten._foreach_mul_.Scalar, lambda x, y: torch._foreach_mul_([x, y], 2.0)),
])
def test_a_handler_that_writes_nothing_raises(monkeypatch, func, call):
    x, y = torch.randn(5).to("rgpu"), torch.randn(5).to("rgpu")

    def writes_nothing(func, args, kwargs):
        return args[0] if not isinstance(args[0], list) else None
    _break(func, monkeypatch, writes_nothing)
    with pytest.raises(RuntimeError, match="did not write"):
        call(x, y)


def test_a_handler_that_returns_a_new_tensor_raises(monkeypatch):
    x, y = torch.randn(5).to("rgpu"), torch.randn(5).to("rgpu")

    def new_tensor(func, args, kwargs):
        args[0].copy_(args[0] + args[1])
        return args[0] + 0
    _break(aten.add_.Tensor, monkeypatch, new_tensor)
    with pytest.raises(RuntimeError, match="returned a new tensor"):
        x.add_(y)


def test_writes_through_a_view_count():
    # a decomposition may write its target through a view made inside it
    x = torch.zeros(4, 3)
    xr = x.to("rgpu")
    for t in (x, xr):
        t.index_fill_(1, torch.tensor([0, 2], device=t.device), 7.0)
        t.diagonal().fill_(-1.0)
        torch.cumsum(t[:1], 1, out=t[1:2])
        t[2:].addcmul_(t[:1], t[1:2], value=0.5)
    torch.testing.assert_close(xr.cpu(), x)


def test_metadata_only_ops_are_not_checked():
    x = torch.randn(6).to("rgpu")
    x.resize_(2, 3)
    x.unsqueeze_(0)
    assert tuple(x.shape) == (1, 2, 3)
    assert writes.written_args(aten.resize_.default) == []
    assert writes.written_args(aten.unsqueeze_.default) == []
    assert writes.written_args(aten.add_.Tensor) == [(0, "self", False)]


# --- `t.data = other` ------------------------------------------------------------------

def test_set_data_takes_the_other_tensors_values():
    p = torch.nn.Parameter(torch.zeros(3).to("rgpu"))
    p.data = torch.ones(3).to("rgpu")
    assert p.cpu().tolist() == [1.0, 1.0, 1.0] and p.requires_grad
    q = torch.zeros(2, 2).to("rgpu")
    src = torch.arange(6.).to("rgpu")
    q.data = src
    assert tuple(q.shape) == (6,) and q.cpu().tolist() == list(range(6))
    del src                     # q keeps the server tensor alive
    assert q.cpu().tolist() == list(range(6))
    with pytest.raises(RuntimeError, match="cannot set .data of an rgpu tensor to a tensor on cpu"):
        p.data = torch.ones(3)


def test_vector_to_parameters_then_train():
    mc = torch.nn.Linear(2, 3)
    mr = torch.nn.Linear(2, 3).to("rgpu")
    vec = torch.arange(9.) / 10
    torch.nn.utils.vector_to_parameters(vec, mc.parameters())
    torch.nn.utils.vector_to_parameters(vec.to("rgpu"), mr.parameters())
    x = torch.randn(4, 2)
    for m, xx in ((mc, x), (mr, x.to("rgpu"))):
        m(xx).pow(2).sum().backward()
    for a, b in zip(mc.parameters(), mr.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach())
        torch.testing.assert_close(b.grad.cpu(), a.grad)


# --- out= of several outputs, composite out= kernels, in-place broadcasting -----------

@pytest.mark.parametrize("call", [
    lambda x, o: torch.sort(x, 1, out=o),
    lambda x, o: torch.sort(x, stable=True, dim=1, descending=True, out=o),
    lambda x, o: torch.cummax(x, 1, out=o),
    lambda x, o: torch.cummin(x, 0, out=o),
    lambda x, o: torch.mode(x.round(), 1, out=o),
], ids=["sort", "sort_stable", "cummax", "cummin", "mode"])
def test_multi_output_out_is_written(call):
    x = torch.randn(4, 5)
    got = []
    for xx in (x, x.to("rgpu")):
        o = (torch.full((4, 5), float("nan"), device=xx.device), torch.zeros((4, 5), dtype=torch.long,
                                                                             device=xx.device))
        r = call(xx, o)
        assert r[0] is o[0] and r[1] is o[1]
        got.append([t.cpu() for t in o])
    for a, b in zip(*got):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


@pytest.mark.parametrize("kw", [{}, {"hermitian": True}, {"atol": 0.5}, {"rtol": 0.1}, {"tol": 1e-3}])
def test_matrix_rank_out_is_written(kw):
    a = torch.randn(5, 5)
    a[4] = a[3]
    if kw.get("hermitian"):
        a = a @ a.T
    o = torch.full((), 99, dtype=torch.long).to("rgpu")
    r = torch.linalg.matrix_rank(a.to("rgpu"), out=o, **kw)
    assert r is o and o.item() == torch.linalg.matrix_rank(a, **kw).item() == 4


@pytest.mark.parametrize("name", ["atan2_", "clamp_min_", "eq_", "pow_", "fmod_", "hypot_", "xlogy_"])
def test_inplace_never_broadcasts_self(name):
    x, y = torch.rand(5, 1) + 0.5, torch.rand(5, 5) + 0.5
    with pytest.raises(RuntimeError, match=r"doesn't match the broadcast shape \[5, 5\]"):
        getattr(x.clone(), name)(y)
    xr = x.to("rgpu")
    with pytest.raises(RuntimeError, match=r"doesn't match the broadcast shape \[5, 5\]"):
        getattr(xr, name)(y.to("rgpu"))
    assert tuple(xr.shape) == (5, 1) and torch.equal(xr.cpu(), x)


def test_conj_physical_of_a_real_tensor_is_itself():
    x = torch.randn(3)
    xr = x.to("rgpu")
    assert xr.conj_physical_() is xr and torch.equal(xr.cpu(), x)
