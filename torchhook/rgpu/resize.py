"""Resizing rgpu tensors and storages: Tensor.resize_ and UntypedStorage.resize_.

ATen resizes in place: `t.resize_(shape)` keeps t's storage when it holds
enough bytes, else reallocates it (the old bytes copied to the front), and
`t.untyped_storage().resize_(n)` reallocates the storage to n bytes. On rgpu a
storage is a server storage id that every view's server tensor names, so a
reallocation is a new server storage (EMPTY), the old bytes copied over
(byte ALIAS + COPY), and t rebound to a tensor over it. The other tensors
over the old storage can't follow; a reallocation while they exist raises
rather than leaving them on stale bytes.

Storage resize is not a dispatcher op: UntypedStorage.resize_ is C++ that, for
PrivateUse1, calls the backend's PrivateUse1HooksInterface.resizePrivateUse1Bytes,
and torch (2.11-2.15) gives a Python backend no way to implement that hook
(torch._C._acc.PrivateUse1Hooks exposes only is_available, is_built and
has_primary_context). Before the hook, C++ rejects any storage without data
("invalid python storage"), which a wrapper subclass's storage always is. So
the Python method is wrapped instead (install()): storages of the rgpu device
come here, others go to torch's method unchanged. It is what meta_utils calls
when dynamo fakeifies an empty rgpu tensor (`r.untyped_storage().resize_(0)`,
the Llama/Qwen2 crash), and what users call."""

import sys

import torch

from . import _C
from . import tensor as _tensor
from .tensor import DEVICE, RemoteTensor, key_of, out_def, rebind, record_new, record_view

_U8 = torch.uint8
_META = torch.device("meta")


def _bytes_view(t, nbytes):
    """A uint8 view of the first nbytes of t's storage."""
    k = ((nbytes,), (1,), 0, _U8)
    return record_view(t, k, out_def(k, -1))


# references to a storage held by its one tensor and the calls down to here:
# t.__dict__, _realloc's st, _others_share's st, getrefcount's argument
_OWN_REFS = 4


def _others_share(st, t):
    """Whether another live rgpu tensor (a view) holds storage st. Counted by
    looking at who refers to st, not by reference count: other holders (a
    record not yet sent, a capture, a cache) are not views that would miss
    the new storage. Slow (a heap walk), and only resize_ past a storage's
    end gets here."""
    if sys.getrefcount(st) <= _OWN_REFS:
        return False            # held by t and this call's frames only: no heap walk
    import gc
    for r in gc.get_referrers(st):
        if isinstance(r, RemoteTensor):
            if r is not t:
                return True
        elif isinstance(r, dict) and r is not getattr(t, "__dict__", None):
            if any(isinstance(o, RemoteTensor) and o is not t for o in gc.get_referrers(r)):
                return True
    return False


def _realloc(t, nbytes, key, what):
    """Rebind t (metadata key) to a new storage of nbytes holding the first
    bytes of its old storage."""
    st = t._st
    if _others_share(st, t):
        raise NotImplementedError(f"rgpu: {what} reallocates a storage that other tensors (views) "
                                  "share; they would not see the new storage")
    k8 = ((nbytes,), (1,), 0, _U8)
    buf = record_new(_C.OP_EMPTY, k8, out_def(k8, nbytes), (), ())
    keep = min(st.nbytes, nbytes)
    if keep:
        dst = _bytes_view(buf, keep)
        src = _bytes_view(t, keep)
        _C.record(_C.OP_COPY, (dst._tid,), (src._tid,), ())
        del dst, src
    tid = _C.new_id()
    _C.record(_C.OP_ALIAS, ((tid, buf._st.sid) + out_def(key, -1),), (buf._tid,), ())
    rebind(t, key, buf._st, tid, None, storage_size=nbytes)


def resize_tensor(t, size, memory_format=None):
    """aten.resize_(t, size, memory_format): t itself, resized like ATen resizes it."""
    st = t._st
    sizes, strides, offset, dtype = t._key
    m = torch.empty(0, dtype=dtype, device=_META)
    m.set_(torch.empty(st.nbytes, dtype=_U8, device=_META).untyped_storage(), offset, sizes, strides)
    m.resize_(size, memory_format=memory_format)
    key = key_of(m)
    if key == t._key:
        return t
    need = m.untyped_storage().nbytes()
    if need <= st.nbytes:                   # fits: a view of the same storage
        tid = _C.new_id()
        _C.record(_C.OP_ALIAS, ((tid, st.sid) + out_def(key, -1),), (t._tid,), ())
        rebind(t, key, st, tid, None)
    else:
        del st
        _realloc(t, need, key, f"resize_ to {list(size)}")
    return t


def resize_storage(storage, nbytes):
    """UntypedStorage.resize_(nbytes) for a storage of the rgpu device."""
    if _tensor.PENDING:
        _tensor.flush_pending()
    owner = storage.__dict__.get("_rgpu_owner")
    t = owner() if owner is not None else None
    nbytes = int(nbytes)
    if nbytes == storage.nbytes():
        return storage                      # nothing to do (meta_utils' resize_(0) of an empty tensor)
    if t is None or type(t) is not RemoteTensor:
        raise NotImplementedError("rgpu: resize_() of a storage not reached through "
                                  "rgpu_tensor.untyped_storage()")
    sizes, strides, offset, dtype = t._key
    extent = 0
    if all(sizes):
        extent = (offset + 1 + sum((s - 1) * d for s, d in zip(sizes, strides))) * dtype.itemsize
    if nbytes < extent:
        raise NotImplementedError(f"rgpu: untyped_storage().resize_({nbytes}) to fewer bytes than the "
                                  f"tensor over it spans ({extent}); resize the tensor instead")
    _realloc(t, nbytes, t._key, f"untyped_storage().resize_({nbytes})")
    return t.untyped_storage()


_torch_resize = torch.UntypedStorage.resize_


def _storage_resize_(self, size):
    if self.device.type == DEVICE.type:
        return resize_storage(self, size)
    return _torch_resize(self, size)


def install():
    """Route UntypedStorage.resize_ of rgpu storages to resize_storage (once)."""
    if torch.UntypedStorage.resize_ is not _storage_resize_:
        _storage_resize_.__doc__ = _torch_resize.__doc__
        torch.UntypedStorage.resize_ = _storage_resize_


__all__ = ["install", "resize_storage", "resize_tensor"]
