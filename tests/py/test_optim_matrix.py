"""The torch.optim matrix on rgpu against PyTorch CPU.

Every optimizer class torch.optim exports (found by looking, so an optimizer a
later torch adds is run too, or fails loudly) x PyTorch's own configurations
for it (torch.testing._internal.common_optimizers.optim_db, the list PyTorch's
test_optim runs on CUDA, capturable ones included) plus a few of ours (EXTRA)
x the implementations the class takes: the for-loop and foreach paths,
differentiable=True, fused=True (rgpu/fused_optim.py).

One case: the same parameters of several shapes (a 2-layer MLP's weights and
biases and a 0-dim scale) on CPU and on rgpu, the same batches, STEPS steps
(LBFGS: through its closure); then every parameter and every entry of
optimizer.state (tensors, 'step', LBFGS's lists and floats) must equal CPU's to
RTOL/ATOL (loosened for one state entry, with the measurement: LOOSER).
capturable and fused steps must not wait. differentiable: also d(final
parameters)/d(initial ones) through the steps. Then the state_dict
round trip both ways: rgpu's state_dict loads into an optimizer over CPU
parameters and CPU's into one over rgpu parameters, and one more step from
each must match CPU's own next step.

The CPU reference runs the same implementation as rgpu, except that
capturable=True (the CPU has no capturable kernels: torch refuses it there)
runs as capturable=False, the same math with its bias corrections in Python
floats. A configuration torch refuses on the CPU must be refused on rgpu with
the same error. SparseAdam runs once rgpu holds sparse tensors; until then it
is skipped, saying so.

The LR schedulers of torch.optim.lr_scheduler (again found by looking) drive
SGD and Adam on rgpu and CPU: the lrs of every step and the parameters after
the last must agree.

Runs in this one process (the embedded server starts on first use), but for
one child process (test_sparse_embedding_refused_at_forward)."""
import copy
import inspect
import math
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.optim.lr_scheduler as lrs

import rgpu

from torch.testing._internal.common_optimizers import optim_db   # noqa: E402

DEV = "rgpu"
STEPS = 5
RTOL, ATOL = 1e-5, 1e-6
# rgpu's kernels round like IEEE without contraction (a + alpha*b, addcmul and lerp
# as a multiply then an add; sqrt correctly rounded), ATen's CPU kernels partly with
# FMA and SLEEF (torch's float32 sqrt is 1 ulp off in about 1 in 6 elements): the
# same op differs by an ulp, and the tolerances are for that.


# --- the parameters and the loss -----------------------------------------------------

SHAPES = [(6, 5), (6,), (3, 6), (3,), ()]           # w1, b1, w2, b2, a 0-dim scale


def init_params():
    g = torch.Generator().manual_seed(0)
    ps = [torch.randn(s, generator=g) * 0.5 for s in SHAPES]
    ps[-1] = torch.tensor(1.0) + 0.1 * torch.randn((), generator=g)
    return ps


def batches(n=STEPS + 1):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(5, 3, generator=g)
    out = []
    for _ in range(n):
        x = torch.randn(8, 5, generator=g)
        out.append((x, torch.tanh(x @ w) + 0.1 * torch.randn(8, 3, generator=g)))
    return out


def loss_fn(ps, x, y):
    """The MLP's mean squared error, computed in float64 from the float32 parameters,
    so that the gradients reaching the optimizer are the same float32 bits on both
    sides. In float32 the forward and backward differ by an ulp between rgpu's and
    ATen's summation orders, and optimizers that normalize the gradient (RMSprop's
    g / avg, Adam's m / sqrt(v), Rprop's sign) turn an ulp in a gradient element that
    cancels to near zero in the batch sum into a 1e-5 difference of the state."""
    w1, b1, w2, b2, s = (p.double() for p in ps)
    x, y = x.double(), y.double()
    h = torch.tanh(x @ w1.T + b1)
    out = (h @ w2.T + b2) * s
    return ((out - y) ** 2).mean()


