"""Ops whose output shape depends on the data: nonzero, masked_select, unique,
and the mask-to-indices step of boolean-mask indexing.

Meta kernels can't size these outputs, so each costs exactly one wait:
record the count (COUNT_NONZERO / COUNT_UNIQUE, a WAIT op whose result is one
little-endian i64), wait for it, then record the op itself with the now-known
output shape. The op recounts on the server and fails if the count differs.

Boolean-mask indexing (x[mask], x[mask] = v) is dispatch.py's index /
index_put pre-pass: it turns each mask into integer indices with
aten.nonzero (the handler here: one wait) and records INDEX / INDEX_PUT.
expand_masks() below is that conversion with ATen's mask-shape check and no
wait for a CPU mask."""
import struct

import torch

from . import _C
from .waits import wait
from .args import device_error, need_remote
from .registry import register
from .tensor import RemoteTensor, out_def, record_multi, record_new

aten = torch.ops.aten
_META = torch.device("meta")


def _count(op, x):
    """Record a COUNT_* op on x and wait for its i64 result."""
    data = wait(_C.record(op, (), (x._tid,), ()))
    if len(data) != 8:
        raise RuntimeError(f"rgpu: a count returned {len(data)} bytes, expected 8")
    return struct.unpack("<q", data)[0]


# --- nonzero ---------------------------------------------------------------------

def nonzero(x):
    """(n, x.dim()) int64 coordinates of x's nonzeros, row-major; strides (1, n) as
    ATen's CPU kernel makes them. One wait."""
    n = _count(_C.OP_COUNT_NONZERO, x)
    nd = x.dim()
    k = ((n, nd), (1, n), 0, torch.int64)
    return record_new(_C.OP_NONZERO, k, out_def(k, n * nd * 8), (x._tid,), ())


def _nonzero(func, args, kwargs):
    x = args[0]
    need_remote(x, func)
    if x.dtype.is_complex:
        raise NotImplementedError(f"rgpu: nonzero of {x.dtype}")
    return nonzero(x)


# --- masked_select ---------------------------------------------------------------

def _masked_select(func, args, kwargs):
    x, mask = args[0], args[1]
    need_remote(x, func)
    if mask.dtype is not torch.bool:
        raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
    if type(mask) is not RemoteTensor:
        if mask.dim() != 0:
            raise device_error(mask)
        mask = mask.to(x.device)
    shape = torch.broadcast_shapes(x.shape, mask.shape)
    xs = x if x.shape == shape else x.expand(shape)
    ms = mask if mask.shape == shape else mask.expand(shape)
    n = _count(_C.OP_COUNT_NONZERO, ms)
    k = ((n,), (1,), 0, x.dtype)
    return record_new(_C.OP_MASKED_SELECT, k, out_def(k, n * x.dtype.itemsize), (xs._tid, ms._tid), ())


# --- unique ----------------------------------------------------------------------

def _unique2(func, args, kwargs):
    """(values, inverse, counts); inverse/counts not asked for are empty (0,) int64
    tensors, as ATen returns. Values are sorted (CPU ATen sorts either way)."""
    x = args[0]
    need_remote(x, func)
    names = ("sorted", "return_inverse", "return_counts")
    srt, inv, cnt = (bool(args[i + 1]) if len(args) > i + 1 else bool(kwargs.get(nm, nm == "sorted"))
                     for i, nm in enumerate(names))
    if x.dtype.is_complex:
        raise NotImplementedError(f"rgpu: unique of {x.dtype}")
    n = _count(_C.OP_COUNT_UNIQUE, x)
    metas = [torch.empty((n,), dtype=x.dtype, device=_META),
             torch.empty(x.shape, dtype=torch.int64, device=_META) if inv else None,
             torch.empty((n,), dtype=torch.int64, device=_META) if cnt else None]
    outs = record_multi(_C.OP_UNIQUE, metas, (x._tid,), (srt, inv, cnt))
    for i in (1, 2):
        if outs[i] is None:
            outs[i] = torch.empty((0,), dtype=torch.int64, device=x.device)
    return tuple(outs)


def _unique_unsupported(func, args, kwargs):
    raise NotImplementedError(f"rgpu: {func} (torch.unique with dim=, unique_consecutive) is not "
                              "supported; torch.unique without dim is")


# --- unique_consecutive (without dim), by sorting's ops ----------------------------------

def _unique_consecutive(func, args, kwargs):
    """(values, inverse, counts) of the runs of equal consecutive elements of the
    flattened x: starts where x[i] != x[i-1] (NaN starts a run, as ATen's !=);
    values by masked_select (one wait), inverse = cumsum(starts) - 1, counts from
    the sorted inverse by two searchsorted. Not asked for: empty (0,) int64."""
    x = args[0]
    need_remote(x, func)
    names = ("return_inverse", "return_counts", "dim")
    inv, cnt, dim = (args[i + 1] if len(args) > i + 1 else kwargs.get(nm) for i, nm in enumerate(names))
    if dim is not None:
        return _unique_unsupported(func, args, kwargs)
    flat = aten.reshape.default(x, [-1])
    n = flat.shape[0]
    if n == 0:
        vals = aten.clone.default(flat)
        inverse = torch.empty(x.shape, dtype=torch.int64, device=x.device)
        counts = torch.empty((0,), dtype=torch.int64, device=x.device)
    else:
        first = torch.ones((1,), dtype=torch.bool, device=x.device)
        starts = aten.cat.default([first, aten.ne.Tensor(flat[1:], flat[:-1])])
        vals = aten.masked_select.default(flat, starts)
        pos = aten.sub.Scalar(aten.cumsum.default(starts, 0), 1)
        inverse = aten.reshape.default(pos, list(x.shape))
        if cnt:
            k = aten.arange.start_step(0, vals.shape[0], 1, dtype=torch.int64, device=x.device)
            counts = aten.sub.Tensor(aten.searchsorted.Tensor(pos, k, right=True), aten.searchsorted.Tensor(pos, k))
    empty = lambda: torch.empty((0,), dtype=torch.int64, device=x.device)   # noqa: E731
    return vals, inverse if inv else empty(), counts if cnt else empty()


