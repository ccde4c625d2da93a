"""Lazy modules (nn.LazyLinear, LazyConv*, LazyBatchNorm* ...) on rgpu, as on CUDA.

A lazy module holds UninitializedParameter / UninitializedBuffer placeholders:
an empty tensor on the target device that .to() may move and recast, and whose
materialize(shape) gives it real storage at the first forward. torch builds
them with Tensor._make_subclass over torch.empty(0, device=...) and
materializes them with `self.data = torch.empty(shape, ...)`; neither works
for a wrapper subclass: the RemoteTensor that empty() returns already owns its
Python object ("Creating a new Tensor subclass UninitializedParameter ..."),
a CPU TensorImpl can't take a RemoteTensor's by `.data =`, and CPU
placeholder.to("rgpu") would return a plain RemoteTensor, uninitialized no
more (its copy even asks the placeholder's shape, which raises).

So an rgpu placeholder is a 0-element RemoteTensor whose class is also torch's
UninitializedParameter / UninitializedBuffer (rgpu.lazy's, named the same):
is_lazy() holds and every op torch's placeholders refuse raises torch's own
error. Two torch hooks are extended for it, run only for uninitialized tensors
(nothing else pays):
  UninitializedParameter/Buffer.__new__  device="rgpu" (or the default device
      rgpu) builds an rgpu placeholder
  UninitializedTensorMixin.__torch_function__  .to()/.cpu()/.half()... to or
      from rgpu give a placeholder on the target device with the target dtype
      (no data to copy); detach() and requires_grad_() of an rgpu one work,
      since Module._apply moves wrapper subclasses by Parameter(p) + swap_tensors
and its materialize(shape) swaps in a new RemoteTensor (torch.utils.swap_tensors):
the same Python object becomes an rgpu parameter or buffer, as after
model.to("rgpu"), so the module and an optimizer made before keep it.
Not supported: moving a lazy module from rgpu to another device before its
first forward (Module._apply's Parameter(cpu placeholder) calls detach(),
which torch's placeholder refuses); placeholder.cpu() itself works."""
import torch
import torch.nn.parameter as _p

from .tensor import _OWN_ATTRS, DEVICE, RemoteTensor, record_view

_T = torch.Tensor
_DTYPE_CASTS = {_T.half: torch.half, _T.float: torch.float, _T.double: torch.double, _T.char: torch.int8,
                _T.short: torch.int16, _T.int: torch.int32, _T.long: torch.int64}
_torch_tf = _p.UninitializedTensorMixin.__dict__["__torch_function__"].__func__
_torch_param_new = _p.UninitializedParameter.__new__
_torch_buffer_new = _p.UninitializedBuffer.__new__


def _placeholder(cls, requires_grad, dtype):
    t = torch.empty(0, dtype=dtype, device=DEVICE)     # never recorded unless used (tensor.PENDING)
    if requires_grad:
        t.requires_grad_(True)
    t.__class__ = cls
    return t


def _materialize(self, shape, device=None, dtype=None):
    new = torch.empty(shape, device=DEVICE if device is None else device,
                      dtype=self.dtype if dtype is None else dtype)
    if self.requires_grad:
        new.requires_grad_(True)
    # self becomes new (class, attributes, tensor); new, now the placeholder,
    # dies. self's own attributes (_is_buffer, persistent, the user's) stay.
    torch.utils.swap_tensors(self, new)
    for k, v in new.__dict__.items():
        if k not in _OWN_ATTRS and k != "_is_param":
            self.__dict__.setdefault(k, v)
    if isinstance(new, _p.UninitializedParameter):
        if type(self) is RemoteTensor:
            self._is_param = True
        else:                   # materialized on another device: a plain tensor, as torch's
            self.__class__ = _p.Parameter


def _torch_dispatch(cls, func, types, args=(), kwargs=None):
    # what the Mixin lets through (copy_, .data, .real ...) runs, as on CUDA's
    # empty tensor, on the 0-element server tensor: dispatch.py takes
    # RemoteTensors by exact type, so a plain one over it stands in
    subs = {}

    def plain(a):
        if isinstance(a, _REMOTE):
            s = subs.get(id(a))
            if s is None:
                s = subs[id(a)] = (a, record_view(a, a._key, None))   # no record
            return s[1]
        return a

    tm = torch.utils._pytree.tree_map
    out = RemoteTensor.__torch_dispatch__(func, types, tm(plain, args), tm(plain, kwargs or {}))
    back = {id(s): a for a, s in subs.values()}
    return tm(lambda o: back.get(id(o), o), out)