# --- the optimizers and their configurations --------------------------------------------

def optimizer_classes():
    """Every public optimizer class of torch.optim."""
    found = {c for n, c in vars(torch.optim).items()
             if not n.startswith("_") and inspect.isclass(c) and issubclass(c, torch.optim.Optimizer)
             and c is not torch.optim.Optimizer}
    return sorted(found, key=lambda c: c.__name__)


INFOS = {oi.optim_cls: oi for oi in optim_db}

# Configurations optim_db's lists leave out (a keyword a later torch drops makes its
# case fail loudly, at construction).
EXTRA = {
    "Adam": [("decoupled_weight_decay", {"weight_decay": 0.1, "decoupled_weight_decay": True}),
             ("amsgrad, maximize", {"weight_decay": 0.1, "amsgrad": True, "maximize": True})],
    "AdamW": [("amsgrad, maximize", {"amsgrad": True, "maximize": True})],
    "ASGD": [("t0 reached", {"t0": 2, "lambd": 0.01})],        # averaging (ax) starts within STEPS
    "LBFGS": [("history wraps", {"history_size": 2}),
              ("strong_wolfe, history wraps", {"line_search_fn": "strong_wolfe", "history_size": 2})],
    "Muon": [("no nesterov", {"nesterov": False})],
    "RMSprop": [("momentum, not centered", {"momentum": 0.9})],
    "SGD": [("nesterov, dampening 0, maximize", {"momentum": 0.9, "nesterov": True, "maximize": True})],
}

# Muon optimizes matrices only ("Muon only supports 2D parameters"): its others stay out.
PARAM_FILTER = {"Muon": lambda shape: len(shape) == 2}

# Keywords under every configuration of a class (the configuration's own win).
# LBFGS: 2 iterations a step, not 20. On this non-convex loss its curvature pairs
# amplify rounding chaotically: CPU against CPU with one parameter element moved
# by 1 ulp ends 1.6 apart after 5 steps of 20 iterations (1e-5 after 5 of 5),
# so rgpu's 1-ulp kernel differences (RTOL above) can't be told from wrong math there.
CLASS_KWARGS = {"LBFGS": {"max_iter": 2}}


def _slug(s):
    return re.sub(r"[^A-Za-z0-9.=]+", "_", s).strip("_")


def configurations(cls):
    """[(desc, kwargs)]: torch's own (its CUDA list: rgpu is an accelerator that
    takes capturable) plus EXTRA; an optimizer optim_db lacks runs its defaults."""
    oi = INFOS.get(cls)
    if oi is None:
        out = [("default", {})]
    else:
        out = [(i.desc, i.kwargs) for i in oi.optim_inputs_func(device="cuda", dtype=torch.float32)]
    base = CLASS_KWARGS.get(cls.__name__, {})
    return [(d, {**base, **kw}) for d, kw in out + EXTRA.get(cls.__name__, [])]


def impls(cls):
    """The implementations a class takes: {id: the keywords that choose it}."""
    sig = inspect.signature(cls.__init__).parameters
    out = {}
    if "foreach" in sig:
        out["loop"] = {"foreach": False}
        out["foreach"] = {"foreach": True}
    else:
        out["default"] = {}
    if "differentiable" in sig:
        out["differentiable"] = {"differentiable": True, **({"foreach": False} if "foreach" in sig else {})}
    if "fused" in sig:
        out["fused"] = {"fused": True, **({"foreach": False} if "foreach" in sig else {})}
    return out


def cases():
    out = []
    for cls in optimizer_classes():
        seen = {}
        for desc, kw in configurations(cls):
            slug = _slug(desc)
            seen[slug] = seen.get(slug, 0) + 1
            if seen[slug] > 1:
                slug = f"{slug}_{seen[slug]}"
            for impl, ikw in impls(cls).items():
                out.append(pytest.param(cls, kw, impl, ikw, id=f"{cls.__name__}-{slug}-{impl}"))
    return out


CASES = cases()


