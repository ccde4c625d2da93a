"""Ops outside ops.def reach rgpu through decompositions (torchhook/rgpu/decomp.py):
results against PyTorch CPU, no waits, and the counts in rgpu.stats()["decomposed"]."""
import pytest
import torch
import torch.nn.functional as F

import rgpu

aten = torch.ops.aten
DEV = "rgpu"
TOL = dict(rtol=1e-5, atol=1e-5)


def sample(shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 2).to(dtype)


def waits():
    return rgpu.stats()["waits"]


def decomposed():
    return rgpu.stats()["decomposed"]


# fn(*inputs) on CPU and rgpu, forward and the gradient of sum(out * w)
DECOMPOSED = {
    "_safe_softmax": (lambda x: aten._safe_softmax(x, -1), [(3, 5)]),
    "safe_softmax_all_masked": (lambda x: aten._safe_softmax(x.masked_fill(x > -100, float("-inf")), -1),
                                [(2, 4)]),
    "masked_fill": (lambda x: x.masked_fill(x > 0, 0.5), [(3, 4)]),
    "silu_": (lambda x: F.silu(x * 1, inplace=True), [(3, 4)]),
    "hardtanh": (lambda x: F.hardtanh(x, -1.0, 2.0), [(3, 4)]),
    "relu6": (lambda x: F.relu6(x), [(3, 4)]),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), [(3, 4)]),
    "logsumexp": (lambda x: torch.logsumexp(x, 1), [(3, 4)]),
    "mse_loss": (lambda x, y: F.mse_loss(x, y), [(3, 4), (3, 4)]),
    "smooth_l1_loss": (lambda x, y: F.smooth_l1_loss(x, y, beta=0.5), [(3, 4), (3, 4)]),
    "bce_with_logits": (lambda x, y: F.binary_cross_entropy_with_logits(x, torch.sigmoid(y)), [(3, 4), (3, 4)]),
    "log_sigmoid": (lambda x: F.logsigmoid(x), [(3, 4)]),
    "softplus": (lambda x: F.softplus(x, beta=2, threshold=3), [(3, 4)]),
    "elu": (lambda x: F.elu(x, 0.7), [(3, 4)]),
    "addcmul_": (lambda x, a, b: (x * 1).addcmul_(a, b, value=0.5), [(3, 4), (3, 4), (4,)]),
    "lerp_": (lambda x, y: (x * 1).lerp_(y, 0.3), [(3, 4), (3, 4)]),
    "flip": (lambda x: x.flip(0, -1), [(3, 4)]),
    "cumsum_backward": (lambda x: x.cumsum(1), [(3, 4)]),
    "var_mean": (lambda x: sum(torch.var_mean(x, 1)), [(3, 4)]),
    "hardswish": (lambda x: F.hardswish(x), [(3, 4)]),
    "mish": (lambda x: F.mish(x), [(3, 4)]),
    "glu": (lambda x: F.glu(x, -1), [(3, 4)]),
    "group_norm": (lambda x: F.group_norm(x, 2), [(2, 4, 3)]),
    "rsub": (lambda x: 1 - x, [(3, 4)]),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             [(1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)]),
    # torch's renorm decomposition casts with prims.convert_element_type at low precision
    "renorm_bf16": (lambda x: torch.renorm(x.to(torch.bfloat16), 2, 0, 1.5).float(), [(3, 4)]),
    # prims.copy_to / prims.as_strided_scatter (torch's decompositions emit them)
    "diagonal_scatter": (lambda x, y: torch.diagonal_scatter(x, y[0]), [(3, 3), (3, 3)]),
    "as_strided_scatter": (lambda x, y: torch.as_strided_scatter(x, y[:2, :2] * 1, (2, 2), (1, 2), 1),
                           [(3, 4), (3, 4)]),
    "angle": (lambda x: torch.angle(x) + x, [(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(DECOMPOSED))
def test_decomposed_op_matches_cpu_without_waits(name):
    fn, shapes = DECOMPOSED[name]
    xs = [sample(s, i) for i, s in enumerate(shapes)]
    cl = [x.clone().requires_grad_() for x in xs]
    rl = [x.to(DEV).requires_grad_() for x in xs]
    oc = fn(*cl)
    w0 = waits()
    orr = fn(*rl)
    w = sample(tuple(oc.shape), 9)
    (orr * w.to(DEV)).sum().backward()
    assert waits() == w0, "a decomposition waited on the server"
    (oc * w).sum().backward()
    assert orr.dtype == oc.dtype and orr.shape == oc.shape
    torch.testing.assert_close(orr.detach().cpu(), oc.detach(), equal_nan=True, **TOL)
    for a, b in zip(rl, cl):
        torch.testing.assert_close(a.grad.cpu(), b.grad, **TOL)


def test_decompositions_are_counted():
    before = decomposed().get("aten.leaky_relu.default", 0)
    F.leaky_relu(torch.ones(3, device=DEV), 0.2)
    F.leaky_relu(torch.ones(3, device=DEV), 0.2)
    assert decomposed()["aten.leaky_relu.default"] == before + 2


@pytest.mark.parametrize("opt", ["SGD", "Adam", "AdamW"])
def test_foreach_optimizers_match_cpu(opt):
    def run(dev):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2)).to(dev)
        kw = dict(lr=0.05, foreach=(dev == DEV))
        if opt == "SGD":
            kw.update(momentum=0.9, weight_decay=0.01)
        else:
            kw.update(weight_decay=0.01)
        o = getattr(torch.optim, opt)(m.parameters(), **kw)
        x, y = sample((5, 4), 1).to(dev), sample((5, 2), 2).to(dev)
        for _ in range(3):
            o.zero_grad()
            F.mse_loss(m(x), y).backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5, foreach=(dev == DEV))
            o.step()
        return [p.detach().cpu() for p in m.parameters()]

    before = sum(v for k, v in decomposed().items() if "_foreach_" in k)
    for a, b in zip(run(DEV), run("cpu")):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert sum(v for k, v in decomposed().items() if "_foreach_" in k) > before


