"""Fused scaled-dot-product attention: F.scaled_dot_product_attention (and
nn.MultiheadAttention, which calls it) on rgpu is one SDPA record forward and
one SDPA_BACKWARD record backward, FlashAttention-2's algorithm on the server
(replayer/op/attention.h): the (L, S) score matrix never exists, memory is
O(B * H * L).

ATen's scaled_dot_product_attention picks its kernel through a C++
DispatchStub (_fused_sdp_choice_stub) that Python cannot register for
PrivateUse1, so rgpu would always get the math path (bmm, _safe_softmax, bmm,
the scores materialised forward and backward). This module registers a kernel
for aten::scaled_dot_product_attention at AutogradPrivateUse1. A call the
fused op takes (fits() below) goes to
aten::_scaled_dot_product_fused_attention_overrideable, the op PyTorch keeps
for out-of-tree backends: its autograd formula (derivatives.yaml) calls
..._overrideable_backward, and both arrive at rgpu's dispatch as records. Any
other call runs ATen's own composite kernel, as before this module existed:
calls inside sdpa_kernel(...) without SDPBackend.OVERRIDEABLE, float64
(ATen's overrideable op saves a float32 logsumexp), head dims over 128, an
attn_mask that requires grad, nested tensors, inputs that are not 4-d.

A boolean attn_mask becomes the additive float mask ATen's
convert_boolean_attn_mask makes (0 where True, -inf where False), broadcast
to (B, Hq, L, S) as a view (stride 0 on broadcast dims: nothing is copied).
GQA (enable_gqa, Hq a multiple of Hk) is the kernel's: no repeat_interleave.
Dropout (dropout_p > 0) is the kernel's too, from Philox at (seed, offset,
element index) like every rgpu random op (one offset per SDPA record, drawn
from rgpu's generator); the forward returns the pair as philox_seed /
philox_offset, 0-d int64 rgpu tensors, which the backward's record reads."""
import math

import torch

from . import _C
from . import random as _random
from .args import need_remote
from .registry import register, register_autograd
from .tensor import kept_specs, meta_like, record_outs

aten = torch.ops.aten
MAX_HEAD = 128               # replayer/op/attention.h RGPU_SDPA_MAX_HEAD
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_counts = {"fused": 0, "composite": 0}
def counts():
    """SDPA calls since the start of the process: fused (one record each way)
    and composite (ATen's math path)."""
    return dict(_counts)


def fits(q, k, v, mask, dropout_p, is_causal, enable_gqa):
    """True when the fused op computes this call exactly as ATen would, and the
    user has not turned it off (torch.nn.attention.sdpa_kernel without
    SDPBackend.OVERRIDEABLE, torch.backends.cuda.enable_..._sdp's sibling
    torch._C._set_sdp_use_overrideable(False))."""
    if not torch._C._get_overrideable_sdp_enabled():
        return False
    if not 0.0 <= dropout_p <= 1.0 or q.is_nested or k.is_nested or v.is_nested:
        return False
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return False
    if q.dtype not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return False
    if k.device != q.device or v.device != q.device:
        return False
    B, Hq, L, E = q.shape
    if k.shape[0] != B or v.shape[0] != B or k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        return False
    if k.shape[3] != E or not 1 <= E <= MAX_HEAD or not 1 <= v.shape[3] <= MAX_HEAD:
        return False
    Hk = k.shape[1]
    if Hk != Hq and not (enable_gqa and Hk > 0 and Hq % Hk == 0):
        return False
    if mask is not None:
        if is_causal or mask.requires_grad or mask.device != q.device or mask.is_nested:
            return False
        if mask.dtype != torch.bool and mask.dtype != q.dtype:
            return False
        try:
            torch.broadcast_shapes(mask.shape, (B, Hq, L, k.shape[2]))
        except RuntimeError:
            return False
        if mask.dim() > 4:
            return False
    return True


