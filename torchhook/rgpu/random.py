"""Random ops on rgpu tensors and the one generator state they draw from.

The generator is a (seed, offset) pair per process, both u64, behind a lock
(autograd's backward thread may record random ops too):
  - torch.manual_seed(s) reaches torch.rgpu.manual_seed_all(s), which sets
    seed = s (mod 2^64) and offset = 0;
  - every random record (uniform_, normal_, bernoulli, random_, randperm,
    native_dropout, and SDPA with dropout: attention.py) carries the current
    (seed, offset) as its last two args,
    and then offset += 1. One record, one offset, whatever its size.
The server draws element i of the output's logical row-major order from
Philox4x32-10(key = seed, counter = (i, offset)) (replayer/cpu/philox.h), so
random values are a pure function of (seed, offset, shape, dtype): the same
seed and the same sequence of random calls give bitwise the same tensors, in
another process, on another backend or when the trace is replayed.
get_rng_state() is those two u64s, little-endian, as a 16-byte uint8 CPU tensor.

Semantics follow PyTorch's distributions, not its bit streams: torch.rand on
rgpu and on CUDA give different numbers for the same seed.

Factories arrive decomposed: torch.rand/randn/randint(device="rgpu") reach
here as empty + uniform_/normal_/random_, torch.randperm as empty +
randperm.generator_out; F.dropout in training with 0 < p < 1 arrives as
native_dropout (other p go through bernoulli_ and mul)."""
import struct
import threading

import torch

from . import _C
from ._dtypes import c10_name
from .args import arg, free_temps, need_remote, upload_temp
from .dispatch import _cached_meta_key
from .registry import register
from .tensor import RemoteTensor, kept_specs, meta_of, out_def, rebind, record_new, record_outs

aten = torch.ops.aten

DEFAULT_SEED = 67280421310721       # c10's default_rng_seed_val, as on CUDA
_MASK64 = (1 << 64) - 1

_FLOAT_DIGITS = {torch.float32: 24, torch.float64: 53, torch.float16: 11, torch.bfloat16: 8}
_FLOAT_MAX = {d: torch.finfo(d).max for d in _FLOAT_DIGITS}

_lock = threading.Lock()
_seed = DEFAULT_SEED
_offset = 0


# --- the generator state ---------------------------------------------------------

def _u64(seed):
    seed = int(seed)
    if not -(1 << 63) <= seed <= _MASK64:
        raise RuntimeError(f"Overflow when unpacking long long (seed {seed} is outside "
                           "[-0x8000_0000_0000_0000, 0xffff_ffff_ffff_ffff])")
    return seed & _MASK64


def _i64(v):
    """u64 as the signed int the record's INT arg carries (same 64 bits)."""
    return v - (1 << 64) if v >= (1 << 63) else v


def manual_seed(seed):
    """Seed the rgpu generator and restart its offset at 0."""
    global _seed, _offset
    s = _u64(seed)
    with _lock:
        _seed, _offset = s, 0


def initial_seed():
    return _seed


def get_state():
    """(seed, offset) now, as u64s."""
    with _lock:
        return _seed, _offset


def set_state(seed, offset):
    global _seed, _offset
    with _lock:
        _seed, _offset = seed & _MASK64, offset & _MASK64


def get_rng_state():
    """The generator state as a uint8 CPU tensor: seed, offset (u64 LE each)."""
    s, o = get_state()
    return torch.frombuffer(bytearray(struct.pack("<QQ", s, o)), dtype=torch.uint8)


def set_rng_state(new_state):
    """Restore a state that get_rng_state() returned."""
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError("rgpu: set_rng_state expects a torch.uint8 tensor from get_rng_state()")
    if new_state.numel() != 16:
        raise RuntimeError(f"rgpu: RNG state must be 16 bytes (seed, offset), got {new_state.numel()}")
    s, o = struct.unpack("<QQ", new_state.detach().cpu().contiguous().numpy().tobytes())
    set_state(s, o)