# --- running one side ---------------------------------------------------------------------

def cpu_kwargs(kw):
    """The CPU reference's keywords: capturable off (torch allows it on accelerators
    only), and then a Tensor lr with foreach=True runs the for-loop (torch: "lr as a
    Tensor is not supported for capturable=False and foreach=True"; same math)."""
    kw = dict(kw)
    if kw.get("capturable"):
        kw["capturable"] = False
        if kw.get("foreach") and isinstance(kw.get("lr"), torch.Tensor):
            kw["foreach"] = False
    return kw


class Side:
    """One device's parameters and optimizer."""

    def __init__(self, cls, kw, device, differentiable, init=None):
        self.device = device
        self.differentiable = differentiable
        keep = PARAM_FILTER.get(cls.__name__, lambda shape: True)
        init = init_params() if init is None else init
        self.all = []
        self.bases = []            # differentiable: the leaves; the parameters are their clones
        for t in init:
            leaf = t.detach().clone().to(device).requires_grad_(True)
            if differentiable:
                self.bases.append(leaf)
                leaf = leaf.clone()
            self.all.append(leaf)
        self.params = [p for p, t in zip(self.all, init) if keep(tuple(t.shape))]
        self.opt = cls(self.params, **copy.deepcopy(kw))
        self.closure_needed = cls.__name__ == "LBFGS"
        self.sparse = INFOS.get(cls) is not None and INFOS[cls].only_supports_sparse_grads

    def _grads(self, x, y):
        loss = loss_fn(self.all, x, y)
        if self.differentiable:
            gs = torch.autograd.grad(loss, self.params)
            for p, g in zip(self.params, gs):
                p.grad = g
        else:
            self.opt.zero_grad()
            loss.backward()
        if self.sparse:
            for p in self.params:
                p.grad = p.grad.to_sparse()
        return loss

    def step(self, x, y):
        x, y = x.to(self.device), y.to(self.device)
        if self.closure_needed:
            return self.opt.step(lambda: self._grads(x, y))
        self._grads(x, y)
        return self.opt.step()


# State entries whose tolerance is loosened, by how much, and why.
# RMSprop's momentum_buffer accumulates g / avg, the gradient divided by its own
# running RMS: d(buffer)/d(g) is 1/avg, about 100 here, so the 1-ulp parameter
# differences of earlier steps (through the next gradients) come back 100-fold.
# Measured for {'weight_decay': 0.1, 'centered': True, 'momentum': 0.1} after 5
# steps, in units of the tight tolerance: CPU against CPU with one element of one
# parameter moved by 1 ulp, 4.1x to 9.2x (by which parameter); rgpu against CPU, 3.5x.
LOOSER = {("RMSprop", "momentum_buffer"): 10.0}


