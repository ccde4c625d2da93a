"""torch.nn modules on rgpu against CPU: nn.FractionalMaxPool2d/3d (batched and
unbatched, with and without _random_samples, return_indices, output_size or
output_ratio; ATen's argument checks) and nn.LinearCrossEntropyLoss (every
constructor option, the chunked custom ops torch_nn::_linear_cross_entropy_
batch_chunked[_no_reduction] included). Forward values and the gradients of
the input and the parameters."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import rgpu

aten = torch.ops.aten
D = "rgpu"


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _equal(a, b):
    """Bitwise equal, NaN where NaN (shape and dtype too)."""
    torch.testing.assert_close(b, a, rtol=0, atol=0, equal_nan=True)


# --- FractionalMaxPool2d / 3d -------------------------------------------------------------

FRAC = {  # sp: (module, kernel, output_size, output_ratio, unbatched input shape)
    2: (nn.FractionalMaxPool2d, (2, 3), (4, 3), (0.6, 0.5), (3, 7, 9)),
    3: (nn.FractionalMaxPool3d, (2, 2, 3), (3, 2, 4), (0.7, 0.5, 0.6), (3, 5, 6, 7)),
}


def _frac_run(m, x, w):
    """Output (and indices) of m on x and the gradient of sum(out * w) wrt x."""
    x = x.clone().requires_grad_()
    r = m(x)
    y, idx = r if isinstance(r, tuple) else (r, None)
    (y * w.to(y.device)).sum().backward()
    return y.detach().cpu(), None if idx is None else idx.cpu(), x.grad.cpu()


@pytest.mark.parametrize("sp", [2, 3])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("samples", ["given", "given_extra_rows", "drawn"])
@pytest.mark.parametrize("return_indices", [False, True])
@pytest.mark.parametrize("size", ["output_size", "output_ratio"])
def test_fractional_max_pool_equal_cpu(sp, batched, samples, return_indices, size):
    cls, k, out, ratio, shape = FRAC[sp]
    g = _gen(sp)
    shape = ((2,) if batched else ()) + shape
    x = torch.randn(shape, generator=g)
    n_batch, n_chan = (shape[0] if batched else 1), shape[-sp - 1]
    kw = {"output_size": out} if size == "output_size" else {"output_ratio": ratio}
    if samples == "drawn":
        # F.fractional_max_pool* draws the samples on the input's device, and
        # rgpu's generator is (seed, offset): the same seed draws them again
        torch.manual_seed(7)
        u = torch.rand(n_batch, n_chan, sp, device=D).cpu()
        mr = cls(k, return_indices=return_indices, **kw).to(D)
    else:
        # ATen reads rows [0, n_batch) of the samples; an unbatched input row 0
        u = torch.rand(n_batch + (2 if samples == "given_extra_rows" else 0), n_chan, sp, generator=g)
        mr = None
    mc = cls(k, return_indices=return_indices, _random_samples=u, **kw)
    if mr is None:
        mr = copy.deepcopy(mc).to(D)
    y0 = mc(x)
    w = torch.randn((y0[0] if return_indices else y0).shape, generator=g)
    yc, ic, gc = _frac_run(mc, x, w)
    torch.manual_seed(7)
    yr, ir, gr = _frac_run(mr, x.to(D), w)
    assert yc.shape[:-sp] == x.shape[:-sp]
    _equal(yc, yr)
    if return_indices:
        _equal(ic, ir)
    torch.testing.assert_close(gr, gc, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("sp", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_fractional_max_pool_dtypes_unbatched_extra_samples(sp, dtype):
    f = aten.fractional_max_pool2d if sp == 2 else aten.fractional_max_pool3d
    b = aten.fractional_max_pool2d_backward if sp == 2 else aten.fractional_max_pool3d_backward
    _, k, out, _, shape = FRAC[sp]
    g = _gen(3)
    x = torch.randn(shape, generator=g).to(dtype)
    u = torch.rand(3, shape[0], sp, generator=g).to(dtype)
    yc, ic = f(x, list(k), list(out), u)
    yr, ir = f(x.to(D), list(k), list(out), u.to(D))
    _equal(yc, yr.cpu())
    _equal(ic, ir.cpu())
    gy = torch.randn(yc.shape, generator=g).to(dtype)
    # where windows overlap, ATen's CPU kernel sums in the dtype, rgpu in float32
    tol = {} if dtype == torch.float64 else {"rtol": 1e-2, "atol": 1e-2}
    torch.testing.assert_close(b(gy.to(D), x.to(D), list(k), list(out), ir).cpu(), b(gy, x, list(k), list(out), ic),
                               **tol)


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("row", [[NAN, 1., NAN, 2.], [INF, 1., NAN, 2.], [1., 3., 3., 2.], [-INF] * 4,
                                 [2., NAN, INF, 1.]])
def test_max_pool_window_nan_like_aten(row):
    """ATen's `val > max || isnan(val)`: the first max, or the last NaN (over +inf)."""
    x = torch.tensor([[[row]]])
    u = torch.full((1, 1, 2), 0.5)
    for fn in (lambda t, s: aten.fractional_max_pool2d(t, [1, 4], [1, 1], s),
               lambda t, s: F.adaptive_max_pool2d(t, 1, return_indices=True),
               lambda t, s: F.adaptive_max_pool3d(t[None], 1, return_indices=True)):
        a, b = fn(x, u), fn(x.to(D), u.to(D))
        _equal(a[0], b[0].cpu())
        _equal(a[1], b[1].cpu())