def _sdpa_autograd(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                   enable_gqa=False):
    if not fits(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
        _counts["composite"] += 1
        return aten.scaled_dot_product_attention.default.decompose(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    _counts["fused"] += 1
    return aten._scaled_dot_product_fused_attention_overrideable.default(
        query, key, value, _bias(attn_mask, query, key), float(dropout_p), is_causal, False, scale=scale)[0]


def _bias(mask, q, k):
    """The additive bias of mask over (B, Hq, L, S), or None: a boolean mask as
    ATen's convert_boolean_attn_mask makes it (0 where True, -inf where False),
    broadcast as a view (stride 0 on broadcast dims: nothing is copied)."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        mask = torch.where(mask, zero, zero - math.inf)
    shape = tuple(q.shape[:3]) + (k.shape[2],)
    return mask if tuple(mask.shape) == shape else mask.expand(shape)


def _scale(scale, E):
    return 1.0 / math.sqrt(E) if scale is None else float(scale)


_FWD = ("query", "key", "value", "attn_bias", "dropout_p", "is_causal", "return_debug_mask")


def _sdpa(func, args, kwargs):
    a = dict(zip(_FWD, args), **kwargs)
    q, k, v, bias = a["query"], a["key"], a["value"], a.get("attn_bias")
    for t in (q, k, v) + ((bias,) if bias is not None else ()):
        need_remote(t, func)
    p = float(a.get("dropout_p", 0.0))
    B, Hq, L, E = q.shape
    S = k.shape[2]
    bias = _bias(bias, q, k)
    # the output in the query's memory layout, as ATen's meta (alloc_with_matching_layout) makes it:
    # a compiled graph traced on that meta may view it without a copy
    def metas():
        r = aten._scaled_dot_product_fused_attention_overrideable.default(meta_like(q), meta_like(k), meta_like(v),
                                                                           None, 0.0, False, False)
        return [r[0], r[1], r[6], r[7]]
    # the meta kernel costs more than the rest of the call: its specs kept per q/k/v keys
    specs = kept_specs(("sdpa", q._key, k._key, v._key), metas)
    seed, offset = _random._draw() if p > 0 else (0, 0)     # one Philox offset per record that drops
    out, lse, pseed, poffset = record_outs(
        _C.OP_SDPA, specs, (q._tid, k._tid, v._tid, None if bias is None else bias._tid),
        (bool(a.get("is_causal", False)), _scale(a.get("scale"), E), p, seed, offset))
    # philox_seed/offset: 0-d int64 rgpu tensors the record writes (its seed and offset; 0 without
    # dropout); the backward's record reads them on the server
    return out, lse, None, None, L, S, pseed, poffset, None


_BWD = ("grad_out", "query", "key", "value", "attn_bias", "grad_input_mask", "out", "logsumexp", "cum_seq_q",
        "cum_seq_k", "max_q", "max_k", "dropout_p", "is_causal", "philox_seed", "philox_offset")


def _sdpa_backward(func, args, kwargs):
    a = dict(zip(_BWD, args), **kwargs)
    g, q, k, v, bias = a["grad_out"], a["query"], a["key"], a["value"], a.get("attn_bias")
    out, lse = a["out"], a["logsumexp"]
    for t in (g, q, k, v, out, lse) + ((bias,) if bias is not None else ()):
        need_remote(t, func)
    p = float(a.get("dropout_p", 0.0))
    ps, po = a.get("philox_seed"), a.get("philox_offset")
    if p > 0:
        need_remote(ps, func)
        need_remote(po, func)
    mask = list(a["grad_input_mask"])
    if mask[3]:
        raise NotImplementedError(f"rgpu: {func}: the gradient of attn_bias is not supported yet "
                                  "(F.scaled_dot_product_attention takes the composite path for it)")
    bias = _bias(bias, q, k)
    E = q.shape[3]
    want = tuple(bool(w) for w in mask[:3])
    specs = kept_specs(("sdpa_backward", q._key, k._key, v._key, want),
                   lambda: [torch.empty_like(meta_like(t)) if w else None for t, w in zip((q, k, v), want)])
    dq, dk, dv = record_outs(_C.OP_SDPA_BACKWARD, specs,
                              (g._tid, q._tid, k._tid, v._tid, None if bias is None else bias._tid, out._tid,
                               lse._tid, ps._tid if p > 0 else None, po._tid if p > 0 else None),
                              (bool(a.get("is_causal", False)), _scale(a.get("scale"), E), p))
    return dq, dk, dv, None


register((aten._scaled_dot_product_fused_attention_overrideable.default,), _sdpa)
register((aten._scaled_dot_product_fused_attention_overrideable_backward.default,), _sdpa_backward)
register_autograd("scaled_dot_product_attention", _sdpa_autograd)