def assert_same(got, want, path, device=None, param_shape=None, loose=1.0, cls_name=None):
    """got (rgpu side, or a CPU optimizer loaded from it) equals want (CPU), recursively;
    cls_name: an optimizer state dict's class, for LOOSER."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{path}: {type(got).__name__}, CPU has a tensor"
        if (device is not None and param_shape is not None and len(param_shape) > 0
                and tuple(got.shape) == param_shape):
            assert got.device.type == device, f"{path}: on {got.device}, its parameter on {device}"
        g = got.detach().cpu()
        w = want.detach().cpu()
        assert g.dtype == w.dtype and g.shape == w.shape, \
            f"{path}: {g.dtype}{list(g.shape)} vs {w.dtype}{list(w.shape)}"
        torch.testing.assert_close(g, w, rtol=RTOL * loose, atol=ATOL * loose,
                                   msg=lambda m: f"{path}: {m}")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{path}: {got!r} vs {want!r}"
        for i, (a, b) in enumerate(zip(got, want)):
            assert_same(a, b, f"{path}[{i}]", device, param_shape, loose)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got, key=str) == sorted(want, key=str), \
            f"{path}: keys {sorted(got, key=str)} vs {sorted(want, key=str)}"
        for k in want:
            assert_same(got[k], want[k], f"{path}.{k}", device, param_shape,
                        loose * LOOSER.get((cls_name, k), 1.0) if cls_name else loose)
    elif isinstance(want, float) and isinstance(got, (float, int)) and not isinstance(got, bool):
        assert math.isclose(got, want, rel_tol=RTOL, abs_tol=ATOL) or (math.isnan(got) and math.isnan(want)), \
            f"{path}: {got!r} vs {want!r}"
    else:
        assert got == want, f"{path}: {got!r} vs {want!r}"


def assert_sides_equal(got, want, device):
    """Parameters and optimizer state of two Sides (got: rgpu or loaded from it)."""
    for i, (a, b) in enumerate(zip(got.params, want.params)):
        assert_same(a, b, f"param[{i}]")
    for i, (a, b) in enumerate(zip(got.params, want.params)):
        sa, sb = got.opt.state.get(a, {}), want.opt.state.get(b, {})
        assert_same(sa, sb, f"state[{i}]", device, tuple(b.shape), cls_name=type(want.opt).__name__)
    assert len(got.opt.state) == len(want.opt.state)


def _norm_message(s):
    s = re.sub(r"torch\.(\w+)Tensor|rgpu(\w+)Type", lambda m: (m.group(1) or m.group(2)) + "Tensor", str(s))
    return re.sub(r"rgpu(:0)?|cpu", "DEV", s)


def _same_error(err, fn):
    """fn must raise what CPU raised: the same type and message (device names aside)."""
    with pytest.raises(type(err)) as info:
        fn()
    assert _norm_message(info.value) == _norm_message(err), f"rgpu: {info.value!r}; CPU: {err!r}"


def assert_meta_grads_equal(r, c):
    """differentiable=True: the steps are part of the graph, so d(parameters after
    STEPS)/d(initial ones) must match CPU's, or fail as CPU's does (several of
    torch's differentiable paths update state in place that an earlier step saved
    for backward: Adam amsgrad, Adamax, RMSprop centered raise "modified by an
    inplace operation" on CPU for more than one step)."""
    g = torch.Generator().manual_seed(3)
    ws = [torch.randn(s, generator=g) for s in SHAPES]

    def meta_grads(side):
        out = sum((p * w.to(side.device)).sum() for p, w in zip(side.all, ws))
        return torch.autograd.grad(out, side.bases, allow_unused=True)
    try:
        want = meta_grads(c)
    except RuntimeError as e:
        _same_error(e, lambda: meta_grads(r))
        return
    got = meta_grads(r)
    for i, (a, b) in enumerate(zip(got, want)):
        assert (a is None) == (b is None), f"d param[{i}] / d init[{i}]: {a} vs {b}"
        if b is not None:
            assert_same(a, b, f"d param[{i}] / d init[{i}]")


def _sparse_probe():
    """None if rgpu holds sparse tensors, else why not."""
    try:
        torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.ones(2), (3,), check_invariants=True).to(DEV)
    except (NotImplementedError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def _own_impl(sd, opt):
    """sd with opt's own implementation flags: the loaded param_groups carry them, and
    where CPU and rgpu differ (capturable: CPU can't; then foreach with a Tensor lr)
    the loading optimizer keeps its own (capturable=True also moves 'step' onto rgpu)."""
    for grp, own in zip(sd["param_groups"], opt.param_groups):
        for flag in ("capturable", "foreach"):
            if flag in own:
                grp[flag] = own[flag]
    return sd


# --- the matrix ------------------------------------------------------------------------------

def test_every_optimizer_class_is_in_the_matrix():
    classes = optimizer_classes()
    assert len(classes) >= 14, [c.__name__ for c in classes]
    covered = {c.values[0] for c in CASES}
    assert set(classes) <= covered, sorted(c.__name__ for c in set(classes) - covered)


@pytest.mark.parametrize("cls, kw, impl, ikw", CASES)
def test_optimizer_matches_cpu(cls, kw, impl, ikw):
    if INFOS.get(cls) is not None and INFOS[cls].only_supports_sparse_grads:
        why = _sparse_probe()
        if why is not None:
            pytest.skip(f"{cls.__name__} takes sparse gradients only and rgpu has no sparse tensors ({why})")
    kw = {**kw, **ikw}
    differentiable = bool(kw.get("differentiable"))
    data = batches()

    try:
        c = Side(cls, cpu_kwargs(kw), "cpu", differentiable)
    except Exception as e:                  # torch refuses the configuration: so must rgpu
        _same_error(e, lambda: Side(cls, kw, DEV, differentiable))
        return
    r = Side(cls, kw, DEV, differentiable)

    for x, y in data[:STEPS]:
        c.step(x, y)
    w0 = rgpu.stats()["waits"]
    for x, y in data[:STEPS]:
        r.step(x, y)
    if kw.get("capturable") or kw.get("fused"):
        # capturable's point, and fused's: no host sync in a step (the loss isn't read either)
        assert rgpu.stats()["waits"] == w0, f"{rgpu.stats()['waits'] - w0} waits in {STEPS} steps"
    assert_sides_equal(r, c, DEV)

    if differentiable:
        if not kw.get("capturable"):
            assert_meta_grads_equal(r, c)
        # capturable: the CPU reference is not capturable, and the capturable graph is
        # another one (RAdam's torch.where over the sqrt of a negative rectification
        # term gives NaN gradients by construction), so only the values are compared
        return      # a state with autograd history has no state_dict round trip (deepcopy refuses it)

    # state_dict round trip, both ways; then one more step from each against CPU's own
    # rgpu's as torch.load(..., map_location="cpu") would give it: load_state_dict moves
    # every state tensor to its parameter's device but 'step', which it leaves where it is
    # (on CUDA alike); an rgpu 'step' (ASGD's, capturable ones) in a CPU foreach optimizer
    # is refused by torch ("Tensors of the same index must be on the same device")
    sd_r = torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.detach().cpu(), r.opt.state_dict())
    sd_c = copy.deepcopy(c.opt.state_dict())
    c2 = Side(cls, cpu_kwargs(kw), "cpu", False, init=[p.detach().cpu() for p in r.all])
    c2.opt.load_state_dict(_own_impl(sd_r, c2.opt))         # rgpu -> CPU
    assert_sides_equal(c2, r, "cpu")
    r2 = Side(cls, kw, DEV, False, init=[p.detach().clone() for p in c.all])
    r2.opt.load_state_dict(_own_impl(sd_c, r2.opt))         # CPU -> rgpu
    assert_sides_equal(r2, c, DEV)
    x, y = data[STEPS]
    c.step(x, y)
    c2.step(x, y)
    r2.step(x, y)
    assert_sides_equal(c2, c, "cpu")
    assert_sides_equal(r2, c, DEV)


