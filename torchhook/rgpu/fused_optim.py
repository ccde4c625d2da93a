"""torch.optim's fused=True kernels on rgpu: _fused_adam_, _fused_adamw_,
_fused_sgd_ and _fused_adagrad_ (and their tensor_lr overloads).

Each is the per-tensor elementwise math of ATen's CPU kernel
(aten/src/ATen/native/cpu/Fused{Adam,SGD,Adagrad}Kernel.cpp), in its order, with
its double scalars rounded to the parameter's dtype where ATen rounds them, as
rgpu records of the op table. Half and bfloat16 tensors are worked on in
float32 and stored back, like ATen's opmath. The results match fused=True on
the CPU to an ulp per op (ATen's vectorized loops use FMA in lerp and in SGD's
weight decay and momentum, and SLEEF's sqrt; the op table rounds each op).

No waits. Under fused=True the step counts are device tensors; the bias
corrections are computed from them in float64 on the device (ATen: in double
from step.item()), and a Tensor lr enters the same way (ATen: lr.item()).
grad_scale (GradScaler): the gradients are divided by it and written back, as
ATen does. found_inf: where ATen returns without touching anything when it is
1.0, every written tensor here takes torch.where(found_inf == 1, old, new).

The write check (writes.py) knows that ATen leaves the gradients alone without
grad_scale and that _fused_adagrad_ never writes the state_steps its schema
marks (writes._WRITES_IF)."""
import math
import struct

import importlib

import torch

from .registry import register
from .tensor import RemoteTensor

aten = torch.ops.aten

# torch.optim's foreach=None default and clip_grad_norm_'s take the multi-tensor
# (_foreach_*) paths, as on CUDA, only for type(p) in these lists (TORCH-NOTES):
# RemoteTensor joins them, as DTensor joins them in torch.distributed.tensor.
# Without it every rgpu optimizer step ran the per-tensor loop.
for _m in ("torch.optim.optimizer", "torch.utils._foreach_utils"):
    _types = importlib.import_module(_m)._foreach_supported_types
    if RemoteTensor not in _types:
        _types.append(RemoteTensor)

_LOW = (torch.float16, torch.bfloat16)


def _bind(func, args, kwargs):
    """{argument name: value} with the schema's defaults."""
    out = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        else:
            out[a.name] = a.default_value
    return out


def _compute_dtype(t):
    return torch.float32 if t.dtype in _LOW else t.dtype


def _round(x, dtype):
    """A double scalar as ATen's kernel uses it: scalar_t(x) (opmath_t(x) for half)."""
    if isinstance(x, torch.Tensor):
        return x.to(dtype)
    if dtype == torch.float32:
        return struct.unpack("f", struct.pack("f", x))[0]
    return float(x)


def _scalar(x):
    """A step count or Tensor lr as a float64 value: a Python float (CPU tensors and
    numbers, no wait) or a 0-dim float64 rgpu tensor (no wait either)."""
    if type(x) is RemoteTensor:
        return x.to(torch.float64)
    if isinstance(x, torch.Tensor):
        return float(x.item())
    return float(x)


def _pow(base, e):
    return math.pow(base, e) if isinstance(e, float) else torch.pow(base, e)


def _sqrt(x):
    return math.sqrt(x) if isinstance(x, float) else torch.sqrt(x)


class _Writes:
    """The tensors one parameter's update writes. Each is worked on in place in the
    compute dtype (a float32 copy for half/bfloat16, stored back at the end); with
    found_inf, every one keeps its old value where found_inf == 1."""

    def __init__(self, skip, ct):
        self.skip = skip
        self.ct = ct
        self.back = []

    def take(self, t):
        if t.dtype != self.ct:
            w = t.to(self.ct)
            self.back.append((t, w, None))
            return w
        if self.skip is not None:
            self.back.append((t, t, t.clone()))
        return t

    def done(self):
        for dst, w, old in self.back:
            if old is not None:
                dst.copy_(torch.where(self.skip, old, dst))
            elif self.skip is not None:
                dst.copy_(torch.where(self.skip, dst, w))
            else:
                dst.copy_(w)


def _skip_mask(found_inf):
    return None if found_inf is None else (found_inf == 1.0)


def _grad(g, w, scale, ct):
    """The gradient the update uses: divided by grad_scale and written back when one
    is given (ATen stores the unscaled gradient; the update goes on with the
    unrounded value for half/bfloat16)."""
    if scale is None:
        return g if g.dtype == ct else g.to(ct)
    gw = w.take(g)
    gw.div_(scale.to(ct))
    return gw