def test_foreach_functional_ops():
    xs = [sample((3,), i) for i in range(3)]
    rs = [x.to(DEV) for x in xs]
    for fc, fr in zip(torch._foreach_add(xs, 2.5), torch._foreach_add(rs, 2.5)):
        torch.testing.assert_close(fr.cpu(), fc)
    for fc, fr in zip(torch._foreach_mul(xs, [1.0, 2.0, 3.0]), torch._foreach_mul(rs, [1.0, 2.0, 3.0])):
        torch.testing.assert_close(fr.cpu(), fc)
    for fc, fr in zip(torch._foreach_maximum(xs, 0.0), torch._foreach_maximum(rs, 0.0)):
        torch.testing.assert_close(fr.cpu(), fc)
    for fc, fr in zip(torch._foreach_norm(xs), torch._foreach_norm(rs)):
        torch.testing.assert_close(fr.cpu(), fc)


def test_undecomposable_op_raises_at_the_call():
    x = torch.ones(4, device=DEV)
    with pytest.raises(NotImplementedError, match=r"aten\._to_sparse"):
        x.to_sparse()
    assert x.tolist() == [1.0] * 4


# --- _foreach_* per-tensor calls without the dispatcher (decomp._plan) ---------------------

def _lists(n=4, seed=0, dtype=torch.float32):
    shapes = [(3, 5), (7,), (2, 3, 4), ()][:n]
    return [[sample(s, seed + 10 * k + i, dtype) for i, s in enumerate(shapes)] for k in range(3)]


# (name, fn(a, b, c) on lists, uses scalar lists): in-place forms, the optimizers' and more
INPLACE_FOREACH = [
    ("mul_.Scalar", lambda a, b, c: torch._foreach_mul_(a, 0.5)),
    ("mul_.ScalarList", lambda a, b, c: torch._foreach_mul_(a, [0.5, 2, 1.0, -3.0])),
    ("mul_.Tensor", lambda a, b, c: torch._foreach_mul_(a, c[3])),
    ("add_.List alpha", lambda a, b, c: torch._foreach_add_(a, b, alpha=-0.25)),
    ("add_.List", lambda a, b, c: torch._foreach_add_(a, b)),
    ("add_.Scalar", lambda a, b, c: torch._foreach_add_(a, 1e-8)),
    ("sub_.List", lambda a, b, c: torch._foreach_sub_(a, b, alpha=2)),
    ("div_.ScalarList", lambda a, b, c: torch._foreach_div_(a, [0.1, 0.2, 0.3, 0.4])),
    ("div_.List", lambda a, b, c: torch._foreach_div_(a, b)),
    ("lerp_.Scalar", lambda a, b, c: torch._foreach_lerp_(a, b, 0.1)),
    ("lerp_.List", lambda a, b, c: torch._foreach_lerp_(a, b, c)),
    ("addcmul_.Scalar", lambda a, b, c: torch._foreach_addcmul_(a, b, c, value=0.01)),
    ("addcmul_ default value", lambda a, b, c: torch._foreach_addcmul_(a, b, c)),
    # a scalar list holding the default value (1): that tensor takes the dispatcher
    ("addcdiv_.ScalarList", lambda a, b, c: torch._foreach_addcdiv_(a, b, c, [-0.5, 1, 2.0, 1.0])),
    ("maximum_.List", lambda a, b, c: torch._foreach_maximum_(a, b)),
    ("clamp_min_.Scalar", lambda a, b, c: torch._foreach_clamp_min_(a, 0.25)),
    ("sqrt_", lambda a, b, c: torch._foreach_abs_(a) and None or torch._foreach_sqrt_(a)),
    ("copy_", lambda a, b, c: torch._foreach_copy_(a, b)),
    ("zero_", lambda a, b, c: torch._foreach_zero_(a)),
    ("pow_.Scalar", lambda a, b, c: torch._foreach_pow_(a, 2.0)),
]


