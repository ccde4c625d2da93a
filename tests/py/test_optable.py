"""The op table (rgpu/opmap.py) and the per-op facts (rgpu/opinfo.py) against
rgpu._C and trace-format/ops.def: every entry records an op that exists, no
ATen overload is handled in two places, and the facts Python keeps agree
with ops.def."""
import glob
import os
import re

import pytest

import rgpu
from rgpu import _C, dispatch, opinfo, opmap

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def _ops_def():
    """{op number: (name, n_in, n_out)} from _C.op_info (the compiled ops.def)."""
    return {i: (t[0], t[1], t[2]) for i, t in enumerate(opinfo.INFO)}


def test_op_info_is_ops_def():
    path = os.path.join(ROOT, "trace-format", "ops.def")
    rows = re.findall(r'^X\(\s*(\w+)\s*,\s*"([^"]+)"\s*,\s*(\d+)\s*,\s*(\d+)', open(path).read(), re.M)
    assert len(rows) == _C.OP_COUNT == len(opinfo.INFO)
    for e, n, i, o in rows:
        assert opinfo.INFO[getattr(_C, "OP_" + e)][:3] == (n, int(i), int(o))


def test_every_entry_records_an_op_of_ops_def():
    for f, e in opmap.TABLE.items():
        if e.kind == "handler":
            assert e.op is None and callable(e.mapper), f
            continue
        assert e.kind in ("one", "multi"), f
        assert 0 <= e.op < _C.OP_COUNT and _C.op_names[e.op], f


def test_every_op_name_the_package_uses_exists():
    used = set()
    for path in glob.glob(os.path.join(os.path.dirname(rgpu.__file__), "*.py")):
        used |= set(re.findall(r"\bOP_([A-Z0-9_]+)\b", open(path).read()))
    used.discard("COUNT")
    missing = sorted(n for n in used if not isinstance(getattr(_C, "OP_" + n, None), int))
    assert not missing, missing
    # the compute classes the mappers read: integer inputs of exp, atan2 ...
    # compute in float, those of add or hypot don't
    assert {_C.OP_EXP, _C.OP_ATAN2, _C.OP_SIGMOID} <= opinfo.FLOAT_COMPUTE
    assert not {_C.OP_ADD_TENSOR, _C.OP_HYPOT, _C.OP_NEG} & opinfo.FLOAT_COMPUTE


def test_no_overload_is_handled_twice():
    table, special, registered = set(opmap.TABLE), set(dispatch._SPECIAL), set(dispatch._REGISTERED)
    assert not table & special
    assert not table & registered
    assert not special & registered


def test_multi_output_entries_are_the_ops_with_several_outputs():
    ops = _ops_def()
    assert {o for o in ops if opinfo.multi_out(o)} == {o for o, (_, _, n_out) in ops.items() if n_out > 1}
    for f, e in opmap.TABLE.items():
        if e.kind != "handler":
            assert (e.kind == "multi") == (ops[e.op][2] > 1), f


def test_op_numbers_follow_ops_def():
    for o, (name, _, _) in _ops_def().items():
        assert _C.op_names[o] == name