# --- fused=True beyond float32 without AMP: GradScaler's grad_scale/found_inf, half types ---

FUSED = {"Adam": {"lr": 0.05, "weight_decay": 0.1}, "AdamW": {"lr": 0.05, "weight_decay": 0.1, "amsgrad": True},
         "SGD": {"lr": 0.05, "momentum": 0.9, "nesterov": True}, "Adagrad": {"lr": 0.05, "lr_decay": 0.1}}
FUSED_CASES = ([pytest.param(n, torch.float32, True, id=f"{n}-float32-GradScaler") for n in FUSED]
               + [pytest.param(n, dt, False, id=f"{n}-{str(dt)[6:]}") for n in FUSED if n != "SGD"
                  for dt in (torch.float16, torch.bfloat16)])
# SGD is left out for half types: torch 2.13's CPU fused SGD kernel never stores the
# parameters of its vectorized loop for float16/bfloat16 (only the tail elements
# move), so the CPU has no reference for it.


def _run_fused(name, dtype, scaler, device):
    g = torch.Generator().manual_seed(5)
    ps = [torch.randn(s, generator=g).to(dtype).to(device).requires_grad_() for s in [(7, 3), (5,)]]
    opt = getattr(torch.optim, name)(ps, fused=True, **FUSED[name])
    sc = torch.amp.GradScaler(device, init_scale=1024.0) if scaler else None
    for k in range(STEPS):
        loss = sum(((p.float() - torch.randn(p.shape, generator=g).to(device)) ** 2).sum() for p in ps)
        if k == 2 and scaler:
            loss = loss * float("inf")              # found_inf: this step must change nothing
        if sc:
            sc.scale(loss).backward()
            sc.step(opt)
            sc.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad()
    return ps, opt, (sc.get_scale() if sc else None)


