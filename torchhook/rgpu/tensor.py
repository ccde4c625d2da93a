"""RemoteTensor: the Python face of a tensor that lives on the rgpu server.

A RemoteTensor is a wrapper subclass (no local data) on device rgpu:0 holding
  _tid  the server's tensor id (freed when the wrapper dies)
  _st   the Storage it views (shared by a base and all its views)
  _key  (sizes, strides, storage offset, dtype): its metadata, immutable
  _m    a meta tensor with the same metadata, made lazily; views' metas share
        their base's meta storage so meta inference sees aliasing like ATen.
Every op on it goes to __torch_dispatch__, which the dispatch module installs
with set_dispatcher()."""
import copy
import weakref
from collections import OrderedDict

import torch

from . import _C, transfer
from ._dtypes import rgpu_dtype
from .pending import PENDING, drop_pending as _drop_pending, flush_pending  # noqa: F401 (re-exported)

DEVICE = torch.device("rgpu", 0)

_make = torch.Tensor._make_wrapper_subclass
_is_conj = torch.Tensor.is_conj
_is_neg = torch.Tensor.is_neg
_set_conj = torch._C._set_conj
_set_neg = torch._C._set_neg
_free = _C.free
_new_id = _C.new_id
_data_get = torch._C.TensorBase.data.__get__
_data_set = torch._C.TensorBase.data.__set__     # sizes/strides/offset/dtype only


def _no_dispatcher(func, args, kwargs):
    raise RuntimeError("rgpu: dispatch module not loaded")


_dispatch = _no_dispatcher


def set_dispatcher(fn):
    """fn(func, args, kwargs) handles every ATen op on RemoteTensors."""
    global _dispatch
    _dispatch = fn


def call_single(fn, pos, kw):
    """fn(*pos, **kw), a torch function on RemoteTensors, and the ATen op it
    sent to __torch_dispatch__ at the top level with the (args, kwargs) it
    sent: (result, (func, args, kwargs)), or (result, None) when it sent
    none or several (what ops a handler dispatches while running are below
    the top level and not counted; calls from other threads are not seen)."""
    import threading
    me = threading.get_ident()
    tops = []
    depth = 0
    prev = _dispatch

    def capture(func, args, kwargs):
        nonlocal depth
        if threading.get_ident() != me:
            return prev(func, args, kwargs)
        if depth == 0:
            tops.append((func, args, kwargs))
        depth += 1
        try:
            return prev(func, args, kwargs)
        finally:
            depth -= 1
    set_dispatcher(capture)
    try:
        r = fn(*pos, **kw)
    finally:
        set_dispatcher(prev)
    return r, (tops[0] if len(tops) == 1 else None)


class Storage:
    """One server storage: id, size in bytes, and the meta storage views share."""
    __slots__ = ("sid", "nbytes", "meta")

    def __init__(self, sid, nbytes, meta=None):
        self.sid = sid
        self.nbytes = nbytes
        self.meta = meta


_HIDE_UNFLATTEN = [False]
_OWN_ATTRS = frozenset(("_tid", "_st", "_key", "_m", "_ref", "_is_param", "_fm"))


def _unflatten(inner, ctx, outer_size, outer_stride):
    # dynamo's fake of the meta tensor: move it to rgpu. Sizes and strides are
    # the outer ones: with dynamic shapes they are the symbols dynamo guards
    # and passes as the graph's size inputs (the inner tensor gets its own)
    m = inner["_meta"]
    if outer_size is None:
        outer_size, outer_stride = m.shape, m.stride()
    with m.fake_mode:
        fm = torch.empty_strided(outer_size, outer_stride, dtype=m.dtype, device=DEVICE)
        if m.storage_offset():
            fm = fm.as_strided(m.shape, m.stride(), m.storage_offset())
    return fake_of(fm)


class _Unflatten:
    """RemoteTensor.__tensor_unflatten__, hidden (AttributeError) while aot
    autograd's backward prologue checks tangents; see __coerce_same_metadata_as_tangent__."""
    def __get__(self, obj, cls):
        if obj is not None and _HIDE_UNFLATTEN[0]:
            raise AttributeError("__tensor_unflatten__")
        return _unflatten


