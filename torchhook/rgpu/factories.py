"""Factory kernels at the PrivateUse1 ("rgpu") dispatch key.

Factories have no tensor argument, so BackendSelect sends device="rgpu" calls
straight to PrivateUse1 and __torch_dispatch__ never sees them. Without a
kernel here torch.zeros/ones/full/arange would run their composite forms
(empty + fill_ / arange.out) — correct but two records instead of one — so
each gets its own kernel. torch.tensor(data, device="rgpu") and friends end in
_copy_from, called with the Python key excluded: it must not run torch ops on
RemoteTensors, only record. Other factories (randn, linspace, eye ...) reach
the op that fills the empty tensor, which raises NotImplementedError naming it."""
import torch

from . import _C, server, transfer
from . import tensor as _tensor
from .tensor import RemoteTensor, key_of, out_def, record_new

_lib = torch.library.Library("aten", "IMPL")    # kept alive for the process
_META = torch.device("meta")


def _check(device, layout):
    if device is not None and device.index not in (None, 0):
        raise RuntimeError(f"rgpu: device {device} does not exist (only rgpu:0)")
    if layout not in (None, torch.strided):
        raise NotImplementedError(f"rgpu: layout {layout} is not supported")
    server.ensure()


def _new(m, op, args):
    k = key_of(m)
    return record_new(op, k, out_def(k, m.untyped_storage().nbytes()), (), args, m)


def _empty(m):
    # recorded at first use (tensor.PENDING): a copy from the CPU that fills
    # it all (x.to("rgpu"), torch.tensor) then makes it with one UPLOAD
    k = key_of(m)
    return _tensor.record_later(_C.OP_EMPTY, k, out_def(k, m.untyped_storage().nbytes()), (), m)


def empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    _check(device, layout)
    return _empty(torch.empty(size, dtype=dtype, device=_META, memory_format=memory_format))


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    _check(device, layout)
    return _empty(torch.empty_strided(size, stride, dtype=dtype, device=_META))


def full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    _check(device, layout)
    m = torch.full(size, fill_value, dtype=dtype, device=_META)
    if isinstance(fill_value, complex):
        # FULL writes (value, 0) into a complex tensor; the imaginary part after
        r = _new(m, _C.OP_FULL, (fill_value.real,))
        if fill_value.imag != 0 and m.dtype.is_complex:
            torch.view_as_real(r)[..., 1].fill_(fill_value.imag)
        return r
    return _new(m, _C.OP_FULL, (fill_value,))


_graph_task_id = torch._C._current_graph_task_id


def zeros(size, dtype=None, layout=None, device=None, pin_memory=None):
    _check(device, layout)
    m = torch.empty(size, dtype=dtype, device=_META)
    if _graph_task_id() != -1:      # inside backward: likely a materialized grad (tensor.PENDING)
        k = key_of(m)
        return _tensor.record_zero_later(k, out_def(k, m.untyped_storage().nbytes()), m)
    return _new(m, _C.OP_FULL, (0,))


def ones(size, dtype=None, layout=None, device=None, pin_memory=None):
    _check(device, layout)
    return _new(torch.empty(size, dtype=dtype, device=_META), _C.OP_FULL, (1,))


def arange_start_step(start, end, step=1, dtype=None, layout=None, device=None, pin_memory=None):
    _check(device, layout)
    m = torch.arange(start, end, step, dtype=dtype, device=_META)
    return _new(m, _C.OP_ARANGE, (start, step))


def arange_start(start, end, dtype=None, layout=None, device=None, pin_memory=None):
    return arange_start_step(start, end, 1, dtype, layout, device, pin_memory)


def arange(end, dtype=None, layout=None, device=None, pin_memory=None):
    return arange_start_step(0, end, 1, dtype, layout, device, pin_memory)


def copy_from(self, dst, non_blocking=False):
    """dst := self where one of them is on rgpu (Python key excluded: record only)."""
    if _tensor.PENDING:
        if type(dst) is RemoteTensor and type(self) is not RemoteTensor and transfer.upload_into(dst, self):
            return dst
        _tensor.flush_pending()
    if type(dst) is RemoteTensor:
        if tuple(self.shape) != tuple(dst.shape):
            torch.broadcast_shapes(self.shape, dst.shape)   # raises for impossible shapes
        if type(self) is RemoteTensor:
            _C.record(_C.OP_COPY, (dst._tid,), (self._tid,), ())
        else:
            transfer.copy_from_cpu(dst, self)
        return dst
    if type(self) is RemoteTensor:
        dst.copy_(transfer.download(self))
        return dst
    raise RuntimeError(f"rgpu: _copy_from between {self.device} and {dst.device}")


# torch.fft.fftfreq: ATen's fftfreq writes its negative half by an arange into a
# resized empty slice of its result, which arange-into-out here would rebind.
def fft_fftfreq(n, d=1.0, dtype=None, layout=None, device=None, pin_memory=None):
    dt = dtype or torch.get_default_dtype()
    aten = torch.ops.aten
    r = aten.cat.default([arange_start_step(0, (n + 1) // 2, 1, dt, layout, device, pin_memory),
                          arange_start_step(-(n // 2), 0, 1, dt, layout, device, pin_memory)])
    return aten.mul.Scalar(r, 1.0 / (n * d))


def fft_rfftfreq(n, d=1.0, dtype=None, layout=None, device=None, pin_memory=None):
    dt = dtype or torch.get_default_dtype()
    return torch.ops.aten.mul.Scalar(arange_start_step(0, n // 2 + 1, 1, dt, layout, device, pin_memory),
                                     1.0 / (n * d))


for _name, _fn in (("empty.memory_format", empty_memory_format),
                   ("empty_strided", empty_strided),
                   ("full", full),
                   ("zeros", zeros),
                   ("ones", ones),
                   ("arange", arange),
                   ("arange.start", arange_start),
                   ("arange.start_step", arange_start_step),
                   ("_copy_from", copy_from),
                   ("fft_fftfreq", fft_fftfreq),
                   ("fft_rfftfreq", fft_rfftfreq)):
    _lib.impl(_name, _fn, "PrivateUse1")