def _interleave(gens):
    """Run per-tensor updates op by op across the tensors: each generator yields
    after every record it makes, and one round advances every tensor by one
    record. The records then come as a _foreach_* op's do (the same op over
    the list, then the next op), which the cuda backend runs as one launch per
    op (common.cuh: multi-tensor launches), not one per tensor and op; each
    tensor's records, and so its values, are the same as one after the other."""
    live = list(gens)
    while live:
        nxt = []
        for g in live:
            try:
                next(g)
                nxt.append(g)
            except StopIteration:
                pass
        live = nxt


def _check(n, lists, what):
    for name, lst in lists:
        if len(lst) != n:
            raise RuntimeError(f"rgpu: {what}: {name} has {len(lst)} tensors, params {n}")


# --- Adam / AdamW --------------------------------------------------------------------

def _adam(func, args, kwargs, adamw):
    a = _bind(func, args, kwargs)
    params, grads, exp_avgs, exp_avg_sqs = a["self"], a["grads"], a["exp_avgs"], a["exp_avg_sqs"]
    maxs, steps = a["max_exp_avg_sqs"], a["state_steps"]
    lr, beta1, beta2, wd, eps = a["lr"], a["beta1"], a["beta2"], a["weight_decay"], a["eps"]
    amsgrad, maximize, scale = a["amsgrad"], a["maximize"], a["grad_scale"]
    n = len(params)
    _check(n, [("grads", grads), ("exp_avgs", exp_avgs), ("exp_avg_sqs", exp_avg_sqs),
               ("state_steps", steps)] + ([("max_exp_avg_sqs", maxs)] if amsgrad else []), str(func))
    if not amsgrad and len(maxs):
        raise RuntimeError(f"rgpu: {func}: max_exp_avg_sqs must be empty without amsgrad")
    skip = _skip_mask(a["found_inf"])
    lrd = _scalar(lr)
    scal = _bias_corrections(steps, lrd, beta1, beta2)

    def one(i):
        p, g, m, v, s = params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], steps[i]
        ct = _compute_dtype(p)
        w = _Writes(skip, ct)
        if scal is not None:
            neg_step_size, c2 = scal(i, ct)
        else:
            step = _scalar(s)
            bc1 = 1 - _pow(beta1, step)
            bc2_sqrt = _sqrt(1 - _pow(beta2, step))
            neg_step_size = _round(-(lrd / bc1), ct)
            c2 = _round(bc2_sqrt, ct)
        yield
        pp, mm, vv = w.take(p), w.take(m), w.take(v)
        yield
        gg = _grad(g, w, scale, ct)
        yield
        if maximize:
            gg = gg.neg()
            yield
        if wd != 0:
            if adamw:
                t = lrd * wd
                yield
                t = 1 - t
                yield
                t = _round(t, ct)
                yield
                pp.mul_(t)
            else:
                t = pp * _round(wd, ct)
                yield
                gg = gg + t
            yield
        mm.lerp_(gg, _round(1 - beta1, ct))                      # exp_avg.lerp_(grad, 1 - beta1)
        yield
        vv.mul_(_round(beta2, ct))
        yield
        t = gg * _round(1 - beta2, ct)
        yield
        t = t * gg
        yield
        vv.add_(t)
        yield
        if amsgrad:
            mx = w.take(maxs[i])
            yield
            torch.maximum(mx, vv, out=mx)
            yield
            vv = mx
        r = vv.sqrt()
        yield
        r = r / c2
        yield
        denom = r.add_(_round(eps, ct))
        yield
        t = mm * neg_step_size
        yield
        t = t / denom
        yield
        pp.add_(t)
        yield
        w.done()
    _interleave(one(i) for i in range(n))


def _bias_corrections(steps, lrd, beta1, beta2):
    """With device step counts (fused=True's): every tensor's -lr/bc1 and
    sqrt(bc2) at once, over one float64 vector of the steps (a few launches,
    not a few per tensor), as scal(i, ct) -> (neg_step_size, bc2_sqrt), 0-dim
    views in the compute dtype ct. The per-element math is the per-tensor
    path's: 1 - beta^step, its sqrt, -(lr / bc1), rounded to ct. None with
    steps on the host (plain floats: no records to save)."""
    if not steps or not all(type(s) is RemoteTensor for s in steps):
        return None
    st = torch.stack([s.reshape(()) for s in steps]).to(torch.float64)
    bc1 = 1 - torch.pow(beta1, st)
    bc2_sqrt = torch.sqrt(1 - torch.pow(beta2, st))
    nss = -(lrd / bc1)
    per_ct = {}

    def scal(i, ct):
        if ct not in per_ct:
            per_ct[ct] = (_round(nss, ct), _round(bc2_sqrt, ct))
        a, b = per_ct[ct]
        return a[i], b[i]
    return scal


