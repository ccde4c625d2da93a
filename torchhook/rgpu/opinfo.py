"""Per-op facts of trace-format/ops.def that the Python side needs, in one place.

Everything comes from rgpu._C, the C client's compiled copy of ops.def:
OP_<ENUM> numbers, op_names, OP_COUNT, the OPF_* flag bits and op_info, a
tuple per op: (name, n_in, n_out, flags, family, signature). Nothing else in
the package hard-codes a per-op fact; tests/py/test_optable.py checks the
table against ops.def."""
from . import _C

INFO = _C.op_info


def op(name):
    """The op number of ops.def's ENUM name ("ADD_TENSOR")."""
    return getattr(_C, "OP_" + name)


def multi_out(o):
    """Whether op o has several outputs (N_OUT > 1)."""
    return INFO[o][2] > 1


def _flagged(bit):
    return frozenset(o for o, i in enumerate(INFO) if i[3] & bit)


# pointwise ops whose integer inputs compute in the default float dtype
# (TensorIterator's promote_integer_inputs_to_float; ops.def's INT_TO_FLOAT)
FLOAT_COMPUTE = _flagged(_C.OPF_INT_TO_FLOAT)

# ops that take complex views (ops.def's COMPLEX; the backends refuse the others)
COMPLEX = _flagged(_C.OPF_COMPLEX)

BY_NAME = {i[0]: o for o, i in enumerate(INFO)}      # ops.def's "name" -> op number


def _plain_pointwise(n_in, signature):
    return tuple((i[0], o) for o, i in enumerate(INFO)
                 if i[4] == "pointwise" and i[1] == n_in and i[2] == 1 and i[5] == signature
                 and "::" not in i[0] and "." not in i[0])


# ops.def's plain pointwise ops, (name, op) each: the ATen op of the same name
# computes one tensor from one tensor (UNARY: neg, exp, erfinv, special_i0e
# ...) or from two tensor-or-scalar operands (BINARY: pow, eq, atan2, igamma
# ...; ARGS "s? self, s? other"), and the record's only other arg is the
# DTYPE compute. opmap.py maps every ATen overload of that shape to the op, so
# such an op needs its ops.def line and kernels only. (An op with more args
# (gelu's approximate), an overload in its name (div.Tensor_mode) or no ATen
# op of its name (rgpu::frexp_mantissa) is mapped by hand in opmap.py.)
UNARY = _plain_pointwise(1, "dt compute")
BINARY = _plain_pointwise(2, "s? self, s? other, dt compute")

# the most tensors one CAT record is given; cat of more is cat of groups.
# (RGPU_MAX_IN is 64 now; 16 keeps the records cat has always made.)
CAT_MAX_IN = 16
