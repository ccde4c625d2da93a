"""Moving data between CPU tensors and the server: upload, download, item().

Functions here take RemoteTensors by duck typing (._tid, .dtype, .shape) and
record through rgpu._C; they never wait except where data comes back."""
import ctypes

import torch

from . import _C
from .waits import wait
from ._dtypes import decode_scalar, rgpu_dtype
from .pending import PENDING, flush_pending


def contiguous_strides(sizes):
    strides, acc = [], 1
    for s in reversed(sizes):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def _cpu_buffer(t):
    """A zero-copy buffer over a contiguous CPU tensor's bytes (keep t alive while used)."""
    n = t.numel() * t.element_size()
    return (ctypes.c_char * n).from_address(t.data_ptr()) if n else b""


def upload_tensor(src):
    """Upload a CPU tensor as a new, contiguous rgpu tensor; returns its tid (the caller frees it)."""
    if src.device.type != "cpu":
        raise RuntimeError(f"rgpu: cannot upload a tensor on {src.device}")
    src = src.detach().resolve_conj().resolve_neg().contiguous()
    sizes = tuple(src.shape)
    nbytes = src.numel() * src.element_size()
    tid, sid = _C.new_id(), _C.new_id()
    _C.upload((tid, sid, rgpu_dtype(src.dtype), sizes, contiguous_strides(sizes), 0, nbytes),
              _cpu_buffer(src))
    return tid


def upload_into(dst, src):
    """dst := src by one UPLOAD that defines dst, when dst is a new empty tensor
    not recorded yet (pending.PENDING) that src fills exactly (same shape and
    dtype, dst contiguous over its whole storage, src a CPU tensor). Returns
    whether it did (else nothing happened)."""
    pend = PENDING.get(dst._tid)
    if pend is None or pend[0] != _C.OP_EMPTY or not isinstance(src, torch.Tensor) or src.device.type != "cpu":
        return False
    sizes, strides, offset, dtype = dst._key
    if (src.dtype != dtype or tuple(src.shape) != sizes or offset != 0 or strides != contiguous_strides(sizes)
            or pend[1][6] != src.numel() * src.element_size() or src.requires_grad):
        return False
    if PENDING.pop(dst._tid, None) is None:
        return False                    # another thread recorded it meanwhile
    src = src.resolve_conj().resolve_neg().contiguous()
    _C.upload(pend[1], _cpu_buffer(src))
    return True


def copy_from_cpu(dst, src):
    """dst (an rgpu tensor) := src (a CPU tensor), broadcast and cast like copy_."""
    tmp = upload_tensor(src)
    _C.record(_C.OP_COPY, (dst._tid,), (tmp,), ())
    _C.free(tmp)


def download(t):
    """The elements of rgpu tensor t as a new contiguous CPU tensor (waits)."""
    if PENDING:
        flush_pending()
    data = wait(_C.record(_C.OP_DOWNLOAD, (), (t._tid,), ()))
    shape, dtype = t.shape, t.dtype
    n = t.numel()
    if len(data) != n * dtype.itemsize:
        raise RuntimeError(f"rgpu: download of a {tuple(shape)} {dtype} tensor returned "
                           f"{len(data)} bytes, expected {n * dtype.itemsize}")
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    c = torch.frombuffer(bytearray(data), dtype=dtype).view(shape)
    if t.is_conj():             # stored values; a lazy conj/neg view's are these conjugated/negated
        c = torch.conj_physical(c)
    if t.is_neg():
        c = torch.neg(c)
    return c


def item(t):
    """t.item() for a one-element rgpu tensor (waits)."""
    n = t.numel()
    if n != 1:
        raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
    data = wait(_C.record(_C.OP_LOCAL_SCALAR_DENSE, (), (t._tid,), ()))
    if len(data) != t.dtype.itemsize:
        raise RuntimeError(f"rgpu: item() of a {t.dtype} tensor returned {len(data)} bytes")
    v = decode_scalar(t.dtype, data)
    if t.is_conj():             # a lazy conj/neg view: the stored value conjugated/negated
        v = v.conjugate()
    if t.is_neg():
        v = -v
    return v