def _fused_adam(func, args, kwargs):
    return _adam(func, args, kwargs, adamw=False)


def _fused_adamw(func, args, kwargs):
    return _adam(func, args, kwargs, adamw=True)


# --- SGD ------------------------------------------------------------------------------

def _fused_sgd(func, args, kwargs):
    a = _bind(func, args, kwargs)
    params, grads, bufs = a["self"], a["grads"], a["momentum_buffer_list"]
    wd, momentum, lr, dampening = a["weight_decay"], a["momentum"], a["lr"], a["dampening"]
    nesterov, maximize, first, scale = a["nesterov"], a["maximize"], a["is_first_step"], a["grad_scale"]
    n = len(params)
    if momentum == 0:
        if len(bufs):
            raise RuntimeError(f"rgpu: {func}: momentum_buffer_list must be empty without momentum")
        _check(n, [("grads", grads)], str(func))
    else:
        _check(n, [("grads", grads), ("momentum_buffer_list", bufs)], str(func))
    skip = _skip_mask(a["found_inf"])
    lrd = _scalar(lr)

    def one(i):                        # records interleaved across tensors (_interleave)
        p, g = params[i], grads[i]
        ct = _compute_dtype(p)
        w = _Writes(skip, ct)
        pp = w.take(p)
        yield
        gg = _grad(g, w, scale, ct)
        yield
        if maximize:
            gg = gg.neg()
            yield
        if wd != 0:
            t = pp * _round(wd, ct)
            yield
            gg = gg + t
            yield
        if momentum != 0:
            bb = w.take(bufs[i])
            yield
            if first:
                bb.copy_(gg)
            else:
                bb.mul_(_round(momentum, ct))
                yield
                t = gg * _round(1 - dampening, ct)
                yield
                bb.add_(t)
            yield
            if nesterov:
                t = bb * _round(momentum, ct)
                yield
                gg = gg + t
            else:
                gg = bb
            yield
        t = -lrd
        yield
        t = _round(t, ct)
        yield
        t = gg * t
        yield
        pp.add_(t)
        yield
        w.done()
    _interleave(one(i) for i in range(n))


# --- Adagrad --------------------------------------------------------------------------

def _fused_adagrad(func, args, kwargs):
    a = _bind(func, args, kwargs)
    params, grads, sums, steps = a["self"], a["grads"], a["state_sums"], a["state_steps"]
    lr, lr_decay, wd, eps = a["lr"], a["lr_decay"], a["weight_decay"], a["eps"]
    maximize, scale = a["maximize"], a["grad_scale"]
    n = len(params)
    _check(n, [("grads", grads), ("state_sums", sums), ("state_steps", steps)], str(func))
    skip = _skip_mask(a["found_inf"])
    lrd = _scalar(lr)

    def one(i):                        # records interleaved across tensors (_interleave)
        p, g, ss = params[i], grads[i], sums[i]
        ct = _compute_dtype(p)
        w = _Writes(skip, ct)
        step = _scalar(steps[i])
        yield
        t = step - 1.0
        yield
        t = t * lr_decay
        yield
        t = 1.0 + t
        yield
        t = lrd / t
        yield
        clr = _round(t, ct)
        yield
        pp, sw = w.take(p), w.take(ss)
        yield
        gg = _grad(g, w, scale, ct)
        yield
        if maximize:
            gg = gg.neg()
            yield
        if wd != 0:
            t = pp * _round(wd, ct)
            yield
            gg = gg + t
            yield
        t = gg * gg
        yield
        sw.add_(t)
        yield
        std = sw.sqrt()
        yield
        std = std.add_(_round(eps, ct))
        yield
        t = gg * clr
        yield
        t = t / std
        yield
        pp.sub_(t)
        yield
        w.done()
    _interleave(one(i) for i in range(n))


register((aten._fused_adam_.default, aten._fused_adam_.tensor_lr), _fused_adam)
register((aten._fused_adamw_.default, aten._fused_adamw_.tensor_lr), _fused_adamw)
register((aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr), _fused_sgd)
register((aten._fused_adagrad_.default, aten._fused_adagrad_.tensor_lr), _fused_adagrad)
