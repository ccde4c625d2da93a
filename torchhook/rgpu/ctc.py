"""The CTC loss (F.ctc_loss, nn.CTCLoss): _ctc_loss and _ctc_loss_backward, one
record each (CTC_LOSS, CTC_LOSS_BACKWARD; the recursions are op/ctc.h's).

ATen's ctc_loss (reductions, zero_infinity on the loss) decomposes above us
into _ctc_loss and plain ops. log_alpha, the forward's second output that only
the backward reads, is (N, T, 2*S+1): S the longest target when the lengths
are known here (lists, CPU tensors: as ATen), else a bound read off the
targets' shape (no wait). Lengths known here are checked as ATen checks them;
lengths that live on rgpu are the kernels' to check (NaN for a bad element)."""
import torch

from . import _C
from .args import need_remote
from .registry import register
from .tensor import RemoteTensor, record_multi

aten = torch.ops.aten
_META = torch.device("meta")


def _lengths(x, dev):
    """(rgpu int tensor, list or None when not known here)."""
    if type(x) is RemoteTensor:
        return x, None
    vals = x.tolist() if isinstance(x, torch.Tensor) else [int(v) for v in x]
    return torch.tensor(vals, dtype=torch.int64).to(dev), vals


def _operands(func, log_probs, targets, input_lengths, target_lengths):
    need_remote(log_probs, func)
    if log_probs.dim() != 3:
        raise RuntimeError(f"rgpu: {func}: log_probs must be (T, N, C), got {tuple(log_probs.shape)}")
    if not log_probs.dtype.is_floating_point:
        raise RuntimeError(f"rgpu: {func}: log_probs must be floating, got {log_probs.dtype}")
    dev = log_probs.device
    if type(targets) is not RemoteTensor:
        targets = targets.to(dev)
    il, il_host = _lengths(input_lengths, dev)
    tl, tl_host = _lengths(target_lengths, dev)
    t_len, n = log_probs.shape[0], log_probs.shape[1]
    if il_host is not None:
        if len(il_host) != n:
            raise RuntimeError(f"input_lengths must be of size batch_size, but got {len(il_host)}")
        for v in il_host:
            if v > t_len:
                raise RuntimeError(f"Expected input_lengths to have value at most {t_len}, but got value {v} "
                                   "(while checking arguments for ctc_loss_cpu)")
    if tl_host is not None:
        if len(tl_host) != n:
            raise RuntimeError(f"target_lengths must be of size batch_size, but got {len(tl_host)}")
        s = max(tl_host, default=0)
        if targets.dim() == 2 and s > targets.shape[1]:
            raise RuntimeError(f"Expected tensor to have size at least {s} at dimension 1, but got size "
                               f"{targets.shape[1]} for argument #2 'targets' (while checking arguments for "
                               "ctc_loss_cpu)")
        if targets.dim() == 1 and sum(tl_host) > targets.shape[0]:
            raise RuntimeError("rgpu: ctc_loss: the target lengths add up to more than the targets hold")
    else:
        s = targets.shape[1] if targets.dim() == 2 else targets.numel()
    return targets, il, tl, s


def _ctc_loss(func, args, kwargs):
    names = ("log_probs", "targets", "input_lengths", "target_lengths", "blank", "zero_infinity")
    a = dict(zip(names, args), **kwargs)
    lp = a["log_probs"]
    targets, il, tl, s = _operands(func, lp, a["targets"], a["input_lengths"], a["target_lengths"])
    t_len, n = lp.shape[0], lp.shape[1]
    metas = [torch.empty((n,), dtype=lp.dtype, device=_META),
             torch.empty((n, t_len, 2 * s + 1), dtype=lp.dtype, device=_META)]
    nll, log_alpha = record_multi(_C.OP_CTC_LOSS, metas, (lp._tid, targets._tid, il._tid, tl._tid),
                                  (int(a.get("blank", 0)),))
    return nll, log_alpha


def _ctc_loss_backward(func, args, kwargs):
    names = ("grad", "log_probs", "targets", "input_lengths", "target_lengths", "neg_log_likelihood",
             "log_alpha", "blank", "zero_infinity")
    a = dict(zip(names, args), **kwargs)
    lp, grad, nll, la = a["log_probs"], a["grad"], a["neg_log_likelihood"], a["log_alpha"]
    for t in (grad, nll, la):
        need_remote(t, func)
    targets, il, tl, _ = _operands(func, lp, a["targets"], a["input_lengths"], a["target_lengths"])
    meta = torch.empty(tuple(lp.shape), dtype=lp.dtype, device=_META)
    (gx,) = record_multi(_C.OP_CTC_LOSS_BACKWARD, [meta],
                         (grad._tid, lp._tid, targets._tid, il._tid, tl._tid, nll._tid, la._tid),
                         (int(a.get("blank", 0)), bool(a.get("zero_infinity", False))))
    return gx


def _register():
    register((aten._ctc_loss.default, aten._ctc_loss.Tensor), _ctc_loss)
    register((aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor), _ctc_loss_backward)


_register()