@pytest.mark.parametrize("sp", [2, 3])
@pytest.mark.parametrize("k, out", [((0, 2, 2), (2, 2, 2)), ((2, 0, 1), (2, 3, 2)), ((2, 2, 2), (0, 2, 2))])
def test_fractional_max_pool_degenerate_sizes(sp, k, out):
    """A pool size of 0 (ATen: -inf at the window's start) or an output size of 0."""
    f = aten.fractional_max_pool2d if sp == 2 else aten.fractional_max_pool3d
    shape = FRAC[sp][4]
    g = _gen(4)
    x = torch.randn(shape, generator=g)
    u = torch.rand(2, shape[0], sp, generator=g)
    a, b = f(x, list(k[:sp]), list(out[:sp]), u), f(x.to(D), list(k[:sp]), list(out[:sp]), u.to(D))
    _equal(a[0], b[0].cpu())
    _equal(a[1], b[1].cpu())


FRAC_BAD = [  # (sp, input shape, kernel, output_size, samples shape, samples dtype)
    (3, (3, 5, 6, 7), [2, 2, 2], [4, 2, 2], (1, 3, 3), None),      # 3-d: out + k - 1 < in, strictly
    (3, (3, 5, 6, 7), [2, 2, 2], [3, 5, 2], (1, 3, 3), None),
    (3, (3, 5, 6, 7), [2, 2, 2], [3, 4, 6], (1, 3, 3), None),
    (3, (3, 5, 6, 7), [2, 2], [2, 2, 2], (1, 3, 3), None),
    (3, (3, 5, 6, 7), [2, 2, 2], [2, 2], (1, 3, 3), None),
    (3, (2, 3, 5, 0, 7), [2, 2, 2], [2, 2, 2], (2, 3, 3), None),
    (3, (5, 6, 7), [2, 2, 2], [2, 2, 2], (1, 3, 3), None),
    (3, (3, 5, 6, 7), [2, 2, 2], [2, 2, 2], (1, 3, 3), torch.float64),
    (3, (3, 5, 6, 7), [2, 2, 2], [2, 2, 2], (3, 3), None),
    (3, (3, 5, 6, 7), [2, 2, 2], [2, 2, 2], (2, 4, 3), None),
    (3, (3, 5, 6, 7), [2, 2, 2], [2, 2, 2], (2, 3, 2), None),
    (3, (2, 3, 5, 6, 7), [2, 2, 2], [2, 2, 2], (1, 3, 3), None),
    (2, (3, 6, 7), [2, 2], [6, 2], (1, 3, 2), None),                # 2-d: out + k - 1 <= in
    (2, (3, 6, 7), [2, 2], [2, 7], (1, 3, 2), None),
    (2, (3, 6, 7), [2], [2, 2], (1, 3, 2), None),
    (2, (2, 0, 6, 7), [2, 2], [2, 2], (2, 0, 2), None),
    (2, (6, 7), [2, 2], [2, 2], (1, 3, 2), None),
    (2, (3, 6, 7), [2, 2], [2, 2], (1, 3, 2), torch.float64),
    (2, (3, 6, 7), [2, 2], [2, 2], (3, 2), None),
    (2, (3, 6, 7), [2, 2], [2, 2], (2, 2, 2), None),
    (2, (3, 6, 7), [2, 2], [2, 2], (2, 3, 3), None),
    (2, (2, 3, 6, 7), [2, 2], [2, 2], (1, 3, 2), None),
]


@pytest.mark.parametrize("case", FRAC_BAD, ids=[str(i) for i in range(len(FRAC_BAD))])
def test_fractional_max_pool_errors_like_cpu(case):
    sp, shape, k, out, ushape, udt = case
    f = aten.fractional_max_pool2d if sp == 2 else aten.fractional_max_pool3d
    x = torch.randn(shape)
    u = torch.rand(ushape, dtype=udt)
    with pytest.raises(RuntimeError) as ec:
        f(x, k, out, u)
    with pytest.raises(RuntimeError) as er:
        f(x.to(D), k, out, u.to(D))
    assert str(er.value) == str(ec.value)


