"""__torch_dispatch__ for RemoteTensor: every ATen op on an rgpu tensor becomes records.

Each OpOverload gets one handler, built on first sight and kept in _HANDLERS
(registry.py's HANDLERS):
  table ops     the overloads of the op table (opmap.TABLE: add, mul, sum,
                fill_, copy_ ...): output metadata from the meta kernel, then
                one record whose output is a new tensor or, for in-place and
                out= ops, the written argument itself (returned as the very
                same object); an entry's pre-pass (opmap.py) runs first and
                calls that handler when one record does the op
  views         any op whose schema returns an alias of its input (view,
                slice, transpose, expand, split ...): one ALIAS record, no data
  in-place views  transpose_, unsqueeze_ ...: ALIAS, then the wrapper is rebound
  specials      transfers (_to_copy, _copy_from, item()), clone and the
                *_like / new_* factories
  registered    handlers of op families with state of their own (random.py,
                datadep.py, amp.py: registry.register())
  anything else raises NotImplementedError naming the op, at the call.
Writes are checked for overlapping inputs like TensorIterator does, since meta
kernels can't (meta tensors have no addresses).
Meta inference is the slow part (10-200 us; many meta kernels are Python), so
its result is cached under (op, input metadata, non-tensor args)."""
import functools

import torch
from torch._prims_common.wrappers import _resize_output_check

from . import _C, cplx, decomp, opinfo, opmap, resize, transfer, writes
from .args import arg, device_error, free_temps
# (register stays importable from here: rgpu.dispatch.register)
from .registry import HANDLERS as _HANDLERS, REGISTERED as _REGISTERED, register  # noqa: F401
from .tensor import (DEVICE, PENDING as _PENDING, RemoteTensor, Storage, flush_pending, key_of, meta_of, out_def,
                     out_specs, rebind, record_later, record_new, record_outs, record_view, set_dispatcher, wrap)

aten = torch.ops.aten
_record = _C.record
_new_id = _C.new_id
_OpOverload = torch._ops.OpOverload

_CACHE = {}
_CACHE_MAX = 100_000
_NOKEY = object()
_WRITE = None           # cache entry (_WRITE, None, extra): the op writes its in-place/out= argument
_SAME = object()        # cache entry: the op returns its first argument itself (lift_fresh)
_EMPTY_KW = {}
_META = torch.device("meta")


_COPY = aten.copy_.default
_DEFERRED = []          # errors raised during backward, re-raised at the next op outside it
_graph_task_id = torch._C._current_graph_task_id


def dispatch(func, args, kwargs):
    if _PENDING:
        if (func is _COPY and not kwargs and type(args[0]) is RemoteTensor and type(args[1]) is not RemoteTensor
                and transfer.upload_into(args[0], args[1])):
            return args[0]
        if _uses_pending(args) or (kwargs and _uses_pending(kwargs.values())):
            flush_pending()
    if _DEFERRED and _graph_task_id() == -1:
        e = _DEFERRED[0]
        _DEFERRED.clear()
        raise e
    # keyed by id(): OpOverloads live forever, and their __hash__ is Python code
    h = _HANDLERS.get(id(func))
    if h is None:
        h = _HANDLERS[id(func)] = _build(func)
    try:
        return h(func, args, kwargs or _EMPTY_KW)
    except Exception as e:
        if _graph_task_id() == -1:
            raise
        return _defer(func, args, kwargs or _EMPTY_KW, e)


def _uses_pending(args):
    """Whether an argument (or a tensor in a list argument) is a tensor not recorded yet."""
    for a in args:
        ta = type(a)
        if ta is RemoteTensor:
            if a._tid in _PENDING:
                return True
        elif (ta is list or ta is tuple) and _uses_pending(a):
            return True
    return False