@pytest.mark.parametrize("name,fn", INPLACE_FOREACH, ids=[n for n, _ in INPLACE_FOREACH])
def test_foreach_inplace_direct_calls_match_cpu_and_the_dispatcher(name, fn, monkeypatch):
    """The per-tensor calls that skip torch's dispatcher record the same bytes
    as the dispatcher's, write the same values as PyTorch CPU, and do skip it
    (one top-level dispatch for the first tensor, none for the others)."""
    from rgpu import decomp, tensor
    cpu = _lists()
    with torch.no_grad():
        fn(*cpu)
    lists = [[x.to(DEV) for x in lst] for lst in _lists()]
    recs = {}
    inner = tensor._dispatch
    for fast in (False, True):
        monkeypatch.setattr(decomp, "_FAST", fast)
        rgpu._C.flush()
        top = []
        monkeypatch.setattr(tensor, "_dispatch", lambda f, a, k: (top.append(f), inner(f, a, k))[1])
        rgpu._C.capture_begin()         # records kept here, not run: the same tensors again next
        try:
            with torch.no_grad():
                fn(*lists)
        finally:
            recs[fast] = rgpu._C.capture_end()
            monkeypatch.setattr(tensor, "_dispatch", inner)
        calls = [f for f in top if "_foreach_" not in str(f)]
        if fast:
            # abs_ before sqrt_, and the tensor whose scalar is the default: one more each
            assert len(calls) <= 2, calls
        else:
            assert len(calls) >= 4, calls
    assert recs[True] == recs[False] and len(recs[True]) > 0
    with torch.no_grad():
        fn(*lists)                      # the fast path, run
    for r, c in zip(lists[0], cpu[0]):
        torch.testing.assert_close(r.cpu(), c, rtol=1.3e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name,fn", INPLACE_FOREACH, ids=[n for n, _ in INPLACE_FOREACH])
def test_foreach_known_lists_record_what_the_dispatcher_does(name, fn, monkeypatch):
    """A foreach call with the keys of an earlier one (decomp._LISTS: every
    optimizer step) records through the per-tensor ops' table tails with the
    kept specs: the same bytes as the dispatcher's per-tensor calls, no
    per-tensor dispatch, and after three runs the values PyTorch CPU has."""
    from rgpu import decomp, tensor
    cpu = _lists()
    with torch.no_grad():
        for _ in range(3):
            fn(*cpu)
    lists = [[x.to(DEV) for x in lst] for lst in _lists()]
    recs = []
    inner = tensor._dispatch
    for fast in (False, True, True):
        monkeypatch.setattr(decomp, "_FAST", fast)
        rgpu._C.flush()
        top = []
        monkeypatch.setattr(tensor, "_dispatch", lambda f, a, k: (top.append(f), inner(f, a, k))[1])
        rgpu._C.capture_begin()
        try:
            with torch.no_grad():
                fn(*lists)
        finally:
            recs.append(rgpu._C.capture_end())
            monkeypatch.setattr(tensor, "_dispatch", inner)
        calls = [f for f in top if "_foreach_" not in str(f)]
    # the third call: known lists (abs_ before sqrt_: one). Not kept, so the first
    # tensor takes the dispatcher: a scalar list holding the default value (and
    # that tensor too), copy_ (its handler is not a table handler's)
    assert len(calls) <= {"sqrt_": 1, "addcdiv_.ScalarList": 2, "copy_": 1}.get(name, 0), (name, calls)
    assert recs[0] == recs[1] == recs[2] and len(recs[0]) > 0
    with torch.no_grad():
        for _ in range(3):
            fn(*lists)
    for r, c in zip(lists[0], cpu[0]):
        torch.testing.assert_close(r.cpu(), c, rtol=1.3e-6, atol=1e-6, equal_nan=True)


def test_foreach_known_lists_follow_scalars_overlaps_and_shapes():
    """What a kept call's keys hold decides when it is reused: float scalars
    that change every call (and one that becomes the default) reach the
    records; an int scalar is keyed by value; lists whose tensors come to
    share a storage take the dispatcher's overlap check again (ATen raises);
    another shape is another call."""
    from rgpu import decomp
    with torch.no_grad():
        a, b, c = _lists()
        ra, rb, rc = ([x.to(DEV) for x in lst] for lst in (a, b, c))
        for step in range(1, 6):
            vals = [0.5 / step, 1.0 if step == 4 else -0.25 * step, 2.0 + step, 0.125]
            for x, y, z in ((a, b, c), (ra, rb, rc)):
                torch._foreach_addcdiv_(x, y, [t.abs() + 1 for t in z], vals)
                torch._foreach_mul_(x, 1 - 0.01 * step)
        for r, t in zip(ra, a):
            torch.testing.assert_close(r.cpu(), t, rtol=1.3e-6, atol=1e-6)

        ints = [torch.arange(6).reshape(2, 3), torch.arange(4)]
        rints = [t.to(DEV) for t in ints]
        for k in (1, 2, 3, 2):
            torch._foreach_add_(ints, k)
            torch._foreach_add_(rints, k)
        for r, t in zip(rints, ints):
            assert r.cpu().tolist() == t.tolist()

        # learnt with separate storages, then the same keys over one storage
        ys, zs = [torch.arange(10.), torch.arange(10.)], [torch.arange(10.), torch.arange(10.)]
        rys, rzs = [t.to(DEV) for t in ys], [t.to(DEV) for t in zs]
        for _ in range(2):
            torch._foreach_add_([t[1:] for t in rys], [t[:-1] for t in rzs])
            torch._foreach_add_([t[1:] for t in ys], [t[:-1] for t in zs])
        assert [t.cpu().tolist() for t in rys] == [t.tolist() for t in ys]
        kept = len(decomp._LISTS)
        for xs in ([torch.arange(10.), torch.arange(10.)],
                   [torch.arange(10., device=DEV), torch.arange(10., device=DEV)]):
            with pytest.raises(RuntimeError, match="refer to a single memory location"):
                torch._foreach_add_([t[1:] for t in xs], [t[:-1] for t in xs])
        assert len(decomp._LISTS) == kept

        # another shape: the dispatcher again, then kept under its own keys
        ra2 = [x.to(DEV).reshape(-1) for x in a]
        a2 = [x.reshape(-1).clone() for x in a]
        for _ in range(2):
            torch._foreach_mul_(ra2, 3.0)
            torch._foreach_mul_(a2, 3.0)
        for r, t in zip(ra2, a2):
            torch.testing.assert_close(r.cpu(), t, rtol=1.3e-6, atol=1e-6)


def test_foreach_out_of_place_direct_calls_match_cpu():
    xs, ys, _ = _lists()
    rx, ry = [x.to(DEV) for x in xs], [y.to(DEV) for y in ys]
    for name, f in [("sqrt", lambda a, b: torch._foreach_sqrt([t.abs() for t in a])),
                    ("norm", lambda a, b: torch._foreach_norm(a)),
                    ("norm inf", lambda a, b: torch._foreach_norm(a, float("inf"))),
                    # neg-bit views: torch's fallback resolves them before the foreach op
                    ("norm of neg views", lambda a, b: torch._foreach_norm([torch._neg_view(t) for t in a], 1)),
                    ("add", lambda a, b: torch._foreach_add(a, b, alpha=3)),
                    ("mul ScalarList", lambda a, b: torch._foreach_mul(a, [1.5, 2, -1.0, 0.0])),
                    ("neg", lambda a, b: torch._foreach_neg(a))]:
        for _ in range(2):              # the second call: kept specs (decomp._LISTS)
            for r, c in zip(f(rx, ry), f(xs, ys)):
                assert r.shape == c.shape and r.dtype == c.dtype, name
                torch.testing.assert_close(r.cpu(), c, rtol=1.3e-6, atol=1e-6, msg=name)


def test_foreach_mixed_dtypes_and_changing_scalars():
    """Lists mixing dtypes (a per-tensor compute dtype each), and a float scalar
    that changes every call (Adam's bias corrections, a learning-rate schedule:
    keyed by its type, not its value) stay equal to CPU."""
    xs = [sample((4,), 1), sample((3, 2), 2, torch.float64), sample((5,), 3, torch.bfloat16)]
    ys = [sample(x.shape, 7 + i, x.dtype) for i, x in enumerate(xs)]
    rx, ry = [x.to(DEV) for x in xs], [y.to(DEV) for y in ys]
    with torch.no_grad():
        for step in range(1, 5):
            lr = 0.1 / step
            for a, b in ((xs, ys), (rx, ry)):
                torch._foreach_addcdiv_(a, b, [t.abs() + 1 for t in b], [lr * (i + 1) for i in range(3)])
                torch._foreach_mul_(a, 1 - lr * 0.01)
                torch._foreach_add_(a, b, alpha=-lr)
            for r, c in zip(rx, xs):
                assert r.dtype == c.dtype
                # bfloat16: ATen's CPU kernels round their float math differently by an
                # ulp (as without the direct calls), near 0 after cancellation here
                tol = dict(rtol=1.6e-2, atol=1e-2) if c.dtype == torch.bfloat16 else {}
                torch.testing.assert_close(r.cpu(), c, **tol)


def test_float_scalar_keys_keep_type_errors():
    """A float scalar keyed by its type: an integer tensor's in-place add_ of a
    float still raises ATen's cast error, at every call (an error is never
    cached), and the same op with an int scalar works."""
    t = torch.arange(4, device=DEV)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="can't be cast|not possible"):   # torch's meta kernel's words
            t.add_(1.5)
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
            t.mul_(0.5)
    t.add_(2)
    assert t.cpu().tolist() == [2, 3, 4, 5]