# --- LinearCrossEntropyLoss ---------------------------------------------------------------

N, IN, C = 7, 5, 11
OPTIONS = {
    "reference": None,
    "auto": nn.LinearCrossEntropyOptions(),
    "chunk3": nn.LinearCrossEntropyOptions(batch_chunk_size=3),
    "chunk1_retain": nn.LinearCrossEntropyOptions(batch_chunk_size=1, allow_retain_graph=True),
    "aspect_ratio": nn.LinearCrossEntropyOptions(chunking_method="aspect_ratio"),
    "aspect_ratio_3": nn.LinearCrossEntropyOptions(chunking_method="aspect_ratio:3"),
    "accurate": nn.LinearCrossEntropyOptions(batch_chunk_size=4, acc_policy="accurate"),
    "balanced": nn.LinearCrossEntropyOptions(batch_chunk_size=2, acc_policy="balanced"),
    "compact": nn.LinearCrossEntropyOptions(batch_chunk_size=5, acc_policy="compact"),
}
CHUNK_OPS = ("torch_nn._linear_cross_entropy_batch_chunked.default",
             "torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default")


def _lce_run(m, x, t, gy, input_grad=True, device="cpu"):
    """loss of m (on device) and the gradients of x and m's parameters after
    loss.backward(gy)."""
    m = copy.deepcopy(m).to(device)
    x = x.to(device).detach()
    if input_grad:
        x.requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # "options ignored" where the op falls back
        loss = m(x, t.to(device))
    loss.backward(gy.to(device))
    grads = [x.grad] + [p.grad for p in m.parameters()]
    return [loss.detach().cpu()] + [None if g is None else g.cpu() for g in grads]


def _close(a, b, **tol):
    for u, v in zip(a, b):
        assert (u is None) == (v is None)
        if u is not None:
            assert u.shape == v.shape and u.dtype == v.dtype
            torch.testing.assert_close(v, u, equal_nan=True, **tol)


def _targets(g, ignore, shape=(N,)):
    t = torch.randint(0, C, shape, generator=g)
    t.view(-1)[1] = -100 if ignore is None else ignore      # a row the loss ignores
    t.view(-1)[4] = 3
    return t


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("weight", [False, True])
@pytest.mark.parametrize("ignore_index", [None, 3, -1])
@pytest.mark.parametrize("options", sorted(OPTIONS))
def test_linear_cross_entropy_equal_cpu(reduction, bias, weight, ignore_index, options):
    g = _gen(1)
    torch.manual_seed(0)
    w = torch.rand(C, generator=g) + 0.1 if weight else None
    m = nn.LinearCrossEntropyLoss(IN, C, bias=bias, reduction=reduction, weight=w, ignore_index=ignore_index,
                                  options=OPTIONS[options])
    x = torch.randn(N, IN, generator=g)
    t = _targets(g, ignore_index)
    gy = torch.randn(N, generator=g) if reduction == "none" else torch.tensor(1.7)
    before = dict(rgpu.stats()["decomposed"])
    a = _lce_run(m, x, t, gy)
    b = _lce_run(m, x, t, gy, device=D)
    _close(a, b)
    after = rgpu.stats()["decomposed"]
    used = sum(after.get(k, 0) - before.get(k, 0) for k in CHUNK_OPS)
    assert used == (0 if options == "reference" else 1)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("options", ["reference", "chunk3"])