@pytest.mark.parametrize("name, dtype, scaler", FUSED_CASES)
def test_fused_matches_cpu(name, dtype, scaler):
    pc, oc, scale_c = _run_fused(name, dtype, scaler, "cpu")
    pr, orr, scale_r = _run_fused(name, dtype, scaler, DEV)
    assert scale_r == scale_c
    # half types: ATen's opmath and ours round to the half type at the same points,
    # and the float32 math between differs by an ulp of float32 only: equal bits.
    # But ATen's CPU Adagrad kernel rounds clr and eps to the half type in its
    # vectorized loop (scalar_t(clr)) and not in its tail loop (opmath_t(clr)), as
    # its CUDA kernel and rgpu do: the vectorized elements move by clr's rounding
    # error, up to 2 ulps of the half type (lr * eps absolute near zero).
    if dtype == torch.float32:
        tol = {}
    elif name == "Adagrad":
        eps = torch.finfo(dtype).eps
        tol = {"rtol": 2 * eps, "atol": FUSED[name]["lr"] * eps}
    else:
        tol = {"rtol": 0, "atol": 0}
    for i, (a, b) in enumerate(zip(pr, pc)):
        if tol:
            torch.testing.assert_close(a.detach().cpu(), b.detach(), **tol, msg=lambda m: f"param[{i}]: {m}")
        else:
            assert_same(a, b, f"param[{i}]")
        for k, v in oc.state[b].items():
            if tol:
                torch.testing.assert_close(orr.state[a][k].cpu(), v, **tol, msg=lambda m: f"state[{i}].{k}: {m}")
            else:
                assert_same(orr.state[a][k], v, f"state[{i}].{k}")


def test_sparse_embedding_refused_at_forward():
    """SparseAdam's usual source of sparse gradients, nn.Embedding(sparse=True), is
    refused at the forward call on rgpu. Its backward would build a sparse COO
    gradient on autograd's device thread, where a failure aborts the process
    ("terminate called without an active exception"), hence the child process."""
    code = (
        "import torch, rgpu\n"
        "e = torch.nn.Embedding(5, 3, sparse=True).to('rgpu')\n"
        "i = torch.tensor([1, 2], device='rgpu')\n"
        "with torch.no_grad():\n"
        "    print('no_grad', tuple(e(i).shape))\n"
        "try:\n"
        "    e(i).sum().backward()\n"
        "except NotImplementedError as err:\n"
        "    print('raised', err)\n"
        "print('alive', (torch.ones(2, device='rgpu') * 3).sum().item())\n")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.join(here, "..", "..", "torchhook"))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "no_grad (2, 3)" in p.stdout, p.stdout
    assert "raised rgpu: embedding with sparse=True" in p.stdout, p.stdout
    assert "alive 6.0" in p.stdout, p.stdout


# --- LR schedulers ---------------------------------------------------------------------------

SCHED_STEPS = 8

