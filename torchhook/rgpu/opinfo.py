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

# the most tensors one CAT record is given; cat of more is cat of groups.
# (RGPU_MAX_IN is 64 now; 16 keeps the records cat has always made.)
CAT_MAX_IN = 16