def test_linear_cross_entropy_no_input_grad(reduction, options):
    """compute_input_grad=False: only linear weight and bias get gradients."""
    g = _gen(2)
    torch.manual_seed(0)
    m = nn.LinearCrossEntropyLoss(IN, C, bias=True, reduction=reduction, options=OPTIONS[options])
    x, t = torch.randn(N, IN, generator=g), _targets(g, None)
    gy = torch.randn(N, generator=g) if reduction == "none" else torch.tensor(0.5)
    _close(_lce_run(m, x, t, gy, input_grad=False), _lce_run(m, x, t, gy, input_grad=False, device=D))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("options", ["reference", "chunk3", "auto"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("kind", ["unbatched", "probabilities", "out_features", "all_ignored"])
def test_linear_cross_entropy_other_inputs(reduction, options, label_smoothing, kind):
    """label_smoothing, class-probability targets and K-dimensional loss (the
    chunked path hands these to the reference one), an unbatched input, and a
    batch whose every row is ignored (mean: NaN)."""
    g = _gen(3)
    torch.manual_seed(0)
    kw = {"out_features": (2, 3)} if kind == "out_features" else {}
    m = nn.LinearCrossEntropyLoss(IN, C, bias=True, reduction=reduction, label_smoothing=label_smoothing,
                                  weight=torch.rand(C, generator=g) + 0.1, options=OPTIONS[options], **kw)
    if kind == "unbatched":
        x, t = torch.randn(IN, generator=g), torch.tensor(4)
    elif kind == "probabilities":
        x, t = torch.randn(N, IN, generator=g), torch.softmax(torch.randn(N, C, generator=g), -1)
    elif kind == "out_features":
        x, t = torch.randn(N, IN, generator=g), torch.randint(0, C, (N, 2, 3), generator=g)
    else:
        x, t = torch.randn(N, IN, generator=g), torch.full((N,), -100)
    if reduction == "none":
        gy = torch.randn(t.shape if kind != "probabilities" else t.shape[:-1], generator=g)
    else:
        gy = torch.tensor(1.3)
    _close(_lce_run(m, x, t, gy), _lce_run(m, x, t, gy, device=D))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("allow_retain_graph", [False, True])
def test_linear_cross_entropy_backward_twice(reduction, allow_retain_graph):
    """The chunked mean/sum op consumes its precomputed gradients unless
    allow_retain_graph; reduction none recomputes them: as on CPU."""
    g = _gen(4)
    torch.manual_seed(0)
    opts = nn.LinearCrossEntropyOptions(batch_chunk_size=3, allow_retain_graph=allow_retain_graph)
    m0 = nn.LinearCrossEntropyLoss(IN, C, bias=True, reduction=reduction, options=opts)
    x, t = torch.randn(N, IN, generator=g), _targets(g, None)
    res = []
    for dev in ("cpu", D):
        m = copy.deepcopy(m0).to(dev)
        xd = x.to(dev).detach().requires_grad_()
        loss = m(xd, t.to(dev)).sum()
        loss.backward(retain_graph=True)
        if allow_retain_graph or reduction == "none":
            loss.backward()
            res.append([xd.grad.cpu()] + [p.grad.cpu() for p in m.parameters()])
        else:
            with pytest.raises(RuntimeError, match="backward called twice"):
                loss.backward()
    if res:
        _close(res[0], res[1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("policy", ["accurate", "balanced", "compact"])
@pytest.mark.parametrize("acc_dtype", [None, torch.float32])
def test_linear_cross_entropy_low_precision_equal_cpu(dtype, reduction, policy, acc_dtype):
    """Every argument given, the chunked op runs CPU's ops in CPU's order: equal."""
    g = _gen(5)
    torch.manual_seed(0)
    opts = nn.LinearCrossEntropyOptions(batch_chunk_size=3, acc_policy=policy, acc_dtype=acc_dtype)
    m = nn.LinearCrossEntropyLoss(8, 30, bias=True, reduction=reduction, dtype=dtype, options=opts,
                                  weight=(torch.rand(30, generator=g) + 0.1).to(dtype), ignore_index=2)
    x = torch.randn(9, 8, generator=g).to(dtype)
    t = torch.randint(0, 30, (9,), generator=g)
    t[3] = 2
    gy = torch.randn(9, generator=g).to(dtype) if reduction == "none" else torch.tensor(1.0, dtype=dtype)
    _close(_lce_run(m, x, t, gy), _lce_run(m, x, t, gy, device=D), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linear_cross_entropy_low_precision_auto(dtype):
    """acc_policy / chunking_method "auto" resolve per device type in torch
    (F.linear_cross_entropy, before the op): CPU's entry is ("accurate",
    "aspect_ratio") with float32 accumulation, any other device's ("compact",
    "aspect_ratio:2") in the input dtype. Close, at the dtype's precision."""
    g = _gen(6)
    torch.manual_seed(0)
    m = nn.LinearCrossEntropyLoss(8, 30, bias=True, dtype=dtype, options=nn.LinearCrossEntropyOptions())
    x = torch.randn(9, 8, generator=g).to(dtype)
    t = torch.randint(0, 30, (9,), generator=g)
    _close(_lce_run(m, x, t, torch.tensor(1.0, dtype=dtype)),
           _lce_run(m, x, t, torch.tensor(1.0, dtype=dtype), device=D), rtol=2e-2, atol=2e-2)


def test_linear_cross_entropy_label_smoothing_direct_op_error():
    """The chunked op itself takes no label smoothing: its own error, on rgpu too."""
    import torch.nn.modules.linear_cross_entropy  # noqa: F401  (registers torch_nn::)
    op = torch.ops.torch_nn._linear_cross_entropy_batch_chunked.default
    x, w, t = torch.randn(4, IN), torch.randn(C, IN), torch.randint(0, C, (4,))

    def call(d):
        return op(x.to(d), w.to(d), t.to(d), None, None, "mean", -100, 0.1, 2, "compact", torch.float32, False,
                  False, False, False)
    with pytest.raises(NotImplementedError) as ec:
        call("cpu")
    with pytest.raises(NotImplementedError) as er:
        call(D)
    assert str(er.value) == str(ec.value)