def _draw():
    """(seed, offset) for one random record, as record args; advances the offset."""
    global _offset
    with _lock:
        s, o = _seed, _offset
        _offset = (o + 1) & _MASK64
    return _i64(s), _i64(o)


def take(n):
    """(seed, offset) for a run of n random records (a compiled graph's call),
    as record args; advances the offset by n."""
    global _offset
    with _lock:
        s, o = _seed, _offset
        _offset = (o + n) & _MASK64
    return _i64(s), _i64(o)


# --- handlers ------------------------------------------------------------------------

def _no_generator(func, kwargs):
    if kwargs.get("generator") is not None:
        raise NotImplementedError(f"rgpu: {func} with an explicit generator is not supported; "
                                  "rgpu has one generator per process (torch.manual_seed)")


def _need_float(t, name):
    if not t.dtype.is_floating_point:
        raise NotImplementedError(f'"{name}" not implemented for \'{c10_name(t.dtype)}\'')


def _float_fill(func, args, kwargs, a, b, kernel):
    """self of uniform_/normal_ (an rgpu float tensor) and its two float args,
    a and b (name, default), checked in ATen's order (kernel names the error)."""
    self = args[0]
    need_remote(self, func)
    _no_generator(func, kwargs)
    x = float(arg(args, kwargs, 1, a[0], a[1]))
    y = float(arg(args, kwargs, 2, b[0], b[1]))
    _need_float(self, kernel)
    return self, x, y


def _uniform_(func, args, kwargs):
    self, lo, hi = _float_fill(func, args, kwargs, ("from", 0.0), ("to", 1.0), "check_uniform_bounds")
    if not lo <= hi:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={lo} > to={hi}")
    if not hi - lo <= _FLOAT_MAX[self.dtype]:
        raise RuntimeError(f"uniform_ expects to-from <= the {self.dtype} max, but found to={hi} and "
                           f"from={lo} which result in to-from to exceed the limit")
    _C.record(_C.OP_UNIFORM, (self._tid,), (), (lo, hi) + _draw())
    return self


def _normal_(func, args, kwargs):
    self, mean, std = _float_fill(func, args, kwargs, ("mean", 0.0), ("std", 1.0), "normal_kernel_cpu")
    if not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    _C.record(_C.OP_NORMAL, (self._tid,), (), (mean, std) + _draw())
    return self


def _normal_fn(func, args, kwargs):
    """normal.Tensor_float / float_Tensor / Tensor_Tensor: mean + std * N(0, 1),
    N(0, 1) drawn into a tensor of the broadcast result's metadata."""
    _no_generator(func, kwargs)
    mean = arg(args, kwargs, 0, "mean", 0.0)
    std = arg(args, kwargs, 1, "std", 1.0)
    if not isinstance(std, torch.Tensor) and not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    spec, m = _cached_meta_key(func, args, kwargs)
    z = record_new(_C.OP_NORMAL, spec[0], spec[1], (), (0.0, 1.0) + _draw(), m)
    return z.mul_(std).add_(mean)


def _bernoulli_float_(func, args, kwargs):
    self = args[0]
    need_remote(self, func)
    _no_generator(func, kwargs)
    p = float(arg(args, kwargs, 1, "p", 0.5))
    if not 0.0 <= p <= 1.0:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    _C.record(_C.OP_BERNOULLI, (self._tid,), (None,), (p,) + _draw())
    return self


def _p_operand(p, shape, temps):
    """The tid of a probability tensor (uploading a CPU one) after ATen's checks."""
    if not p.dtype.is_floating_point:
        raise NotImplementedError(f'"bernoulli_tensor_cpu_p_" not implemented for \'{c10_name(p.dtype)}\'')
    if tuple(torch.broadcast_shapes(p.shape, shape)) != tuple(shape):     # raises if they don't broadcast
        raise RuntimeError(f"expand: p of shape {tuple(p.shape)} cannot be broadcast to {tuple(shape)}")
    if type(p) is RemoteTensor:
        return p._tid
    return upload_temp(p, temps)


