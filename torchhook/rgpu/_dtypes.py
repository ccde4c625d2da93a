"""Dtype numbering shared with the trace format (RGPU_F32 = 0 ... RGPU_BOOL = 9),
and decoding of single elements returned by the server."""
import struct

import torch

from . import _C

TO_RGPU = {
    torch.float32: _C.DTYPE_F32,
    torch.float64: _C.DTYPE_F64,
    torch.float16: _C.DTYPE_F16,
    torch.bfloat16: _C.DTYPE_BF16,
    torch.int64: _C.DTYPE_I64,
    torch.int32: _C.DTYPE_I32,
    torch.int16: _C.DTYPE_I16,
    torch.int8: _C.DTYPE_I8,
    torch.uint8: _C.DTYPE_U8,
    torch.bool: _C.DTYPE_BOOL,
    torch.complex64: _C.DTYPE_C64,
    torch.complex128: _C.DTYPE_C128,
    torch.complex32: _C.DTYPE_C32,
}

# c10's ScalarType names, as ATen's error messages spell dtypes ("... not implemented for 'Long'")
C10_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
    torch.complex32: "ComplexHalf",
}


def c10_name(dtype):
    """dtype as ATen's messages name it (C10_NAMES), else str(dtype)."""
    return C10_NAMES.get(dtype, str(dtype))


_STRUCT = {
    torch.float32: struct.Struct("<f"),
    torch.float64: struct.Struct("<d"),
    torch.float16: struct.Struct("<e"),
    torch.int64: struct.Struct("<q"),
    torch.int32: struct.Struct("<i"),
    torch.int16: struct.Struct("<h"),
    torch.int8: struct.Struct("<b"),
    torch.uint8: struct.Struct("<B"),
    torch.bool: struct.Struct("<?"),
}
_F32 = struct.Struct("<f")
_COMPLEX = {torch.complex64: struct.Struct("<ff"), torch.complex128: struct.Struct("<dd"),
            torch.complex32: struct.Struct("<ee")}


def rgpu_dtype(dtype):
    """The trace-format number of a torch dtype; TypeError for dtypes rgpu lacks."""
    d = TO_RGPU.get(dtype)
    if d is None:
        raise TypeError(f"rgpu: dtype {dtype} is not supported")
    return d


def decode_scalar(dtype, data):
    """One element's little-endian bytes -> the Python number item() returns."""
    if dtype is torch.bfloat16:
        # bf16 is the top half of an f32
        return _F32.unpack(b"\0\0" + bytes(data[:2]))[0]
    if dtype.is_complex:
        re, im = _COMPLEX[dtype].unpack(data)
        return complex(re, im)
    return _STRUCT[dtype].unpack(data)[0]