class RemoteTensor(torch.Tensor):
    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs)

    # A traceable wrapper subclass: Module._apply then moves parameters with
    # torch.utils.swap_tensors, keeping each Parameter object, so tied weights
    # stay tied and optimizers built earlier stay valid; and dynamo can trace
    # it (torch.compile). Its one "inner tensor" is the meta tensor: dynamo
    # fakeifies it and rebuilds a FakeRemote stand-in (__tensor_unflatten__).
    # The context is None so that dynamo's subclass guard holds across calls.
    def __tensor_flatten__(self):
        return ["_meta"], None

    __tensor_unflatten__ = _Unflatten()

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        # aot_autograd traced the compiled graph with plain fake tensors, so
        # at backward it expects plain tangents: the tangent stays what it is,
        # and is_traceable_wrapper_subclass() answers False until the compiled
        # backward starts (compile.py clears the flag).
        _HIDE_UNFLATTEN[0] = True
        return self

    def __del__(self):
        d = self.__dict__
        if "_ref" in d:         # a _TidRef owns the id (shared with other wrappers)
            return
        tid = d.get("_tid")
        if tid:
            if PENDING and _drop_pending(tid):
                return          # never recorded: the server never saw it
            _free(tid)

    def __deepcopy__(self, memo):
        # Tensor.__deepcopy__ clones, then copies __dict__ over the clone's, which
        # would give the copy this tensor's server id (freed twice later).
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            new = self.clone(memory_format=torch.preserve_format)
        if self.__dict__.get("_is_param") or isinstance(self, torch.nn.Parameter):
            new = torch.nn.Parameter(new, self.requires_grad)
        elif self.requires_grad:
            new.requires_grad_(True)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            if k not in _OWN_ATTRS:
                setattr(new, k, copy.deepcopy(v, memo))
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        return new

    # pickle / torch.save: the values go to the CPU and come back to rgpu at
    # load (or stay where torch.load's map_location says), as torch does for a
    # backend whose tensors have no host storage; a Parameter stays one. Only
    # torch's own rebuild functions are named, so torch.load(weights_only=True)
    # reads it. Views are saved as copies (no storage sharing across them).
    def __reduce_ex__(self, proto):
        if self.__dict__.get("_is_param"):
            return (torch._utils._rebuild_parameter, (self.detach(), self.requires_grad, OrderedDict()))
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (transfer.download(self), self.dtype, str(self.device), self.requires_grad))

    @property
    def _meta(self):
        return meta_of(self)

    # `t.data = other` (nn.utils.vector_to_parameters, old-style weight
    # surgery): torch's setter copies only other's metadata into t's
    # TensorImpl, so t would keep reading its old server tensor with new
    # sizes, a wrong result with no error. t takes other's server tensor too.
    @property
    def data(self):
        return _data_get(self)

    @data.setter
    def data(self, new):
        if type(new) is not RemoteTensor:
            dev = new.device if isinstance(new, torch.Tensor) else type(new).__name__
            raise RuntimeError(f"rgpu: cannot set .data of an rgpu tensor to a tensor on {dev}: "
                               "move it first (.to('rgpu')), or copy_ its values")
        share(self, new)

    def untyped_storage(self):
        # the storage remembers its tensor: UntypedStorage.resize_ of the rgpu
        # device (resize.py) rebinds that tensor to a reallocated storage
        s = super().untyped_storage()
        if "_rgpu_owner" not in s.__dict__:
            s._rgpu_owner = weakref.ref(self)
        return s

    def tolist(self):
        return transfer.download(self).tolist()

    def numpy(self, *, force=False):
        return self.cpu().numpy()

    def __repr__(self, *, tensor_contents=None):
        c = transfer.download(self)
        s = torch._tensor_str._str(c)
        head = "tensor(" + torch._tensor_str._tensor_str(c, len("tensor("))
        if not s.startswith(head):     # unknown layout of the string: put the device last
            head = s[:-1]
        tail = s[len(head):-1]
        extra = ", device='" + str(DEVICE) + "'"
        if self.grad_fn is not None:
            extra2 = ", grad_fn=<" + type(self.grad_fn).__name__ + ">"
        elif self.requires_grad:
            extra2 = ", requires_grad=True"
        else:
            extra2 = ""
        return head + extra + tail + extra2 + ")"


def record_later(op, key, odef, args, m=None):
    """A new tensor (on a new storage) whose record waits in PENDING (pending.py) until flush_pending()."""
    tid, sid = _new_id(), _new_id()
    PENDING[tid] = (op, (tid, sid) + odef, args)
    return wrap(key, Storage(sid, odef[4], None if m is None else m.untyped_storage()), tid, m)