def _defer(func, args, kwargs, err):
    """An op failed inside backward, on autograd's device thread. Raising there
    aborts the process (torch 2.13, PrivateUse1 with a Python device guard:
    "terminate called without an active exception"), so the op gets
    placeholder outputs of the right metadata (never read: every later rgpu
    op raises first) and the error is raised by the first rgpu op after
    backward returns, e.g. the optimizer's step, before it changes anything."""
    try:
        outs = infer(func, args, kwargs)
    except Exception:
        outs = _grad_like_input(func, args, kwargs)
        if outs is None:
            raise err from None
    _DEFERRED.append(err)
    flat, spec = torch.utils._pytree.tree_flatten(outs)
    made = []
    for m in flat:
        if isinstance(m, torch.Tensor):
            k = key_of(m)
            m = record_new(_C.OP_EMPTY, k, out_def(k, m.untyped_storage().nbytes()), (), (), m)
        made.append(m)
    return torch.utils._pytree.tree_unflatten(made, spec)


def _grad_like_input(func, args, kwargs):
    """Placeholder metadata for a backward op without a meta kernel: its one
    Tensor result is the gradient of its `self`/`input` argument, so has its
    shape and dtype. None where that does not hold."""
    rets = func._schema.returns
    if len(rets) != 1 or str(rets[0].type) != "Tensor" or "backward" not in func._schema.name:
        return None
    for i, a in enumerate(func._schema.arguments):
        if a.name in ("self", "input"):
            x = args[i] if i < len(args) else kwargs.get(a.name)
            if type(x) is RemoteTensor:
                return torch.empty_like(meta_of(x), memory_format=torch.contiguous_format)
    return None


# --- cache keys -------------------------------------------------------------------

_PLAIN = frozenset({type(None), str, torch.dtype, torch.device, torch.memory_format, torch.layout})


# Ops whose output metadata and cached extra (the compute dtype) depend on a
# Python float argument's type only, and whose meta kernels check nothing of its
# value: their keys hold (float,) for it, so a value that changes every step (a
# learning rate, Adam's bias corrections) does not rerun meta inference each
# time. An int or bool argument stays keyed by value.
_FLOAT_FREE = frozenset(id(f) for name in ("add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp")
                        for packet in (getattr(aten, name), getattr(aten, name + "_"))
                        for f in (getattr(packet, o) for o in packet.overloads())
                        if "mode" not in f._overloadname)
_FLOAT = (float,)


def _part(a, sids, ff=False):
    ta = type(a)
    if ta is RemoteTensor:
        sids.append(a._st.sid)
        return a._key
    if ta is float and ff:
        return _FLOAT
    if ta is int or ta is float or ta is bool:
        return (ta, a)                  # 1, 1.0 and True promote differently
    if ta in _PLAIN:
        return a
    if ta is list or ta is tuple:
        ps = []
        for x in a:
            p = _part(x, sids, ff)
            if p is _NOKEY:
                return _NOKEY
            ps.append(p)
        return (ta, tuple(ps))
    if isinstance(a, torch.Tensor) and a.device.type == "cpu" and a.dim() == 0:
        return ("cpu0", a.dtype)
    return _NOKEY


def make_key(func, args, kwargs):
    """(func, metadata of each tensor, value of each other argument), plus which
    tensor arguments share a storage; None when an argument can't be keyed."""
    if not kwargs:
        # the per-op hot path: one tensor, or a tensor and a tensor/number
        # (the same keys as the general loop below builds)
        n = len(args)
        if n == 1:
            a = args[0]
            if type(a) is RemoteTensor:
                return (id(func), a._key)
        elif n == 2:
            a, b = args
            if type(a) is RemoteTensor:
                tb = type(b)
                if tb is RemoteTensor:
                    if a._st is not b._st:
                        return (id(func), a._key, b._key)
                elif tb is float:
                    return (id(func), a._key, _FLOAT if id(func) in _FLOAT_FREE else (tb, b))
                elif tb is int or tb is bool:
                    return (id(func), a._key, (tb, b))
    sids = []
    parts = [id(func)]
    ff = id(func) in _FLOAT_FREE
    for a in args:
        p = _part(a, sids, ff)
        if p is _NOKEY:
            return None
        parts.append(p)
    for k, v in kwargs.items():
        p = _part(v, sids, ff)
        if p is _NOKEY:
            return None
        parts.append(k)
        parts.append(p)
    if len(sids) > 1 and len(set(sids)) < len(sids):
        parts.append(tuple(sids.index(s) for s in sids))
    return tuple(parts)


