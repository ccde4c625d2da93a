"""The write check: an op whose schema writes an argument (in-place `add_`,
`out=` forms, `_foreach_*_` lists) must leave a record that writes it.

A handler that returns without writing what its schema says it writes is a
wrong number with no error (`_foreach_maximum_` once did exactly that), so
dispatch wraps such handlers: the written tensors are watched in the recorder
(_C.watch_begin/_end, per thread, nested) and a watched tensor that no record
wrote, nor was rebound to a new tensor (out= resized), raises at the call.
An in-place or out= op must also return the very object it wrote.

Checked always: every handler that is not a plain op-table record
(decompositions, specials, registered families, _foreach_*), where a missing
write can hide. Plain table records write by construction; RGPU_CHECK_WRITES=1
(the test suite sets it) checks those too. Not checked: ops that change only
metadata (inplace_view ops, resize_, set_), written tensors with no elements,
and writes ATen itself makes only under a condition (_WRITES_IF: batch norm's
running stats outside training, the fused optimizers' gradients unscaled)."""
import os

import torch

from . import _C
from .tensor import RemoteTensor

CHECK_ALL = os.environ.get("RGPU_CHECK_WRITES", "") not in ("", "0")

_watch_begin = _C.watch_begin
_watch_end = _C.watch_end

# ops whose written argument changes metadata, or storage identity, not values
_METADATA_ONLY = frozenset({"aten::resize_", "aten::resize_as_", "aten::set_", "aten::_resize_output_",
                            "aten::resize_as_sparse_", "aten::sparse_resize_", "aten::sparse_resize_and_clear_",
                            "aten::_coalesced_", "aten::_local_scalar_dense", "aten::record_stream",
                            "aten::retain_grad", "aten::set_data", "prims::as_strided", "prims::resize",
                            # write only when a flag tensor (observer_on, fake_quant_on) says so
                            "aten::fused_moving_avg_obs_fake_quant", "aten::_fused_moving_avg_obs_fq_helper"})

# Writes ATen's own kernels make only under a condition: batch norm updates the
# running stats only in training; the fused optimizers write the gradients back
# only when unscaling them (grad_scale given); _fused_adagrad_ never writes the
# state_steps its schema marks; conj_physical_ of a real tensor is the tensor. {op: {written argument or "*": when(argument value)}}
_TRAINING = ("training", bool)
_SCALED = ("grad_scale", lambda v: v is not None)
_NEVER = (None, None)
_WRITES_IF = {"aten::_native_batch_norm_legit": {"*": _TRAINING}, "aten::native_batch_norm": {"*": _TRAINING},
              "aten::cudnn_batch_norm": {"*": _TRAINING}, "aten::miopen_batch_norm": {"*": _TRAINING},
              "aten::rrelu_with_noise": {"*": _TRAINING}, "aten::rrelu_with_noise_": {"noise": _TRAINING},
              "aten::_fused_adam_": {"grads": _SCALED}, "aten::_fused_adamw_": {"grads": _SCALED},
              "aten::_fused_sgd_": {"grads": _SCALED},
              "aten::_fused_adagrad_": {"grads": _SCALED, "state_steps": _NEVER},
              "aten::conj_physical_": {"self": ("self", lambda t: t.dtype.is_complex)}}   # real: nothing to do