def record_zero_later(key, odef, m=None):
    return record_later(_C.OP_FULL, key, odef, (0,), m)


def wrap(key, st, tid, m=None):
    """A RemoteTensor for server tensor tid with metadata key over storage st."""
    sizes, strides, offset, dtype = key
    t = _make(RemoteTensor, sizes, strides=strides, storage_offset=offset, dtype=dtype, device=DEVICE)
    t._key = key
    t._st = st
    t._tid = tid
    t._m = m
    return t


def key_of(m):
    """The metadata key of a (meta or CPU) tensor."""
    return (tuple(m.shape), m.stride(), m.storage_offset(), m.dtype)


def meta_like(t):
    """A new meta tensor of t's sizes, strides and dtype (its own storage)."""
    return torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="meta")


def meta_of(t):
    """t's meta tensor, made on first use over its storage's shared meta storage."""
    m = t._m
    if m is None:
        st = t._st
        sm = st.meta
        if sm is None:
            sm = st.meta = torch.empty(st.nbytes, dtype=torch.uint8, device="meta").untyped_storage()
        sizes, strides, offset, dtype = t._key
        m = t._m = torch.empty(0, dtype=dtype, device="meta").set_(sm, offset, sizes, strides)
    return m


def rebind(t, key, st, tid, m=None, storage_size=None):
    """Point the existing Python object t at another server tensor with other
    metadata (out= resizing, in-place view ops, resize_); frees t's old tensor
    id. storage_size: the bytes t.untyped_storage() reports, when not those
    its metadata spans."""
    if storage_size is None:
        tmp = wrap(key, st, 0, None)
    else:
        sizes, strides, offset, dtype = key
        tmp = _make(RemoteTensor, sizes, strides=strides, storage_offset=offset, dtype=dtype, device=DEVICE,
                    storage_size=storage_size)
        tmp._key, tmp._st, tmp._tid, tmp._m = key, st, 0, None
    _data_set(t, tmp)       # copies sizes/strides/offset/dtype into t's TensorImpl
    old = t._tid
    t._key, t._st, t._tid, t._m = key, st, tid, m
    if t.__dict__.pop("_ref", None) is None:
        _free(old)              # else the _TidRef frees it when its last wrapper goes


def share(t, src):
    """Point t at src's server tensor and metadata (both then own the id)."""
    ref = src.__dict__.get("_ref")
    if ref is None:
        ref = src._ref = _TidRef(src._tid)
    _data_set(t, src)
    old = t._tid
    t._key, t._st, t._tid, t._m = src._key, src._st, src._tid, src._m
    if t.__dict__.get("_ref") is None and old and not (PENDING and _drop_pending(old)):
        _free(old)
    t._ref = ref
    _set_conj(t, _is_conj(src))
    _set_neg(t, _is_neg(src))


def out_def(key, nbytes):
    """The constant part of a new-tensor definition: (dtype, sizes, strides, offset, nbytes)."""
    sizes, strides, offset, dtype = key
    return (rgpu_dtype(dtype), sizes, strides, offset, nbytes)


def record_new(op, key, odef, ins, args, m=None):
    """Record op with one new output tensor on a new storage (odef from out_def)
    and return its RemoteTensor. m, when given, is its meta tensor."""
    tid = _new_id()
    sid = _new_id()
    _C.record(op, ((tid, sid) + odef,), ins, args)
    return wrap(key, Storage(sid, odef[4], None if m is None else m.untyped_storage()), tid, m)


class _TidRef:
    """Shared ownership of one server tensor id by several wrappers (detach and
    other views with the base's own metadata): freed when the last one goes."""
    __slots__ = ("tid",)

    def __init__(self, tid):
        self.tid = tid

    def __del__(self):
        if not self.tid or (PENDING and _drop_pending(self.tid)):
            return              # tid 0: handed to a template that frees it (compile.py)
        _free(self.tid)


def _view_bits(t, base):
    """t, a view of base, with base's lazy conj / neg bits, as ATen's views
    keep them (cplx.py)."""
    if _is_conj(base):
        _set_conj(t, True)
    if _is_neg(base):
        _set_neg(t, True)
    return t