def _remember(key, spec):
    if key is not None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = spec


# --- meta inference -------------------------------------------------------------------

def _to_meta(a):
    ta = type(a)
    if ta is RemoteTensor:
        return meta_of(a)
    if ta is list or ta is tuple:
        return ta(_to_meta(x) for x in a)
    if ta is torch.device:
        return _META
    if isinstance(a, torch.Tensor):
        if a.device.type == "meta":
            return a
        if a.dim() == 0 and a.device.type == "cpu":     # CPU scalars may mix with device tensors
            return torch.empty((), dtype=a.dtype, device=_META)
        raise device_error(a)
    return a


def infer(func, args, kwargs):
    """Run func on meta tensors standing in for args."""
    return func(*[_to_meta(a) for a in args], **{k: _to_meta(v) for k, v in kwargs.items()})


# --- table ops: one record, output new or written in place ---------------------------

def _writes(func):
    """(position or None, name) of the argument a single-output op writes, or None."""
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            return (None if a.kwarg_only else i), a.name
    return None


_INTERNAL_OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers "
                     "to a single memory location. Please clone() the tensor before performing the "
                     "operation.")
_PARTIAL_OVERLAP = ("unsupported operation: some elements of the input tensor and the written-to "
                    "tensor refer to a single memory location. Please clone() the tensor before "
                    "performing the operation.")


def _dense(sizes, strides):
    """ATen's is_non_overlapping_and_dense: the elements tile a contiguous range."""
    if 0 in sizes:
        return True
    if len(sizes) == 1:
        return sizes[0] < 2 or strides[0] == 1
    need = 1
    for sz, st in sorted(zip(sizes, strides), key=lambda p: (p[0] < 2, p[1])):
        if sz < 2:
            return True
        if st != need:
            return False
        need *= sz
    return True


def _check_overlap(t, args, kwargs):
    """ATen's assert_no_internal_overlap and assert_no_partial_overlap for a written
    tensor t (meta tensors have no addresses, so meta kernels can't check this)."""
    sizes, strides, offset, dtype = t._key
    dense = _dense(sizes, strides)
    if not dense and any(st == 0 and sz > 1 for sz, st in zip(sizes, strides)):
        raise RuntimeError(_INTERNAL_OVERLAP)
    n = t.numel()
    if not dense or n == 0:
        return
    begin = offset * dtype.itemsize                 # bytes
    end = begin + n * dtype.itemsize
    for x in list(args) + list(kwargs.values()):
        if type(x) is not RemoteTensor or x is t or x._st is not t._st or x.numel() == 0:
            continue
        if not _dense(x._key[0], x._key[1]):
            continue                    # ATen: "too hard", not checked
        xst, xo, xd = x._key[1], x._key[2], x._key[3]
        xb = xo * xd.itemsize
        xe = xb + x.numel() * xd.itemsize
        if (xb, xe) == (begin, end):
            if xst != strides:
                raise RuntimeError(_PARTIAL_OVERLAP)
        elif xb < end and begin < xe:
            raise RuntimeError(_PARTIAL_OVERLAP)


def _plain(m):
    """A kernel's output meta without a lazy conj/neg bit (ATen's meta of
    lu_solve(left=False) returns a conj view): the record's output holds the
    values themselves."""
    if isinstance(m, torch.Tensor) and m.dtype.is_complex and (m.is_conj() or m.is_neg()):
        m = m.resolve_conj().resolve_neg()
    return m


def _refuse_complex(func, args, kwargs, m):
    """On a cache miss of a table op whose record takes no complex views
    (ops.def's COMPLEX): NotImplementedError when the call is complex."""
    ms = m if isinstance(m, (list, tuple)) else (m,)
    if cplx.has_complex(args, kwargs) or any(isinstance(x, torch.Tensor) and x.dtype.is_complex for x in ms):
        raise NotImplementedError(f"rgpu: {func} is not supported for complex tensors yet")