def _bernoulli_tensor_(func, args, kwargs):
    self, p = args[0], arg(args, kwargs, 1, "p", None)
    need_remote(self, func)
    _no_generator(func, kwargs)
    temps = []
    pid = _p_operand(p, self.shape, temps)
    _C.record(_C.OP_BERNOULLI, (self._tid,), (pid,), (None,) + _draw())
    free_temps(temps)
    return self


def _bernoulli(func, args, kwargs):
    """bernoulli(self): self is p; bernoulli.p(self, p): scalar p; bernoulli.Tensor(self, p).
    The result has self's metadata (ATen: empty_like(self).bernoulli_(p))."""
    self = args[0]
    need_remote(self, func)
    _no_generator(func, kwargs)
    spec, m = _cached_meta_key(aten.empty_like.default, (self,), {})
    temps = []
    if func is aten.bernoulli.p:
        p = float(arg(args, kwargs, 1, "p", 0.5))
        if not 0.0 <= p <= 1.0:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
        ins, a0 = (None,), p
    else:
        p = self if func is aten.bernoulli.default else arg(args, kwargs, 1, "p", None)
        ins, a0 = (_p_operand(p, self.shape, temps),), None
    r = record_new(_C.OP_BERNOULLI, spec[0], spec[1], ins, (a0,) + _draw(), m)
    free_temps(temps)
    return r




def _random_(func, args, kwargs):
    """random_(): [0, 2^digits] for floats, [0, max] for ints; random_(to): [0, to);
    random_(from, to): [from, to), to None: [from, 2^digits or max]."""
    self = args[0]
    need_remote(self, func)
    _no_generator(func, kwargs)
    if func is aten.random_.default:
        lo, hi = 0, None
    elif func is aten.random_.to:
        lo, hi = 0, arg(args, kwargs, 1, "to", None)
    else:
        lo, hi = arg(args, kwargs, 1, "from", 0), arg(args, kwargs, 2, "to", None)
    lo = int(lo)
    hi = None if hi is None else int(hi)
    dt = self.dtype
    if dt.is_complex:
        raise NotImplementedError(f"rgpu: random_ on {dt}")
    if hi is not None:
        if lo >= hi:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={lo} >= to={hi}")
        if not dt.is_floating_point:
            info = torch.iinfo(dt) if dt is not torch.bool else None
            lo_ok, hi_ok = (0, 1) if info is None else (info.min, info.max)
            if lo < lo_ok:
                raise RuntimeError(f"from is out of bounds for {dt}")
            if hi - 1 > hi_ok:
                raise RuntimeError(f"to - 1 is out of bounds for {dt}")
    else:
        top = (1 << _FLOAT_DIGITS[dt]) if dt.is_floating_point else (
            1 if dt is torch.bool else torch.iinfo(dt).max)
        if lo > top:
            raise RuntimeError("random_ expects 'from' to be less than or equal to 'to_inc', but got "
                               f"from={lo} > to_inc={top}")
    _C.record(_C.OP_RANDOM, (self._tid,), (), (lo, hi) + _draw())
    return self


def _like(fill):
    """rand_like / randn_like / randint_like: empty_like, then fill(new, args)."""
    def handler(func, args, kwargs):
        _no_generator(func, kwargs)
        kw = {k: v for k, v in kwargs.items()
              if k in ("dtype", "layout", "device", "pin_memory", "memory_format")}
        dev = kw.get("device")
        if dev is not None and torch.device(dev).type != "rgpu":
            raise NotImplementedError(f"rgpu: {func} to {dev} is not supported")
        r = aten.empty_like.default(args[0], **kw)
        return fill(func, r, args, kwargs)
    return handler


def _fill_uniform(func, r, args, kwargs):
    return _uniform_(aten.uniform_.default, (r,), {})


def _fill_normal(func, r, args, kwargs):
    return _normal_(aten.normal_.default, (r,), {})