# --- histogram (its ATen op has no meta kernel) -------------------------------------------

def _histogram_bins_tensor(func, args, kwargs):
    """HISTOGRAM: (hist, bin_edges) of x over the edges bins (weight?, density)."""
    x, bins = args[0], args[1]
    need_remote(x, func)
    if type(bins) is not RemoteTensor:
        raise device_error(bins)
    w, density = kwargs.get("weight"), bool(kwargs.get("density", False))
    if w is not None and type(w) is not RemoteTensor:
        raise device_error(w)
    if not x.dtype.is_floating_point or bins.dtype != x.dtype or bins.dim() != 1:
        raise RuntimeError("torch.histogram: input and bins must be floating tensors of one dtype, bins 1-d")
    ne = bins.shape[0]
    metas = [torch.empty((max(ne - 1, 0),), dtype=x.dtype, device=_META),
             torch.empty((ne,), dtype=x.dtype, device=_META)]
    return tuple(record_multi(_C.OP_HISTOGRAM, metas, (x._tid, bins._tid, 0 if w is None else w._tid),
                              (density,)))


def _histogram_bin_ct(func, args, kwargs):
    """histogram with a bin count: the edges as ATen's linspace over range, or
    over the data's [min, max] (on the device: no wait), an empty range
    widened by 0.5 each side; then HISTOGRAM."""
    x = args[0]
    need_remote(x, func)
    bins = int(args[1]) if len(args) > 1 else int(kwargs.get("bins", 100))
    rng = kwargs.get("range")
    dt, dev = x.dtype, x.device
    if rng is not None:
        lo = aten.full.default([], float(rng[0]), dtype=dt, device=dev)
        hi = aten.full.default([], float(rng[1]), dtype=dt, device=dev)
    elif x.numel() == 0:
        lo = aten.full.default([], 0.0, dtype=dt, device=dev)
        hi = aten.full.default([], 0.0, dtype=dt, device=dev)
    else:
        lo, hi = aten.amin.default(x, []), aten.amax.default(x, [])
    same = aten.eq.Tensor(lo, hi)
    lo = aten.sub.Tensor(lo, aten.mul.Scalar(same, 0.5))
    hi = aten.add.Tensor(hi, aten.mul.Scalar(same, 0.5))
    step = aten.div.Scalar(aten.sub.Tensor(hi, lo), bins)
    idx = aten.arange.start_step(0, bins + 1, 1, dtype=dt, device=dev)
    up = aten.add.Tensor(lo, aten.mul.Tensor(step, idx))
    down = aten.sub.Tensor(hi, aten.mul.Tensor(step, aten.rsub.Scalar(idx, bins)))
    half = aten.lt.Scalar(aten.arange.start_step(0, bins + 1, 1, dtype=torch.int64, device=dev), (bins + 1) // 2)
    edges = aten.where.self(half, up, down)
    return aten.histogram.bins_tensor(x, edges, weight=kwargs.get("weight"),
                                      density=bool(kwargs.get("density", False)))


# --- boolean-mask indexing -------------------------------------------------------------

def _is_mask(t):
    return isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)


def expand_masks(self, indices):
    """indices (of self[indices]) with every bool/uint8 mask replaced by its
    nonzero columns, as ATen's expandTensors does: a k-dim mask at position d
    indexes dims d..d+k-1 and must match their sizes (IndexError otherwise,
    like ATen; without the check a short mask silently selects wrong rows).
    An rgpu mask costs one wait; a CPU mask is converted here, no wait (its
    columns stay CPU tensors, to be uploaded as integer indices)."""
    out = []
    for t in indices:
        if not _is_mask(t):
            out.append(t)
            continue
        d = len(out)
        k = t.dim()
        if k == 0:
            raise NotImplementedError("rgpu: indexing with a 0-dim boolean mask is not supported yet")
        for j in range(k):
            if d + j >= self.dim() or t.shape[j] != self.shape[d + j]:
                raise IndexError(f"The shape of the mask {list(t.shape)} at index {j} does not match the "
                                 f"shape of the indexed tensor {list(self.shape)} at index {d + j}")
        if type(t) is RemoteTensor:
            nz = nonzero(t)                 # one wait
        else:
            nz = torch.nonzero(t)           # a CPU mask: no wait
        out.extend(nz.select(1, j) for j in range(k))
    return out


def _register():
    register((aten.nonzero.default,), _nonzero)
    register((aten.masked_select.default,), _masked_select)
    register((aten._unique2.default,), _unique2)
    register((aten.unique_dim.default, aten.unique_dim_consecutive.default), _unique_unsupported)
    register((aten.unique_consecutive.default,), _unique_consecutive)
    register((aten.histogram.bins_tensor,), _histogram_bins_tensor)
    register((aten.histogram.bin_ct,), _histogram_bin_ct)


_register()