def _table_handler(func, mapper, check_overlap=True, prep=None, complex_ok=True):
    """mapper(args, kwargs, extra) -> (op, ins, args, temps): the record for func;
    extra = prep(args, kwargs), computed once per cache key and kept in the spec
    (key, out_def, extra) -- key None when the op writes its argument in place.
    Writes are checked for overlaps like TensorIterator does (fill_ doesn't check)."""
    w = _writes(func)
    inplace = w is not None and func._schema.name.endswith("_")
    if w is None:
        def target(args, kwargs):
            return None
    elif w[0] is None:
        name = w[1]

        def target(args, kwargs):
            return kwargs[name]
    else:
        pos = w[0]

        def target(args, kwargs):
            return args[pos]

    def handler(func, args, kwargs):
        key = make_key(func, args, kwargs)
        spec = _CACHE.get(key) if key is not None else None
        m = None
        if spec is None:
            t = target(args, kwargs)
            if t is not None:
                if type(t) is not RemoteTensor:
                    raise device_error(t)
                if check_overlap:
                    _check_overlap(t, args, kwargs)
            m = _plain(infer(func, args, kwargs))
            if not complex_ok:
                _refuse_complex(func, args, kwargs, m)
            extra = prep(args, kwargs) if prep is not None else None
            if t is None:
                k = key_of(m)
                spec = (k, out_def(k, m.untyped_storage().nbytes()), extra)
                _remember(key, spec)
            elif key_of(m) == t._key:
                spec = (_WRITE, None, extra)
                _remember(key, spec)
            else:
                if inplace:
                    # ATen's in-place ops never resize self (their meta kernels may,
                    # and did resize t's meta tensor: made again from t's key)
                    t._m = None
                    raise RuntimeError(f"output with shape {list(t.shape)} doesn't match the broadcast "
                                       f"shape {list(m.shape)}")
                # out= resized by the op: becomes a new tensor on new storage
                k = key_of(m)
                k = (k[0], k[1], 0, k[3])
                m = torch.empty_strided(k[0], k[1], dtype=k[3], device=_META)
                op, ins, rargs, temps = mapper(args, kwargs, extra)
                r = record_new(op, k, out_def(k, m.untyped_storage().nbytes()), ins, rargs, m)
                if temps:
                    free_temps(temps)
                rebind(t, r._key, r._st, r._tid, m)
                r._tid = 0                  # t owns the tensor id now
                return t
        return tail(args, kwargs, spec, m)

    def tail(args, kwargs, spec, m=None):
        # the record of a call whose spec is known: _foreach_* lists call it
        # for each tensor with the specs of an earlier call of the same keys
        op, ins, rargs, temps = mapper(args, kwargs, spec[2])
        k = spec[0]
        if k is _WRITE:
            t = target(args, kwargs)
            _record(op, (t._tid,), ins, rargs)
        else:
            t = record_new(op, k, spec[1], ins, rargs, m)
        if temps:
            free_temps(temps)
        return t

    def spec_of(args, kwargs):
        key = make_key(func, args, kwargs)
        return _CACHE.get(key) if key is not None else None

    handler.table = handler
    handler.tail = tail
    handler.spec_of = spec_of
    handler.float_free = id(func) in _FLOAT_FREE
    return handler


# --- multi-output ops ----------------------------------------------------------------------

def _multi_handler(func, mapper, prep=None, complex_ok=True):
    """Like _table_handler for ops with several new outputs; spec (outs, extra)
    with outs[i] = (key, out_def) or None (ATen returned None: output_mask false).
    An out= overload (sort.values ...) records new outputs, then copies each into
    its out tensor (resized as ATen resizes it) and returns the outs."""
    # out= tensors are the keyword-only written arguments (batch norm's running
    # stats, written in place by the record itself, are positional)
    outs = [name for pos, name, is_list in writes.written_args(func) if pos is None]
    if not outs:
        return _multi_new(func, mapper, prep, complex_ok)
    functional = writes.functional_of(func)
    if functional is None:
        return _unsupported

    def out_handler(func, args, kwargs):
        dst = [kwargs[n] for n in outs]
        for d in dst:
            if type(d) is not RemoteTensor:
                raise device_error(d)
        res = dispatch(functional, args, {k: v for k, v in kwargs.items() if k not in outs})
        for d, r in zip(dst, res):
            if _resize_output_check(d, r.shape):     # warns as ATen does when d has elements
                aten.resize_.default(d, r.shape)
            aten.copy_.default(d, r)
        return tuple(dst)
    return out_handler