# In-place forms whose common dtype does not cast safely to the written tensor:
# ATen raises; torch's meta kernels of these do not check it, and rgpu once
# recorded them, truncating (int.mul_(0.5) gave zeros).
UNSAFE_INPLACE = {
    "mul_ float scalar": lambda t: t.mul_(0.5),
    "mul_ 0-dim float": lambda t: t.mul_(torch.tensor(0.5, device=t.device)),
    "mul_ float tensor": lambda t: t.mul_(torch.ones(4, device=t.device)),
    "bool mul_ int": lambda t: t.bool().mul_(2),
    "addcmul_ float": lambda t: t.addcmul_(t.float(), t.float()),
    "bool addcmul_ int": lambda t: t.bool().addcmul_(t, t),
    "addcdiv_ float": lambda t: t.addcdiv_(t.float(), t.float()),
    "addcmul out": lambda t: torch.addcmul(t.float(), t.float(), t.float(), out=t),
}


@pytest.mark.parametrize("name", sorted(UNSAFE_INPLACE))
def test_unsafe_inplace_casts_raise_like_aten(name):
    fn = UNSAFE_INPLACE[name]
    with pytest.raises(RuntimeError) as cpu_err:
        fn(torch.arange(1, 5))
    t = torch.arange(1, 5, device=DEV)
    for _ in range(2):
        with pytest.raises(RuntimeError) as err:
            fn(t)
        if "result type" in str(cpu_err.value) and "addcmul out" not in name:
            assert str(err.value) == str(cpu_err.value).split("\n")[0]
    assert t.cpu().tolist() == [1, 2, 3, 4]         # nothing written


def test_optimizers_default_to_foreach_like_cuda():
    """torch.optim and clip_grad_norm_ take the multi-tensor paths for rgpu
    parameters by default, as they do for CUDA ones (fused_optim registers
    RemoteTensor with them)."""
    m = torch.nn.Linear(3, 2).to(DEV)
    o = torch.optim.AdamW(m.parameters(), lr=0.1)
    before = dict(decomposed())
    m(torch.ones(4, 3, device=DEV)).sum().backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    o.step()
    after = decomposed()
    for op in ("aten._foreach_norm.Scalar", "aten._foreach_lerp_.Scalar", "aten._foreach_addcdiv_.ScalarList"):
        assert after.get(op, 0) > before.get(op, 0), op
