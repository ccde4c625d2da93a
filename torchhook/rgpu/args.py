"""Argument helpers of the op handlers (opmap.py's mappers, dispatch.py,
random.py, datadep.py, cells.py, ctc.py): reading an ATen call's arguments,
turning tensor arguments into server tensor ids, the device-mismatch error."""
import torch

from . import _C, transfer
from .tensor import RemoteTensor


def device_error(t):
    return RuntimeError("Expected all tensors to be on the same device, but found at least two "
                        f"devices, rgpu:0 and {t.device}!")


def arg(args, kwargs, pos, name, default=None):
    """Argument pos (or keyword name) of an ATen call, default when absent."""
    return args[pos] if len(args) > pos else kwargs.get(name, default)


def need_remote(t, func):
    if type(t) is not RemoteTensor:
        raise RuntimeError(f"rgpu: {func}: expected an rgpu tensor, got one on {t.device}")


def tid_of(x):
    """The tid of rgpu tensor x (a device error for any other tensor)."""
    if type(x) is RemoteTensor:
        return x._tid
    raise device_error(x)


def operand(x, temps):
    """The tid of a tensor input (None stays None), uploading a CPU scalar tensor
    (its tid is appended to temps, freed after the record)."""
    if type(x) is RemoteTensor:
        return x._tid
    if x is None:
        return None
    if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() == 0:
        return upload_temp(x, temps)
    raise device_error(x)


def upload_temp(x, temps):
    """Upload CPU tensor x for one record: its tid, also appended to temps."""
    tid = transfer.upload_tensor(x)
    temps.append(tid)
    return tid


def free_temps(temps):
    """Free the tensors upload_temp made, once their record is made."""
    for tid in temps:
        _C.free(tid)


def slot_of(x):
    """A "t|s" operand: (tid, None) for an rgpu tensor, (None, value) for a scalar
    (a CPU scalar tensor gives its value; None stays absent)."""
    if type(x) is RemoteTensor:
        return x._tid, None
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu" or x.dim() != 0:
            raise device_error(x)
        return None, x.item()
    return None, x