def _multi_new(func, mapper, prep=None, complex_ok=True):
    def handler(func, args, kwargs):
        key = make_key(func, args, kwargs)
        spec = _CACHE.get(key) if key is not None else None
        metas = None
        if spec is None:
            metas = [_plain(x) for x in infer(func, args, kwargs)]
            if not complex_ok:
                _refuse_complex(func, args, kwargs, metas)
            spec = (tuple(out_specs(metas)), prep(args, kwargs) if prep is not None else None)
            _remember(key, spec)
        op, ins, rargs, temps = mapper(args, kwargs, spec[1])
        r = record_outs(op, spec[0], ins, rargs, metas)
        if temps:
            free_temps(temps)
        return r
    return handler


# --- views -------------------------------------------------------------------------------

def _view_handler(func, args, kwargs):
    key = make_key(func, args, kwargs)
    spec = _CACHE.get(key) if key is not None else None
    base = args[0]
    outs = None
    if spec is None:
        outs = infer(func, args, kwargs)
        bm = meta_of(base)
        if outs is bm:
            spec = _SAME
        else:
            sid = bm.untyped_storage()._cdata
            single = isinstance(outs, torch.Tensor)
            specs = []
            for m in ((outs,) if single else outs):
                if m.untyped_storage()._cdata != sid:
                    raise NotImplementedError(f"rgpu: {func} returned a tensor that is not a view "
                                              "of its input; not supported yet")
                k = key_of(m)
                specs.append((k, out_def(k, -1)))
            spec = specs[0] if single else specs
        _remember(key, spec)
    if spec is _SAME:
        return base
    if type(spec) is tuple:
        return record_view(base, spec[0], spec[1], outs)
    if outs is None:
        return [record_view(base, k, d) for k, d in spec]
    return [record_view(base, k, d, m) for (k, d), m in zip(spec, outs)]


def _inplace_view_handler(func, args, kwargs):
    self = args[0]
    m = meta_of(self)
    infer(func, args, kwargs)           # changes m's sizes/strides in place
    k = key_of(m)
    if k != self._key:
        tid = _new_id()
        _record(_C.OP_ALIAS, ((tid, self._st.sid) + out_def(k, -1),), (self._tid,), ())
        rebind(self, k, self._st, tid, m)
    return self


# --- specials ----------------------------------------------------------------------

def _cached_meta_key(func, args, kwargs):
    """The output metadata key (and the meta tensor on a miss) of a single-output op."""
    key = make_key(func, args, kwargs)
    spec = _CACHE.get(key) if key is not None else None
    if spec is not None:
        return spec, None
    m = infer(func, args, kwargs)
    k = key_of(m)
    spec = (k, out_def(k, m.untyped_storage().nbytes()))
    _remember(key, spec)
    return spec, m


def _copy_from(func, args, kwargs):
    src, dst = args[0], args[1]
    _handler(_COPY)(_COPY, (dst, src), _EMPTY_KW)
    return dst


def _to_copy(func, args, kwargs):
    x = args[0]
    if x.is_conj() or x.is_neg():
        x = cplx.resolve(x)
        args = (x,) + tuple(args[1:])
    dt = kwargs.get("dtype")
    if dt is not None and x.dtype.is_complex and not dt.is_complex:
        cplx.warn_discard()
    spec, m = _cached_meta_key(func, args, kwargs)
    dev = kwargs.get("device")
    k = spec[0]
    if dev is None or dev.type == "rgpu":
        return _copy_new(spec, m, x)
    if dev.type != "cpu":
        raise NotImplementedError(f"rgpu: copying an rgpu tensor to {dev} is not supported")
    c = transfer.download(x)
    if k[3] == x.dtype and k[1] == c.stride():
        return c
    out = torch.empty_strided(k[0], k[1], dtype=k[3])
    out.copy_(c)
    return out


