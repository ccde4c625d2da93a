"""Fused RMS norm: F.rms_norm / nn.RMSNorm on rgpu are one RMS_NORM record
forward and one RMS_NORM_BACKWARD record backward (ATen's _fused_rms_norm
and _fused_rms_norm_backward: layer norm's row kernels with the mean taken as
0 and no bias), where ATen's composite makes about six pointwise and
reduction records forward and a dozen backward.

aten::rms_norm is CompositeImplicitAutograd, and so is _fused_rms_norm off
CUDA: both decompose above rgpu's dispatch. This module registers a kernel
for aten::rms_norm at AutogradPrivateUse1 whose eager rgpu calls run through
an autograd.Function recording the two ops; anything else (tracing with fake
tensors under torch.compile, a complex or integer input, a normalized_shape
that does not match) runs ATen's composite as before. A backward with
create_graph=True (double backward) recomputes through the composite, so
higher derivatives stay exact."""
import torch

from . import _C
from .registry import register_autograd
from .tensor import PENDING, RemoteTensor, flush_pending, meta_like, record_multi

aten = torch.ops.aten
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_counts = {"fused": 0, "composite": 0}


def counts():
    """rms_norm calls since the start of the process: fused (one record each
    way) and composite (ATen's decomposition)."""
    return dict(_counts)



def _eps(x, eps):
    """ATen's default: the epsilon of the opmath type (float32 for float16/bfloat16)."""
    if eps is not None:
        return float(eps)
    return torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, shape, eps):
        if PENDING:
            flush_pending()             # the records below name ids directly (as dispatch does first)
        y_m, r_m = aten._fused_rms_norm.default(meta_like(x), shape, None if w is None else meta_like(w), eps)
        y, rstd = record_multi(_C.OP_RMS_NORM, [torch.empty_like(y_m), r_m],
                               (x._tid, None if w is None else w._tid), (list(shape), eps))
        ctx.save_for_backward(x, w, rstd)
        ctx.shape, ctx.eps = list(shape), eps
        return y

    @staticmethod
    def backward(ctx, gy):
        x, w, rstd = ctx.saved_tensors
        want = ctx.needs_input_grad[:2]
        if torch.is_grad_enabled():             # create_graph: a differentiable recomputation
            ins = [t for t, n in zip((x, w), want) if n]
            with torch.enable_grad():
                y = aten.rms_norm.default.decompose(x, ctx.shape, w, ctx.eps)
                gs = iter(torch.autograd.grad(y, ins, gy, create_graph=True))
            return next(gs) if want[0] else None, next(gs) if want[1] else None, None, None
        if type(gy) is not RemoteTensor:
            gy = gy.to(x.device)
        if PENDING:
            flush_pending()
        metas = [meta_like(x) if want[0] else None, meta_like(w) if w is not None and want[1] else None]
        dx, dw = record_multi(_C.OP_RMS_NORM_BACKWARD, metas,
                              (gy._tid, x._tid, rstd._tid, None if w is None else w._tid), (ctx.shape,))
        return dx, dw, None, None


def fits(x, shape, w):
    if type(x) is not RemoteTensor or x.dtype not in _DTYPES:
        return False
    if w is not None and (type(w) is not RemoteTensor or w.dtype not in _DTYPES or tuple(w.shape) != tuple(shape)):
        return False
    k = len(shape)
    return 0 < k <= x.dim() and tuple(x.shape[x.dim() - k:]) == tuple(shape)


def _rms_norm_autograd(input, normalized_shape, weight=None, eps=None):
    shape = [int(s) for s in normalized_shape]
    if not fits(input, shape, weight):
        _counts["composite"] += 1
        return aten.rms_norm.default.decompose(input, normalized_shape, weight, eps)
    _counts["fused"] += 1
    return _RMSNorm.apply(input, weight, shape, _eps(input, eps))


register_autograd("rms_norm", _rms_norm_autograd)
