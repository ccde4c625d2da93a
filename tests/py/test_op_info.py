"""rgpu._C.op_info and the OPF_* constants against trace-format/ops.def.

op_info[op] = (name, n_in, n_out, flags, family, signature): ops.def's columns
in op order; flags are RGPU_OPF_* bits (_C.OPF_*), family a lowercase name,
signature the ARGS string ("ints dims, b keepdim")."""
import os
import re
import sys

from rgpu import _C

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gen_ops  # noqa: E402


def test_op_info_matches_ops_def():
    ops, _ = gen_ops.ops()
    assert len(_C.op_info) == len(ops) == _C.OP_COUNT
    for o in ops:
        name, n_in, n_out, flags, family, sig = _C.op_info[o["num"]]
        want = 0
        for f in o["flags"]:
            want |= getattr(_C, "OPF_" + f)
        assert (name, n_in, n_out, flags, family, sig) == (o["name"], o["nin"], o["nout"], want, o["fam"].lower(),
                                                           o["sig"]), o["enum"]
        assert getattr(_C, "OP_" + o["enum"]) == o["num"]
        assert _C.op_names[o["num"]] == name


def test_flag_values():
    # the five hashed bits keep their values (the op-table hash covers them)
    assert (_C.OPF_WAIT, _C.OPF_FACTORY, _C.OPF_VIEW, _C.OPF_CONTROL, _C.OPF_VARIADIC) == (1, 2, 4, 8, 16)
    bits = [getattr(_C, "OPF_" + f) for f in gen_ops.FLAGS]
    assert len(set(bits)) == len(bits) and all(b and not b & (b - 1) for b in bits)


def test_facts():
    info = {i[0]: i for i in _C.op_info}
    assert info["uniform_"][3] & _C.OPF_RANDOM and info["uniform_"][5].endswith("i seed, i offset")
    assert info["rgpu::free"][3] & _C.OPF_SESSION and info["rgpu::free"][4] == "session"
    assert info["mm"][3] & _C.OPF_CUBLAS and info["mm"][4] == "dense"
    assert info["hypot"][3] & _C.OPF_FLOATY and info["hypot"][4] == "pointwise"
    assert info["atan2"][3] & _C.OPF_INT_TO_FLOAT and not info["hypot"][3] & _C.OPF_INT_TO_FLOAT
    assert info["sum.dim_IntList"][5] == "ints dims, b keepdim"
    for name, n_in, n_out, flags, family, sig in _C.op_info:
        for ent in filter(None, (x.strip() for x in sig.split(","))):
            assert re.fullmatch(r"[a-z\-|]+\??\s+\w+", ent), (name, ent)