def _clone(func, args, kwargs):
    x = args[0]
    if x.is_conj() or x.is_neg():
        r = cplx.resolve(x)
        return r if not kwargs else _clone(func, (r,), kwargs)
    spec, m = _cached_meta_key(func, args, kwargs)
    return _copy_new(spec, m, x)


def _clone_raw(x):
    """A copy of x's values as stored (its conj/neg bits not applied; cplx.resolve)."""
    spec, m = _cached_meta_key(aten.clone.default, (x,), _EMPTY_KW)
    return _copy_new(spec, m, x)


def _copy_bits(h):
    """copy_ where the source or destination has a lazy conj/neg bit: the
    destination's stored values become the source's values with the
    destination's bits undone (ATen's copy_)."""
    def handler(func, args, kwargs):
        dst, src = args[0], args[1]
        sb = isinstance(src, torch.Tensor) and (src.is_conj() or src.is_neg())
        db = type(dst) is RemoteTensor and (dst.is_conj() or dst.is_neg())
        if not (sb or db):
            return h(func, args, kwargs)
        if sb:
            src = cplx.resolve(src) if type(src) is RemoteTensor else src.resolve_conj().resolve_neg()
        if db:
            raw = cplx._raw(dst)
            if type(src) is not RemoteTensor:
                src = src.to(raw.device)
            if dst.is_conj():
                src = cplx._conj_physical(src.to(dst.dtype))
            if dst.is_neg():
                src = torch.neg(src)
            h(func, (raw, src) + tuple(args[2:]), kwargs)
            return dst
        return h(func, (dst, src) + tuple(args[2:]), kwargs)
    return handler


def _view_as_real(func, args, kwargs):
    if args[0].is_conj():
        raise RuntimeError("view_as_real doesn't work on unresolved conjugated tensors.  To resolve the conjugate "
                           "tensor so you can view it as real, use self.resolve_conj()")
    return _view_handler(func, args, kwargs)


def _copy_new(spec, m, x):
    """A new tensor of spec = (key, out_def) holding x's values (EMPTY, then COPY)."""
    r = record_new(_C.OP_EMPTY, spec[0], spec[1], (), (), m)
    _record(_C.OP_COPY, (r._tid,), (x._tid,), ())
    return r


def _fresh(value_of):
    """*_like and new_* factories; value_of(args, kwargs) is the fill value or None (empty)."""
    def handler(func, args, kwargs):
        dev = kwargs.get("device")
        if dev is not None and dev.type != "rgpu":
            if dev.type != "cpu":
                raise NotImplementedError(f"rgpu: {func} to {dev} is not supported")
            x = args[0]
            stand_in = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)
            return func(stand_in, *args[1:], **kwargs)
        spec, m = _cached_meta_key(func, args, kwargs)
        v = value_of(args, kwargs)
        if v is None:
            return record_new(_C.OP_EMPTY, spec[0], spec[1], (), (), m)
        if func in _LATER:
            # autograd's seed (ones_like) and materialized grads (zeros_like):
            # a compiled backward binds shared constants instead (compile.py)
            return record_later(_C.OP_FULL, spec[0], spec[1], (v,), m)
        return record_new(_C.OP_FULL, spec[0], spec[1], (), (v,), m)
    return handler


def _arange_out(func, args, kwargs):
    """arange into an existing out: ARANGE makes a new tensor, so arange into a
    temporary and copy, or, when ATen resizes out, rebind out to the new tensor."""
    out = kwargs["out"]
    m = meta_of(out)
    infer(func, args, kwargs)           # resizes m like ATen resizes out
    if func is aten.arange.out:
        start, step = 0, 1
    else:
        start, step = args[0], arg(args, kwargs, 2, "step", 1)
    n, dtype = m.shape[0], m.dtype
    k = ((n,), (1,), 0, dtype)
    resized = key_of(m) != out._key
    if resized:
        m = torch.empty_strided(k[0], k[1], dtype=dtype, device=_META)
    r = record_new(_C.OP_ARANGE, k, out_def(k, n * dtype.itemsize), (), (start, step),
                   m if resized else None)
    if resized:
        rebind(out, k, r._st, r._tid, m)
        r._tid = 0                      # out owns the tensor id now
    else:
        _record(_C.OP_COPY, (out._tid,), (r._tid,), ())
    return out