def twin(base, ref, m=None):
    """Another wrapper over base's server tensor, with its metadata, owned by
    ref (a _TidRef: the id is freed when its last wrapper goes)."""
    t = wrap(base._key, base._st, base._tid, m)
    t._ref = ref
    return _view_bits(t, base)


def record_view(base, key, odef, m=None):
    """Record an ALIAS of base with metadata key (odef's nbytes is -1) and return
    it; a view with base's own metadata (detach, alias) is another wrapper over
    base's server tensor, with no record."""
    if key == base._key:
        ref = base.__dict__.get("_ref")
        if ref is None:
            ref = base._ref = _TidRef(base._tid)
        return twin(base, ref, m)
    tid = _new_id()
    st = base._st
    _C.record(_C.OP_ALIAS, ((tid, st.sid) + odef,), (base._tid,), ())
    return _view_bits(wrap(key, st, tid, m), base)


def out_specs(metas):
    """[(key, out_def)] of new outputs' meta tensors, None for None."""
    specs = []
    for m in metas:
        k = None if m is None else key_of(m)
        specs.append(None if m is None else (k, out_def(k, m.untyped_storage().nbytes())))
    return specs


# Output specs kept by the handlers whose meta kernels are Python and slow
# (native_dropout's empty_like, SDPA's prims): key -> out_specs, the key a
# tuple led by the caller's name and holding every input key the outputs'
# metadata depends on.
_KEPT = {}
_KEPT_MAX = 10_000


def kept_specs(key, metas):
    """The output specs kept under key, made from metas() (the outputs' meta
    tensors, None for an absent one) on the first call."""
    s = _KEPT.get(key)
    if s is None:
        if len(_KEPT) >= _KEPT_MAX:
            _KEPT.clear()
        s = _KEPT[key] = out_specs(metas())
    return s


def record_outs(op, specs, ins, args, metas=None):
    """Record op whose outputs are new tensors on new storages, specs[i] = (key,
    out_def) or None for an absent output (tid 0); metas[i] their meta tensors
    or None (metas None: made on first use). Returns the outputs as ATen does:
    a tuple, None where absent."""
    defs, ids = [], []
    for s in specs:
        if s is None:
            defs.append(0)
            ids.append(None)
        else:
            tid, sid = _new_id(), _new_id()
            defs.append((tid, sid) + s[1])
            ids.append((tid, sid))
    _C.record(op, tuple(defs), ins, args)
    outs = []
    for i, s in enumerate(specs):
        if s is None:
            outs.append(None)
            continue
        m = metas[i] if metas is not None else None
        tid, sid = ids[i]
        outs.append(wrap(s[0], Storage(sid, s[1][4], None if m is None else m.untyped_storage()), tid, m))
    return tuple(outs)


def record_multi(op, metas, ins, args):
    """Record op with several new outputs, each on its own new storage; metas
    are the outputs' meta tensors, None for an output not wanted (recorded as
    the absent output, tid 0). Returns the RemoteTensors (None where absent)."""
    return list(record_outs(op, out_specs(metas), ins, args, metas))


class FakeRemote(RemoteTensor):
    """A RemoteTensor's stand-in while dynamo traces (torch.compile): no server
    tensor, only a fake meta tensor (_fm, from dynamo's FakeTensorMode) that
    every op runs on. Never recorded, never freed."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        un = lambda a: a._fm if isinstance(a, FakeRemote) else a   # noqa: E731
        tm = torch.utils._pytree.tree_map
        out = func(*tm(un, args), **tm(un, kwargs or {}))
        return tm(lambda o: fake_of(o) if type(o) is not FakeRemote and isinstance(o, torch.Tensor) else o, out)

    def __tensor_flatten__(self):
        return ["_meta"], None

    @property
    def _meta(self):
        return self._fm

    def __del__(self):
        pass

    def __repr__(self, *, tensor_contents=None):
        return f"FakeRemote(size={tuple(self.shape)}, dtype={self.dtype}, device='{DEVICE}')"


def fake_of(fm):
    """A FakeRemote over fake meta tensor fm (same sizes, strides, offset, dtype)."""
    t = _make(FakeRemote, fm.shape, strides=fm.stride(), storage_offset=fm.storage_offset(),
              dtype=fm.dtype, device=DEVICE, requires_grad=fm.requires_grad)
    t._fm = fm
    t._tid = None
    t._key = None
    t._st = None
    t._m = None
    return t
