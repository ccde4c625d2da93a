"""torch.nn's lazy modules on rgpu (rgpu/lazy.py), as on CUDA: every nn.Lazy*
module class (found by name, so a new one is covered), put on rgpu by
.to("rgpu") and by device="rgpu", has uninitialized parameters and buffers on
rgpu until its first forward, which materializes them there (RemoteTensors,
the module's own reset_parameters init); then, with the CPU module's weights
copied in, output, gradients and an SGD step equal the CPU's. Also state_dict
save / load, dtype moves, the default device, and torch's own errors for a
placeholder used in an op."""
import copy
import inspect
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parameter import is_lazy

import rgpu  # noqa: F401  (registers the device)
from rgpu import RemoteTensor

DEV = "rgpu"
RGPU0 = torch.device("rgpu", 0)
LAZY = sorted(n for n in dir(nn) if n.startswith("Lazy") and inspect.isclass(getattr(nn, n))
              and issubclass(getattr(nn, n), nn.Module))
_ARGS = {"out_features": 3, "out_channels": 6, "kernel_size": 3}     # the required constructor arguments


def _params(cls):
    return inspect.signature(cls.__init__).parameters


def _make(cls, device=None, **kw):
    args = [_ARGS[p.name] for p in list(_params(cls).values())[1:]
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return cls(*args, device=device, **kw)


def _shape(name):
    """An input for a new module of class name (raises for a kind not known here)."""
    if "Linear" in name:
        return (4, 5)
    return (3, 4) + (6, 5, 4)[:{"1d": 1, "2d": 2, "3d": 3}[name[-2:]]]


def _variants(name):
    ps = _params(getattr(nn, name))
    vs = [("default", {}), ("float64", {"dtype": torch.float64})]
    if "bias" in ps:
        vs.append(("nobias", {"bias": False}))
    if "affine" in ps:      # the non-default affine / running statistics
        flip = not ps["affine"].default
        vs.append(("affine" if flip else "noaffine", {"affine": flip, "track_running_stats": flip}))
    return vs


CASES = [pytest.param(n, way, kw, id=f"{n}-{way}-{vid}")
         for n in LAZY for way in ("to", "device") for vid, kw in _variants(n)]


def _on_rgpu(cls, way, **kw):
    return _make(cls, device=DEV, **kw) if way == "device" else _make(cls, **kw).to(DEV)


def _state(m):
    return dict(list(m.named_parameters()) + list(m.named_buffers()))


def _close(cpu, dev, tol):
    torch.testing.assert_close(dev.detach().cpu(), cpu.detach(), rtol=tol, atol=tol)


def _check_init(mc, md, tol):
    """md's parameters hold its reset_parameters init, made on rgpu: constants
    (norm weight / bias) equal CPU's; random ones (kaiming_uniform / uniform of
    bound 1/sqrt(fan_in)) lie in range, not constant. Buffers (running
    statistics, updated by the dry run from its input alone) equal CPU's."""
    pc, pd = dict(mc.named_parameters()), dict(md.named_parameters())
    bound = None
    if "weight" in pd and pd["weight"].dim() > 1:
        bound = 1 / nn.init._calculate_fan_in_and_fan_out(pc["weight"])[0] ** 0.5
    for k, tc in pc.items():
        td = pd[k].detach().cpu()
        if tc.min() == tc.max():
            assert torch.equal(td, tc.detach()), k
        else:
            assert bound is not None, k
            assert td.abs().max() <= bound * (1 + 1e-6), k
            assert td.std() > bound / 10, k
    for (k, bc), (_, bd) in zip(mc.named_buffers(), md.named_buffers()):
        _close(bc, bd, tol)


def test_every_lazy_module_is_covered():
    assert len(LAZY) >= 13, LAZY        # torch 2.13: Linear, Conv / ConvTranspose / BatchNorm / InstanceNorm 1-3d
    for n in LAZY:
        _shape(n)
        _make(getattr(nn, n))


@pytest.mark.parametrize("name,way,kw", CASES)
def test_lazy_module_materializes_on_rgpu_and_trains_like_cpu(name, way, kw):
    cls = getattr(nn, name)
    torch.manual_seed(0)
    mc = _make(cls, **kw)
    md = _on_rgpu(cls, way, **kw)
    sc, sd = _state(mc), _state(md)
    assert sc.keys() == sd.keys()
    assert md.has_uninitialized_params() == mc.has_uninitialized_params()
    for k, tc in sc.items():            # before the first forward: placeholders on rgpu
        td = sd[k]
        assert is_lazy(td) == is_lazy(tc), k
        assert td.device == RGPU0 and td.dtype == tc.dtype and td.requires_grad == tc.requires_grad, k
        assert isinstance(td, nn.Parameter) == isinstance(tc, nn.Parameter), k

    dt = kw.get("dtype", torch.float32)
    tol = 1e-10 if dt == torch.float64 else 1e-4
    x = torch.randn(_shape(name), dtype=dt)
    mc(x)                               # dry runs: materialize
    md(x.to(DEV))
    assert type(md) is type(mc)         # cls_to_become (LazyConv2d -> Conv2d ...)
    sc2, sd2 = _state(mc), _state(md)
    assert sc2.keys() == sc.keys() == sd2.keys()
    for k, tc in sc2.items():
        td = sd2[k]
        assert sd2[k] is sd[k], k       # the same Python object, materialized in place
        assert not is_lazy(td) and type(td) is RemoteTensor, k
        assert td.device == RGPU0 and td.shape == tc.shape and td.dtype == tc.dtype, k
        assert td.requires_grad == tc.requires_grad, k
        assert isinstance(td, nn.Parameter) == isinstance(tc, nn.Parameter), k
    _check_init(mc, md, tol)

    md.load_state_dict(mc.state_dict())     # the CPU's weights (rgpu's RNG is not the CPU's)
    for k, tc in _state(mc).items():
        _close(tc, _state(md)[k], 0)

    params_c, params_d = list(mc.parameters()), list(md.parameters())
    optc = torch.optim.SGD(params_c, lr=0.1) if params_c else None
    optd = torch.optim.SGD(params_d, lr=0.1) if params_d else None
    for _ in range(2):
        x = torch.randn(_shape(name), dtype=dt)
        xc, xd = x.clone().requires_grad_(), x.to(DEV).requires_grad_()
        yc, yd = mc(xc), md(xd)
        _close(yc, yd, tol)
        g = torch.randn(yc.shape, dtype=dt)
        (yc * g).sum().backward()
        (yd * g.to(DEV)).sum().backward()
        _close(xc.grad, xd.grad, tol)
        for (k, pc), (_, pd) in zip(mc.named_parameters(), md.named_parameters()):
            _close(pc.grad, pd.grad, tol)
        for (k, bc), (_, bd) in zip(mc.named_buffers(), md.named_buffers()):
            _close(bc, bd, tol)         # running statistics
        if optc is not None:
            optc.step()
            optd.step()
            optc.zero_grad()
            optd.zero_grad()
            for (k, pc), (_, pd) in zip(mc.named_parameters(), md.named_parameters()):
                _close(pc, pd, tol)


def test_lazy_conv2d_both_ways_train_with_an_optimizer_made_before_the_first_forward():
    torch.manual_seed(0)
    ref = nn.Conv2d(3, 8, 3)
    for md in (nn.LazyConv2d(8, 3).to(DEV), nn.LazyConv2d(8, 3, device="rgpu")):
        assert all(is_lazy(p) and p.device == RGPU0 for p in md.parameters())
        opt = torch.optim.SGD(md.parameters(), lr=0.05, momentum=0.9)
        mc = copy.deepcopy(ref)
        optc = torch.optim.SGD(mc.parameters(), lr=0.05, momentum=0.9)
        with torch.no_grad():
            md(torch.zeros(1, 3, 5, 5, device=DEV))
        md.load_state_dict(mc.state_dict())
        for _ in range(3):
            x = torch.randn(2, 3, 7, 7)
            lc = mc(x).square().mean()
            ld = md(x.to(DEV)).square().mean()
            _close(lc, ld, 1e-4)
            for o, loss in ((optc, lc), (opt, ld)):
                o.zero_grad()
                loss.backward()
                o.step()
        for pc, pd in zip(mc.parameters(), md.parameters()):
            _close(pc, pd, 1e-4)
        assert opt.param_groups[0]["params"][0] is md.weight


@pytest.mark.parametrize("name", LAZY)
def test_state_dict_save_and_load(name):
    cls = getattr(nn, name)
    kw = {"affine": True, "track_running_stats": True} if "affine" in _params(cls) else {}
    x = torch.randn(_shape(name))
    md = _make(cls, device=DEV, **kw)
    md(x.to(DEV))
    sd = md.state_dict()
    buf = io.BytesIO()
    torch.save(sd, buf)                 # rgpu tensors; loaded to the CPU
    buf.seek(0)
    saved = torch.load(buf, map_location="cpu")
    with torch.no_grad():
        y = md.eval()(x.to(DEV)).cpu()

    def ref_after_load(x):              # the same on CPU (LazyInstanceNorm: torch's forward then fails)
        m = _make(cls, **kw)
        m.load_state_dict(saved)
        return m.eval()(x)
    for src in (saved, sd):             # into uninitialized rgpu modules, both ways
        for way in ("to", "device"):
            m2 = _on_rgpu(cls, way, **kw)
            m2.load_state_dict(src)     # materializes (LazyModuleMixin's load hook)
            assert not m2.has_uninitialized_params()
            for k, v in _state(m2).items():
                assert type(v) is RemoteTensor and v.device == RGPU0, k
                _close(saved[k], v, 0)
            with torch.no_grad():
                _same_outcome(lambda: ref_after_load(x), lambda: m2.eval()(x.to(DEV)), y)
    mc = _make(cls, **kw)               # an rgpu state dict into a CPU lazy module
    mc.load_state_dict(sd)
    for k, v in _state(mc).items():
        torch.testing.assert_close(v, saved[k], rtol=0, atol=0)
    if list(md.parameters()):
        _close(nn.utils.parameters_to_vector(mc.parameters()), nn.utils.parameters_to_vector(md.parameters()), 0)
    # an uninitialized module's state dict loads into an uninitialized one: still lazy, on rgpu
    u, u2 = _make(cls, device=DEV, **kw), _make(cls, **kw).to(DEV)
    u2.load_state_dict(u.state_dict())
    assert u2.has_uninitialized_params() and all(v.device == RGPU0 for v in _state(u2).values())


def _same_outcome(ref, f, want):
    """f() returns want (to 1e-5), or raises what ref() raises."""
    try:
        ref()
    except Exception as e:
        with pytest.raises(type(e)) as ei:
            f()
        assert str(ei.value) == str(e)
        return
    _close(want, f(), 1e-5)


_MISUSES = {
    "add": lambda p: p + 1,
    "sum": lambda p: torch.sum(p),
    "shape": lambda p: p.shape,
    "numel": lambda p: p.numel(),
    "view": lambda p: p.view(-1),
    "mul_": lambda p: p.mul_(2),
    "tolist": lambda p: p.tolist(),
    "clone": lambda p: p.clone(),
    "linear": lambda p: F.linear(torch.ones(2, 2, device=p.device), p),
    "storage": lambda p: p.untyped_storage(),
}


@pytest.mark.parametrize("what", sorted(_MISUSES))
def test_placeholder_in_an_op_raises_torchs_own_error(what):
    f = _MISUSES[what]
    for cpu, dev in ((nn.LazyLinear(3).weight, nn.LazyLinear(3, device=DEV).weight),
                     (nn.LazyBatchNorm1d().running_mean, nn.LazyBatchNorm1d().to(DEV).running_mean)):
        with pytest.raises(Exception) as ec:
            f(cpu)
        with pytest.raises(Exception) as ed:
            f(dev)
        assert type(ed.value) is type(ec.value) and str(ed.value) == str(ec.value)
    m = nn.LazyLinear(3).to(DEV)        # the error leaves the module usable
    m(torch.ones(2, 4, device=DEV))
    assert m.weight.shape == (3, 4)


def test_module_forward_before_materializing_raises_like_cpu():
    for dev in ("cpu", DEV):
        m = nn.LazyLinear(3, device=dev)
        m._initialize_hook.remove()     # a forward that skips the materializing hook
        with pytest.raises(ValueError, match="Attempted to use an uninitialized parameter"):
            m.forward(torch.ones(2, 4, device=dev))


def test_dtype_moves_keep_placeholders():
    m = nn.LazyBatchNorm2d().to(DEV, torch.float64)
    assert all(is_lazy(t) and t.dtype == torch.float64 and t.device == RGPU0
               for k, t in _state(m).items() if k != "num_batches_tracked")
    m.to(DEV)                           # again, nothing changes
    m.half().double()
    assert m.weight.dtype == torch.float64 and is_lazy(m.weight) and m.weight.device == RGPU0
    m(torch.randn(2, 3, 4, 4, dtype=torch.float64, device=DEV))
    assert m.weight.dtype == torch.float64 and type(m.weight) is RemoteTensor and m.weight.shape == (3,)
    p = nn.LazyLinear(2, device=DEV).weight
    assert p.to(DEV) is p and is_lazy(p.double()) and p.double().device == RGPU0
    c = p.cpu()
    assert type(c) is torch.nn.UninitializedParameter and c.device == torch.device("cpu")
    assert p.data.device == RGPU0 and p.data.numel() == 0 and not is_lazy(p.data)
    assert repr(p) == "<UninitializedParameter>"


def test_default_device_and_deepcopy():
    with torch.device(DEV):
        m = nn.LazyLinear(3)
    assert is_lazy(m.weight) and m.weight.device == RGPU0
    was = torch.get_default_device()
    torch.set_default_device(DEV)
    try:
        m2 = nn.LazyConv1d(2, 3)
    finally:
        torch.set_default_device(None if was == torch.device("cpu") else was)     # (no DeviceContext left)
    assert is_lazy(m2.weight) and m2.weight.device == RGPU0
    m3 = copy.deepcopy(m)
    assert is_lazy(m3.weight) and m3.weight.device == RGPU0
    m3(torch.ones(2, 4, device=DEV))
    assert m3.weight.shape == (3, 4) and is_lazy(m.weight)


def test_cpu_placeholders_unchanged():
    p = nn.UninitializedParameter()
    assert type(p) is nn.UninitializedParameter and p.device == torch.device("cpu")
    with pytest.raises(ValueError, match="uninitialized parameter in <method 'detach'"):
        p.detach()
    m = nn.LazyLinear(3).double()
    assert type(m.weight) is nn.UninitializedParameter and m.weight.dtype == torch.float64
    m(torch.ones(2, 4, dtype=torch.float64))
    assert type(m.weight) is nn.Parameter and m.weight.shape == (3, 4)
