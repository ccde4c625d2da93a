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