# named as torch's, so that their repr and torch's error messages read the same as on CPU
class UninitializedParameter(_p.UninitializedParameter, RemoteTensor):
    """An UninitializedParameter on rgpu (a 0-element RemoteTensor)."""
    cls_to_become = RemoteTensor
    __torch_dispatch__ = classmethod(_torch_dispatch)
    tolist = _T.tolist          # torch's, which refuses (RemoteTensor's would download)

    def __new__(cls, requires_grad=True, device=None, dtype=None):
        return _placeholder(cls, requires_grad, dtype)

    materialize = _materialize


class UninitializedBuffer(_p.UninitializedBuffer, RemoteTensor):
    """An UninitializedBuffer on rgpu (a 0-element RemoteTensor)."""
    cls_to_become = RemoteTensor
    __torch_dispatch__ = classmethod(_torch_dispatch)
    tolist = _T.tolist          # torch's, which refuses (RemoteTensor's would download)

    def __new__(cls, requires_grad=False, device=None, dtype=None, persistent=True):
        t = _placeholder(cls, requires_grad, dtype)
        t.persistent = persistent
        t._is_buffer = True
        return t

    materialize = _materialize


_REMOTE = (UninitializedParameter, UninitializedBuffer)


def _on_rgpu(device):
    d = torch.get_default_device() if device is None else torch.device(device)
    return d.type == "rgpu"


def _param_new(cls, requires_grad=True, device=None, dtype=None):
    if _on_rgpu(device) and not issubclass(cls, RemoteTensor):
        return UninitializedParameter(requires_grad, dtype=dtype)
    return _torch_param_new(cls, requires_grad, device, dtype)


def _buffer_new(cls, requires_grad=False, device=None, dtype=None, persistent=True):
    if _on_rgpu(device) and not issubclass(cls, RemoteTensor):
        return UninitializedBuffer(requires_grad, dtype=dtype, persistent=persistent)
    return _torch_buffer_new(cls, requires_grad, device, dtype, persistent)


def _target(func, args, kwargs):
    """(device, dtype) a conversion of args[0] asks for; None when func is no conversion."""
    src = args[0]
    if func is _T.to:
        try:        # (_parse_to takes no copy=; with copy=True _convert makes a new placeholder)
            device, dtype, _, _ = torch._C._nn._parse_to(*args[1:], **{k: v for k, v in kwargs.items() if k != "copy"})
        except (TypeError, RuntimeError):
            return None         # torch's own path, and its own error
    elif func is _T.cpu:
        device, dtype = torch.device("cpu"), None
    elif func is _T.cuda:
        d = kwargs.get("device", args[1] if len(args) > 1 else None)
        device, dtype = torch.device("cuda", d) if isinstance(d, int) else torch.device(d or "cuda"), None
    elif func in _DTYPE_CASTS:
        device, dtype = None, _DTYPE_CASTS[func]
    else:
        return None
    return (src.device if device is None else device), (src.dtype if dtype is None else dtype)


def _convert(src, device, dtype, copy=False):
    """src (a placeholder) converted: src itself when nothing changes, else a new placeholder."""
    if device.type == src.device.type and dtype == src.dtype and not copy:
        return src
    rg = src.requires_grad and (dtype.is_floating_point or dtype.is_complex)
    if isinstance(src, _p.UninitializedParameter):
        cls = UninitializedParameter if device.type == "rgpu" else _p.UninitializedParameter
        return cls(rg, device, dtype)
    cls = UninitializedBuffer if device.type == "rgpu" else _p.UninitializedBuffer
    return cls(rg, device, dtype, src.__dict__.get("persistent", True))


@classmethod
def _torch_function(cls, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    remote = issubclass(cls, _REMOTE)
    conv = (remote or func is _T.to) and isinstance(args[0], _p.UninitializedTensorMixin)
    tgt = _target(func, args, kwargs) if conv else None
    if tgt is not None and (remote or tgt[0].type == "rgpu"):
        return _convert(args[0], *tgt, kwargs.get("copy", False))
    if remote and func is _T.detach:
        return type(args[0])(False, dtype=args[0].dtype)
    if remote and func is _T.requires_grad_:
        return super(_p.UninitializedTensorMixin, cls).__torch_function__(func, types, args, kwargs)
    return _torch_tf(cls, func, types, args, kwargs)


def install():
    _p.UninitializedParameter.__new__ = staticmethod(_param_new)
    _p.UninitializedBuffer.__new__ = staticmethod(_buffer_new)
    _p.UninitializedTensorMixin.__torch_function__ = _torch_function
