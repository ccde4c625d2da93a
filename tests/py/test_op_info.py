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


def test_supported_ops():
    """rgpu.supported_ops() names how each ATen op runs; kernels name an ops.def op."""
    import torch
    import rgpu
    s = rgpu.supported_ops()
    assert s["aten::add.Tensor"] == "kernel add.Tensor"
    assert s["aten::mm.default"].startswith("kernel ")
    assert s["aten::transpose.int"] == "view"
    assert s["aten::_to_copy.default"] == "handler"
    assert s["aten::addmm.default"].split()[0] in ("kernel", "decomposition")
    assert "aten::quantize_per_tensor.default" not in s     # quantized tensors are outside rgpu
    names = set(_C.op_names)
    kernels = {v.split(" ", 1)[1] for v in s.values() if v.startswith("kernel ")}
    assert kernels <= names
    # every func the table knows is listed, and nothing listed is refused at dispatch
    from rgpu import dispatch, opmap
    for func in opmap.TABLE:
        assert dispatch.supports(func), func
    for name in list(s)[::50]:
        ns, rest = name.split("::")
        base, ov = rest.split(".")
        assert dispatch.supports(getattr(getattr(getattr(torch.ops, ns), base), ov)), name


def test_supported_doc_is_current():
    """torchhook/SUPPORTED.md is what tools/gen_supported.py writes (on the torch it names)."""
    import subprocess
    import torch
    doc = open(os.path.join(ROOT, "torchhook", "SUPPORTED.md")).read()
    made_with = re.search(r"with torch (\S+);", doc).group(1)
    if made_with != torch.__version__.split("+")[0]:
        import pytest
        pytest.skip(f"SUPPORTED.md was made with torch {made_with}; decompositions differ by version")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_supported.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
