"""Per-op facts of trace-format/ops.def that the Python side needs, in one place.

The op numbers come from rgpu._C (OP_<ENUM>, op_names, OP_COUNT: the C
client's copy of ops.def). Facts _C doesn't export yet are written here,
each as a set of ops.def names, and read from _C.op_info where it has them
(a tuple per op: name, n_in, n_out, ...); tests/py/test_optable.py checks
them against ops.def. Nothing else in the package hard-codes a per-op fact."""
from . import _C


def op(name):
    """The op number of ops.def's ENUM name ("ADD_TENSOR")."""
    return getattr(_C, "OP_" + name)


def _ops(*names):
    return frozenset(op(n) for n in names)


def _info():
    """_C.op_info when it is there and lines up with op_names, else None."""
    info = getattr(_C, "op_info", None)
    if info is None or len(info) != _C.OP_COUNT:
        return None
    if any(i[0] != n or type(i[2]) is not int for i, n in zip(info, _C.op_names)):
        return None
    return info


_INFO = _info()

# ops with more than one output (N_OUT > 1 in ops.def): one record, several new tensors
_MULTI_OUT = _ops("MAX_DIM", "MIN_DIM", "LAYER_NORM", "LAYER_NORM_BACKWARD", "NLL_LOSS",
                  "CONVOLUTION_BACKWARD", "BATCH_NORM", "BATCH_NORM_BACKWARD", "MAX_POOL2D",
                  "NATIVE_DROPOUT", "UNIQUE", "AMP_UNSCALE", "AMP_UPDATE_SCALE")


def multi_out(o):
    """Whether op o has several outputs."""
    if _INFO is not None:
        return _INFO[o][2] > 1
    return o in _MULTI_OUT


# pointwise ops whose integer inputs compute in the default float dtype
# (TensorIterator's promote_integer_inputs_to_float): their DTYPE compute arg
FLOAT_COMPUTE = _ops("EXP", "LOG", "LOG1P", "EXPM1", "SQRT", "RSQRT", "RECIPROCAL", "TANH", "SIGMOID",
                     "SIN", "COS", "ERF", "ATAN2")

# the most tensors one CAT record is given; cat of more is cat of groups.
# (RGPU_MAX_IN is 64 now; 16 keeps the records cat has always made.)
CAT_MAX_IN = 16