SCHEDULERS = {
    "LambdaLR": lambda o: lrs.LambdaLR(o, lr_lambda=lambda e: 0.9 ** e),
    "MultiplicativeLR": lambda o: lrs.MultiplicativeLR(o, lr_lambda=lambda e: 0.8),
    "StepLR": lambda o: lrs.StepLR(o, step_size=2, gamma=0.5),
    "MultiStepLR": lambda o: lrs.MultiStepLR(o, milestones=[2, 5], gamma=0.3),
    "ConstantLR": lambda o: lrs.ConstantLR(o, factor=0.5, total_iters=3),
    "LinearLR": lambda o: lrs.LinearLR(o, start_factor=0.25, total_iters=5),
    "ExponentialLR": lambda o: lrs.ExponentialLR(o, gamma=0.8),
    "SequentialLR": lambda o: lrs.SequentialLR(
        o, [lrs.ConstantLR(o, factor=0.5, total_iters=2), lrs.ExponentialLR(o, gamma=0.8)], milestones=[3]),
    "PolynomialLR": lambda o: lrs.PolynomialLR(o, total_iters=6, power=2.0),
    "CosineAnnealingLR": lambda o: lrs.CosineAnnealingLR(o, T_max=4, eta_min=1e-3),
    "ChainedScheduler": lambda o: lrs.ChainedScheduler(
        [lrs.StepLR(o, step_size=3, gamma=0.5), lrs.ExponentialLR(o, gamma=0.9)], optimizer=o),
    "ReduceLROnPlateau": lambda o: lrs.ReduceLROnPlateau(o, mode="max", factor=0.5, patience=1),
    "CyclicLR": lambda o: lrs.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3,
                                       mode="triangular2"),
    "CosineAnnealingWarmRestarts": lambda o: lrs.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2, eta_min=1e-3),
    "OneCycleLR": lambda o: lrs.OneCycleLR(o, max_lr=0.1, total_steps=SCHED_STEPS + 2),
}

SCHED_OPTIMIZERS = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
}


def scheduler_classes():
    found = {n for n, c in vars(lrs).items()
             if not n.startswith("_") and inspect.isclass(c)
             and (issubclass(c, lrs.LRScheduler) or issubclass(c, lrs.ReduceLROnPlateau))
             and c is not lrs.LRScheduler}
    return sorted(found)


def test_every_scheduler_is_covered():
    assert set(scheduler_classes()) == set(SCHEDULERS), "a scheduler torch has and this test lacks, or one gone"


def _run_scheduled(make_opt, make_sched, device):
    ps = [t.clone().to(device).requires_grad_(True) for t in init_params()]
    opt = make_opt(ps)
    sched = make_sched(opt)
    seen = []
    for x, y in batches(SCHED_STEPS):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = loss_fn(ps, x, y)
        loss.backward()
        opt.step()
        if isinstance(sched, lrs.ReduceLROnPlateau):
            sched.step(loss.detach())       # an rgpu tensor on rgpu: the scheduler reads it
        else:
            sched.step()
        seen.append([(g["lr"], g.get("momentum"), g.get("betas")) for g in opt.param_groups])
    return ps, seen, sched.state_dict()


@pytest.mark.parametrize("opt_name", sorted(SCHED_OPTIMIZERS))
@pytest.mark.parametrize("sched_name", sorted(SCHEDULERS))
def test_scheduler_matches_cpu(sched_name, opt_name):
    make_opt, make_sched = SCHED_OPTIMIZERS[opt_name], SCHEDULERS[sched_name]
    pc, lc, sc = _run_scheduled(make_opt, make_sched, "cpu")
    pr, lr, sr = _run_scheduled(make_opt, make_sched, DEV)
    assert len({tuple(s[0][:1]) for s in lc}) > 1, "the lr never changed: the schedule tests nothing"
    assert lr == lc                         # python floats, computed alike: exactly
    for k in sc:
        if k not in ("lr_lambdas", "_schedulers", "best"):
            assert sr[k] == sc[k], k
    if "best" in sc:
        assert math.isclose(float(sr["best"]), float(sc["best"]), rel_tol=RTOL), (sr["best"], sc["best"])
    for i, (a, b) in enumerate(zip(pr, pc)):
        assert_same(a, b, f"param[{i}]")