def written_args(func):
    """[(position or None when keyword-only, name, is a list)] of the arguments
    func's schema writes; [] when none, or when the write is metadata only."""
    if not isinstance(func, torch._ops.OpOverload):
        return []
    s = func._schema
    if s.name in _METADATA_ONLY or torch.Tag.inplace_view in func.tags:
        return []
    w = []
    for i, a in enumerate(s.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            w.append((None if a.kwarg_only else i, a.name, str(a.type).startswith("List[")))
    return w


def functional_of(func):
    """The overload of func's op without its written arguments, taking the same
    others (sort.values -> sort.default, linalg_matrix_rank.out -> .default), or None."""
    want = [(a.name, str(a.type)) for a in func._schema.arguments if not (a.alias_info and a.alias_info.is_write)]
    packet = func.overloadpacket
    for o in packet.overloads():
        f = getattr(packet, o)
        if f is not func and [(a.name, str(a.type)) for a in f._schema.arguments] == want:
            return f
    return None


def _returns_written(func, w):
    """The position in w of the argument a single-result op returns (add_ -> self,
    add.out -> out), or None."""
    s = func._schema
    if len(s.returns) != 1 or s.returns[0].alias_info is None or w[0][2]:
        return None
    sets = s.returns[0].alias_info.before_set
    for j, (_, name, _) in enumerate(w):
        a = next(x for x in s.arguments if x.name == name)
        if a.alias_info.before_set == sets:
            return j
    return None


def _targets(w, args, kwargs):
    """The written RemoteTensors with elements, and each w entry's value."""
    ts, vals = [], []
    for pos, name, is_list in w:
        v = args[pos] if pos is not None and pos < len(args) else kwargs.get(name)
        vals.append(v)
        if is_list is None:             # not written this call (_WRITES_IF)
            continue
        for t in (v if is_list and v is not None else (v,)):
            if type(t) is RemoteTensor and t.numel():
                ts.append(t)
    return ts, vals


_SEEN = set()


def seen():
    """The writing overloads called so far with a tensor to write (names like
    "aten.add_.Tensor"); all of them under RGPU_CHECK_WRITES=1, else those
    not plain table records."""
    return set(_SEEN)


def _arg_getter(func, name):
    """A function (args, kwargs) -> the value of func's argument name."""
    for i, a in enumerate(func._schema.arguments):
        if a.name == name:
            default = a.default_value
            if a.kwarg_only:
                return lambda args, kwargs: kwargs.get(name, default)
            return lambda args, kwargs: args[i] if i < len(args) else kwargs.get(name, default)
    raise KeyError(name)


def _conditions(func, w):
    """[(index in w, get(args, kwargs), when(value))] of func's conditional writes."""
    c = _WRITES_IF.get(func._schema.name)
    if c is None:
        return []
    out = []
    for j, (_, name, _) in enumerate(w):
        spec = c.get(name) or c.get("*")
        if spec is None:
            continue                    # written always
        flag, when = spec
        out.append((j, None if flag is None else _arg_getter(func, flag), when))
    return out


def checked(h, func, w):
    """h, raising when it leaves an argument func writes unwritten."""
    label = str(func)
    ret = _returns_written(func, w)
    conds = _conditions(func, w)
    # an in-place op (add_, sinc_ ...) keeps self's shape: ATen raises where a
    # decomposition's out= wrapper would resize it
    inplace = func._schema.name.endswith("_") and w[0][1] == "self" and not w[0][2]

    def handler(func, args, kwargs):
        ww = w
        if conds:
            skip = {j for j, get, when in conds if get is None or not when(get(args, kwargs))}
            ww = [x if j not in skip else (x[0], x[1], None) for j, x in enumerate(w)]
        ts, vals = _targets(ww, args, kwargs)
        if not ts:
            return h(func, args, kwargs)
        _SEEN.add(label)
        tids = tuple(t._tid for t in ts)
        shape = tuple(vals[0].shape) if inplace else None
        _watch_begin(tids, tuple(t._st.sid for t in ts))
        try:
            r = h(func, args, kwargs)
        finally:
            missed = _watch_end()
        if inplace and tuple(vals[0].shape) != shape:
            raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast shape "
                               f"{list(vals[0].shape)} (rgpu: {label} resized its input; it now holds "
                               "the broadcast result)")
        if missed:
            bad = [i for i in missed if ts[i]._tid == tids[i]]
            if bad:
                t = ts[bad[0]]
                raise RuntimeError(f"rgpu: internal error: {label} did not write {len(bad)} of the "
                                   f"{len(ts)} tensors its schema writes (first: {tuple(t.shape)} "
                                   f"{t.dtype}); its result would be wrong")
        if ret is not None and vals[ret] is not None and r is not vals[ret]:
            raise RuntimeError(f"rgpu: internal error: {label} returned a new tensor instead of the "
                               f"argument it writes ('{w[ret][1]}')")
        return r
    handler.unchecked = h      # for callers whose own check covers the call (decomp's _foreach_*)
    return handler