def _fill_randint(func, r, args, kwargs):
    if func in (aten.randint_like.low_dtype, aten.randint_like.low_generator_dtype):
        lo, hi = args[1], args[2]
    else:
        lo, hi = 0, args[1]
    if isinstance(hi, torch.Tensor):
        hi = hi.item()
    return _random_(getattr(aten.random_, "from"), (r, lo, hi), {})


def _randperm_out(func, args, kwargs):
    n = int(args[0])
    out = kwargs["out"]
    need_remote(out, func)
    _no_generator(func, kwargs)
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    dt = out.dtype
    if dt is torch.bool or dt.is_complex:
        raise NotImplementedError(f"\"randperm\" not implemented for '{c10_name(dt)}'")
    if dt.is_floating_point:
        if n > (1 << _FLOAT_DIGITS[dt]) + 1:
            raise RuntimeError(f"n cannot be greater than 2^{_FLOAT_DIGITS[dt]}+1 for {dt} type.")
    elif n > 0 and n - 1 > torch.iinfo(dt).max:
        raise RuntimeError(f"n is too large for result tensor type: '{dt}'")
    rargs = (n,) + _draw()
    if out._key[0] == (n,):
        _C.record(_C.OP_RANDPERM, (out._tid,), (), rargs)
        return out
    k = ((n,), (1,), 0, dt)                 # ATen resizes out to (n,)
    m = torch.empty_strided(k[0], k[1], dtype=dt, device="meta")
    r = record_new(_C.OP_RANDPERM, k, out_def(k, n * dt.itemsize), (), rargs, m)
    rebind(out, r._key, r._st, r._tid, m)
    r._tid = 0                              # out owns the tensor id now
    return out


def _native_dropout(func, args, kwargs):
    """(y, mask): y = x * keep / (1 - p), mask = keep (bool), keep_i ~ Bernoulli(1 - p)."""
    x = args[0]
    need_remote(x, func)
    p = float(args[1]) if len(args) > 1 else float(kwargs["p"])
    train = args[2] if len(args) > 2 else kwargs.get("train")
    if not 0.0 <= p <= 1.0:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p}")
    _need_float(x, "native_dropout")
    # y and mask are empty_like(x) (ATen: preserve_format), mask bool; meta empty_like is Python and slow
    specs = kept_specs(("native_dropout", x._key),
                       lambda: [torch.empty_like(meta_of(x)), torch.empty_like(meta_of(x), dtype=torch.bool)])
    return record_outs(_C.OP_NATIVE_DROPOUT, specs, (x._tid,), (p, None if train is None else bool(train)) + _draw())


def _native_dropout_backward(func, args, kwargs):
    grad, mask = args[0], args[1]
    scale = float(arg(args, kwargs, 2, "scale", 1.0))
    need_remote(grad, func)
    need_remote(mask, func)
    spec, m = _cached_meta_key(func, args, kwargs)
    return record_new(_C.OP_NATIVE_DROPOUT_BACKWARD, spec[0], spec[1], (grad._tid, mask._tid), (scale,), m)


def _register():
    register((aten.uniform_.default,), _uniform_)
    register((aten.normal_.default,), _normal_)
    register((aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor), _normal_fn)
    register((aten.bernoulli_.float,), _bernoulli_float_)
    register((aten.bernoulli_.Tensor,), _bernoulli_tensor_)
    register((aten.bernoulli.default, aten.bernoulli.p, aten.bernoulli.Tensor), _bernoulli)
    register((aten.random_.default, aten.random_.to, getattr(aten.random_, "from")), _random_)
    register((aten.rand_like.default, aten.rand_like.generator), _like(_fill_uniform))
    register((aten.randn_like.default, aten.randn_like.generator), _like(_fill_normal))
    register((aten.randint_like.default, aten.randint_like.Tensor, aten.randint_like.low_dtype,
              aten.randint_like.generator, aten.randint_like.Tensor_generator,
              aten.randint_like.low_generator_dtype), _like(_fill_randint))
    register((aten.randperm.out, aten.randperm.generator_out), _randperm_out)
    register((aten.native_dropout.default,), _native_dropout)
    register((aten.native_dropout_backward.default,), _native_dropout_backward)


_register()