def _item(func, args, kwargs):
    return transfer.item(args[0])


_FAKE_KEY = torch._C._TorchDispatchModeKey.FAKE
_LATER = frozenset((aten.zeros_like.default, aten.ones_like.default))


def _lift_fresh(func, args, kwargs):
    """lift_fresh(t) is t. Under a FakeTensorMode (dynamo and aot_autograd
    tracing `torch.tensor(data, device="rgpu")`) torch.tensor builds a real
    rgpu tensor, as it does a real CUDA tensor, and lift_fresh is where the
    fake mode turns it into a fake; the fake mode leaves tensor subclasses to
    their own dispatch, so the fake is made here."""
    t = args[0]
    mode = torch._C._get_dispatch_mode(_FAKE_KEY) or torch._guards.detect_fake_mode()
    if mode is None:
        return t
    # the constant's value is part of the program: lift it as a CPU constant
    # (the graph keeps it, as it keeps torch.tensor(data) on the CPU) and move
    # that to the device, an op of the graph (one UPLOAD in its template)
    if t.numel() == 0:
        with mode:
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=DEVICE)
    with torch.utils._python_dispatch._disable_current_modes():
        values = transfer.download(t).tolist()
    with mode:
        if t.numel() == 1:      # (a one-element CPU constant would be propagated through the copy)
            while isinstance(values, list):
                values = values[0]
            return torch.full(t.shape, values, dtype=t.dtype, device=DEVICE)
        return aten._to_copy.default(torch.tensor(values, dtype=t.dtype), device=DEVICE)


def _resize_(func, args, kwargs):
    self = args[0]
    if tuple(args[1]) == self._key[0] and kwargs.get("memory_format") is None:
        return self
    return resize.resize_tensor(self, args[1], arg(args, kwargs, 2, "memory_format", None))


def _shallow_copy_ok(func, args, kwargs):
    return type(args[0]) is type(args[1])      # asked by `t.data = other` (rebind)


def _specials():
    zero = lambda args, kwargs: 0             # noqa: E731
    one = lambda args, kwargs: 1              # noqa: E731
    empty = lambda args, kwargs: None         # noqa: E731
    return {
        aten._copy_from.default: _copy_from,
        aten._to_copy.default: _to_copy,
        aten.clone.default: _clone,
        aten._local_scalar_dense.default: _item,
        aten.empty_like.default: _fresh(empty),
        aten.zeros_like.default: _fresh(zero),
        aten.ones_like.default: _fresh(one),
        aten.full_like.default: _fresh(lambda args, kwargs: args[1]),
        aten.new_empty.default: _fresh(empty),
        aten.new_empty_strided.default: _fresh(empty),
        aten.new_zeros.default: _fresh(zero),
        aten.new_ones.default: _fresh(one),
        aten.new_full.default: _fresh(lambda args, kwargs: args[2]),
        aten.arange.start_out: _arange_out,
        aten.arange.out: _arange_out,
        aten._unsafe_view.default: _view_handler,
        aten.view_as_real.default: _view_as_real,
        aten.resize_.default: _resize_,
        aten.lift_fresh.default: _lift_fresh,
        aten._has_compatible_shallow_copy_type.default: _shallow_copy_ok,
    }


_SPECIAL = _specials()


# --- building handlers ---------------------------------------------------------------------

def _unsupported(func, args, kwargs):
    raise NotImplementedError(f"rgpu: {func} is not supported yet")


def _is_view(func):
    rets = func._schema.returns
    return bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)


def supports(func):
    """Whether rgpu can run OpOverload func (a kernel, a handler or a decomposition,
    or for a factory (no tensor arguments) a PrivateUse1 kernel)."""
    if _handler(func) is not _unsupported:
        return True
    factory = not any("Tensor" in str(a.type) for a in func._schema.arguments)
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return factory and (has(func.name(), "PrivateUse1") or has(func.name(), "CompositeExplicitAutograd"))


