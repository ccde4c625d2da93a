"""Fused cross-entropy: F.cross_entropy / nn.CrossEntropyLoss over class
indices on rgpu is one CROSS_ENTROPY record forward and one
CROSS_ENTROPY_BACKWARD record backward (llm.c's fused classifier): the
log-softmax of the logits is never a tensor. ATen's composite makes
_log_softmax + nll_loss forward and nll_loss_backward (a mostly-zero
(N, C) tensor) + _log_softmax_backward_data backward, and keeps the (N, C)
log-probabilities alive for the backward; the fused ops keep only the
logits (which the model holds anyway) and one logsumexp per row.

aten::cross_entropy_loss is CompositeImplicitAutograd: it decomposes above
rgpu's dispatch. This module registers a kernel for it at
AutogradPrivateUse1 whose eager rgpu calls with (N, C) or (C,) logits and
integer class targets, label_smoothing 0, run through an autograd.Function
recording the two ops (under autocast, float16/bfloat16 logits give a
float32 loss, as CUDA's autocast makes it); anything else (probability targets, label smoothing,
(N, C, d...) logits, tracing with fake tensors under torch.compile) runs
ATen's composite as before. A backward with create_graph=True recomputes
through the composite."""
import torch

from . import _C
from .registry import register_autograd
from .tensor import PENDING, RemoteTensor, flush_pending, meta_like, record_multi

aten = torch.ops.aten
_META = torch.device("meta")
_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_counts = {"fused": 0, "composite": 0}


def counts():
    """cross_entropy calls since the start of the process: fused (one record
    each way) and composite (ATen's log_softmax + nll_loss)."""
    return dict(_counts)


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, t, w, reduction, ignore_index, loss_dtype):
        if PENDING:
            flush_pending()             # the records below name ids directly (as dispatch does first)
        N = x.shape[0] if x.dim() == 2 else 1
        per_row = reduction == 0 and x.dim() == 2
        lse_dt = torch.float64 if x.dtype == torch.float64 else torch.float32
        metas = [torch.empty((N,) if per_row else (), dtype=loss_dtype, device=_META),
                 torch.empty((), dtype=loss_dtype, device=_META),
                 torch.empty((N,) if x.dim() == 2 else (), dtype=lse_dt, device=_META)]
        loss, tw, lse = record_multi(_C.OP_CROSS_ENTROPY, metas, (x._tid, t._tid, None if w is None else w._tid),
                                     (reduction, ignore_index))
        ctx.save_for_backward(x, t, w, tw, lse)
        ctx.reduction, ctx.ignore_index = reduction, ignore_index
        return loss

    @staticmethod
    def backward(ctx, g):
        x, t, w, tw, lse = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None, None
        if torch.is_grad_enabled():             # create_graph: a differentiable recomputation
            with torch.enable_grad():
                loss = aten.cross_entropy_loss.default.decompose(x, t, w, ctx.reduction, ctx.ignore_index, 0.0)
                (gx,) = torch.autograd.grad(loss, (x,), g, create_graph=True)
            return gx, None, None, None, None, None
        if type(g) is not RemoteTensor:
            g = g.to(x.device)
        if PENDING:
            flush_pending()
        (gx,) = record_multi(_C.OP_CROSS_ENTROPY_BACKWARD,
                             [torch.empty(tuple(x.shape), dtype=x.dtype, device=_META)],
                             (g._tid, x._tid, t._tid, None if w is None else w._tid, tw._tid, lse._tid),
                             (ctx.reduction, ctx.ignore_index))
        return gx, None, None, None, None, None


def fits(x, t, w, label_smoothing):
    if label_smoothing != 0.0 or type(x) is not RemoteTensor or type(t) is not RemoteTensor:
        return False
    if x.dtype not in _FLOATS or t.dtype not in (torch.int64, torch.uint8) or x.dim() not in (1, 2):
        return False
    if x.dim() == 2 and tuple(t.shape) != (x.shape[0],):
        return False
    if x.dim() == 1 and t.dim() != 0:
        return False
    if w is not None and (type(w) is not RemoteTensor or w.dtype not in _FLOATS or tuple(w.shape) != (x.shape[-1],)
                          or w.requires_grad):
        return False
    return True


def _cross_entropy_autograd(self, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0):
    if not fits(self, target, weight, float(label_smoothing)):
        _counts["composite"] += 1
        return aten.cross_entropy_loss.default.decompose(self, target, weight, reduction, ignore_index,
                                                        label_smoothing)
    _counts["fused"] += 1
    # under autocast, CUDA's cross_entropy_loss ends in nll_loss (fp32 policy): a float32 loss from
    # float16/bfloat16 logits (computed here in float from the logits, not from rounded log-probabilities)
    lo = self.dtype in (torch.float16, torch.bfloat16) and torch.is_autocast_enabled(self.device.type)
    return _CrossEntropy.apply(self, target, weight, int(reduction), int(ignore_index),
                               torch.float32 if lo else self.dtype)


register_autograd("cross_entropy_loss", _cross_entropy_autograd)