def how(func):
    """How rgpu runs OpOverload func: "kernel <ops.def op>" (records of the op
    table's kernels), "view", "handler" (transfers, factories, random and
    data-dependent ops), "decomposition" (rewritten into other ops, counted
    in rgpu.stats()["decomposed"]), "factory", or None when it does not."""
    if func in cplx.ALWAYS:
        return "view" if func in (aten._conj.default, aten._neg_view.default) else "decomposition"
    r = _how_real(func)
    if r is None and func in cplx.HANDLERS:
        return "decomposition"          # complex calls only (cplx.py)
    return r


def complex_ops():
    """The ATen overloads whose complex calls cplx.py decomposes into real records
    (the others take complex tensors as their kernels do, or refuse them)."""
    return sorted(f"{f._schema.name}.{f._overloadname}" for f in cplx.HANDLERS)


def _how_real(func):
    if func in _SPECIAL or func in _REGISTERED:
        return "handler"
    e = opmap.TABLE.get(func)
    if e is not None:
        return "kernel " + _C.op_names[e.op] if isinstance(e.op, int) else "handler"
    h = _build_real(func)
    if h is _view_handler or h is _inplace_view_handler:
        return "view"
    if h is not _unsupported:
        return "decomposition"
    return "factory" if supports(func) else None


def supported_ops():
    """{ATen overload name ("aten::add.Tensor"): how(func)} for every ATen op rgpu runs."""
    out = {}
    for name in torch._C._dispatch_get_all_op_names():
        ns, _, rest = name.partition("::")
        if ns not in ("aten", "prims"):
            continue
        base, _, ov = rest.partition(".")
        try:
            func = getattr(getattr(getattr(torch.ops, ns), base), ov or "default")
        except (AttributeError, RuntimeError):
            continue
        try:
            h = how(func)
        except Exception:  # noqa: BLE001 - an op whose schema we cannot read
            h = None
        if h is not None:
            out[name if ov else name + ".default"] = h
    return dict(sorted(out.items()))


def _handler(func):
    h = _HANDLERS.get(id(func))
    if h is None:
        h = _HANDLERS[id(func)] = _build(func)
    return h


def _build(func):
    h = _build_any(func)
    w = writes.written_args(func)
    if w and (writes.CHECK_ALL or not _plain_record(func)):
        h = writes.checked(h, func, w)
    return h


def _plain_record(func):
    """Whether func's handler is one op-table record, which writes its argument by construction."""
    e = opmap.TABLE.get(func)
    return (e is not None and e.kind != "handler" and e.pre is None and func not in cplx.ALWAYS
            and func not in cplx.HANDLERS and func not in _SPECIAL and func not in _REGISTERED)


def _build_any(func):
    h = cplx.ALWAYS.get(func)
    if h is not None:
        return h
    h = _build_real(func)
    if func is _COPY:
        return _copy_bits(h)
    ch = cplx.HANDLERS.get(func)
    if ch is not None:
        h = cplx.route(h, ch)
    return cplx.resolving(h) if func in cplx._PASS_BITS else h


def _build_real(func):
    h = _SPECIAL.get(func) or _REGISTERED.get(func)
    if h is not None:
        return h
    e = opmap.TABLE.get(func)
    if e is not None:
        if e.kind == "handler":
            return e.mapper
        if e.kind == "multi":
            h = _multi_handler(func, e.mapper, e.prep, e.op in opinfo.COMPLEX)
        else:
            h = _table_handler(func, e.mapper, e.overlap, e.prep, e.op in opinfo.COMPLEX)
        return h if e.pre is None else functools.partial(e.pre, h)
    if isinstance(func, _OpOverload):
        if torch.Tag.inplace_view in func.tags:
            return _inplace_view_handler
        if _is_view(func) and func._schema.arguments and func._schema.arguments[0].alias_info:
            # reshape & co. (composite, may copy) arrive only from inside decompositions
            return decomp.handler_for(func) if decomp.has_implicit_kernel(func) else _view_handler
    h = decomp.handler_for(func)
    if h is not None:
        return h
    return _unsupported


cplx.use_dispatch(_view_handler, _clone_raw)
set_dispatcher(dispatch)
