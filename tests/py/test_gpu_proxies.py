"""tools/bench/gpu_proxies.py's FP64 part: the PTX parser against hand-written
kernels compiled by nvcc (double math counted, float math not, a .func's FP64
charged to the kernel that calls it, once per call site), the "allowed" rule on
demangled names, and the whole tool on one small file of replayer/cuda/.
Needs nvcc (no GPU); the launch part runs in the tool itself, not here."""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(REPO, "tools", "bench"))
import gpu_proxies as gp  # noqa: E402

NVCC = gp.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found ($NVCC, PATH, /usr/local/cuda/bin): "
                                                      "the PTX part cannot be checked")

KERNELS = r"""
__global__ void k_double(double *x, double a) { x[threadIdx.x] = x[threadIdx.x] * a + 1.0; }
__global__ void k_float(float *x, float a) { x[threadIdx.x] = x[threadIdx.x] * a + 1.0f; }
__device__ __noinline__ double sq_plus(double v) { return v * v + 2.0; }
// its only FP64 is inside sq_plus, called twice; its own body converts float <-> double
__global__ void k_calls(float *x) {
    float v = x[threadIdx.x];
    x[threadIdx.x] = (float)sq_plus(v) + (float)sq_plus(v + 1.0f);
}
"""


@pytest.fixture(scope="module")
def hand_ptx(tmp_path_factory):
    d = tmp_path_factory.mktemp("ptx")
    src, ptx = d / "k.cu", d / "k.ptx"
    src.write_text(KERNELS)
    r = subprocess.run([NVCC, "-std=c++17", "-O2", f"-arch={gp.ARCH}", "-ptx", str(src), "-o", str(ptx)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    funcs = gp.parse_ptx(ptx.read_text())
    names = list(funcs)
    return {short: (mangled, funcs[mangled]) for mangled, short in
            zip(names, (gp.short_name(n) for n in gp.demangle(names)))}


@needs_nvcc
def test_double_kernel_counts_fp64_float_kernel_none(hand_ptx):
    _, kd = hand_ptx["k_double"]
    _, kf = hand_ptx["k_float"]
    assert kd["kind"] == "entry" and kd["fp64"] > 0, kd
    assert kf["kind"] == "entry" and kf["fp64"] == 0 and kf["cvt64"] == 0, kf
    assert kf["arith"] > 0, "the float kernel's own arithmetic is counted as arithmetic"


@needs_nvcc
def test_func_fp64_charged_to_its_caller_per_call_site(hand_ptx):
    mangled, own = hand_ptx["k_calls"]
    fname, helper = next((m, f) for short, (m, f) in hand_ptx.items() if short.startswith("sq_plus"))
    assert helper["kind"] == "func" and helper["fp64"] > 0, helper
    assert own["fp64"] == 0, f"k_calls' own body has no FP64: {own}"
    assert own["cvt64"] >= 2, f"k_calls converts float -> double and back: {own}"
    assert own["calls"].count(fname) == 2, own["calls"]
    total = gp.kernel_counts({m: f for m, f in hand_ptx.values()})[mangled]
    assert total["fp64"] == 2 * helper["fp64"], total
    assert fname not in gp.kernel_counts({m: f for m, f in hand_ptx.values()}), "a .func is not a kernel"


def test_classify_opcodes():
    assert gp.classify("mul.rn.f64") == "fp64"
    assert gp.classify("setp.geu.f64") == "fp64"
    assert gp.classify("fma.rn.f32") == "arith"
    assert gp.classify("cvt.rn.f32.f64") == "cvt64"
    assert gp.classify("cvt.rn.f32.s32") is None
    assert gp.classify("ld.global.f64") is None
    assert gp.classify("mov.f64") is None


def test_recursion_and_undefined_callees_add_nothing():
    funcs = {"k": {"kind": "entry", "fp64": 1, "cvt64": 0, "arith": 2, "mem": 2, "mem128": 1, "calls": ["f", "vprintf"]},
             "f": {"kind": "func", "fp64": 3, "cvt64": 1, "arith": 5, "mem": 1, "mem128": 0, "calls": ["f"]}}
    assert gp.kernel_counts(funcs) == {"k": {"fp64": 4, "cvt64": 1, "arith": 7, "mem": 3, "mem128": 1}}


@pytest.mark.parametrize("name, allowed", [
    ("void im2col_kernel<double>(kgeom, long, double const*, double*)", True),
    ("void k<thrust::complex<double> >(int)", True),
    ("void arange_f64_kernel<0>(void*, long long, long long, double, double)", True),
    ("void (anonymous namespace)::pw_kernel<1, true, true>((anonymous namespace)::pw_args)", True),   # OP_CT_F64
    ("void (anonymous namespace)::pw_kernel<0, true, true>((anonymous namespace)::pw_args)", False),  # OP_CT_F32
    ("void cast_kernel<0, 1>(void*, void const*, copy_iter)", True),       # f32 -> f64
    ("void cast_kernel<2, 3>(void*, void const*, copy_iter)", False),      # f16 -> bf16
    ("void (anonymous namespace)::pw_multi_kernel<1>(pw_multi_params)", True),   # OP_CT_F64
    ("void (anonymous namespace)::pw_multi_kernel<0>(pw_multi_params)", False),  # OP_CT_F32
    ("void unscale_kernel<1>(unscale_args)", True),                       # float64 gradients
    ("void unscale_kernel<3>(unscale_args)", False),                      # bfloat16 gradients
    ("void red_kernel<1>(red_args)", False),                               # a reduction kind, not a dtype
    ("void im2col_kernel<float>(kgeom, long, float const*, float*)", False),
    # a double scalar parameter does not make the kernel a float64 one
    ("update_scale_kernel(float*, int*, float const*, double, double, long long)", False),
])
def test_fp64_allowed_rule(name, allowed):
    assert gp.fp64_allowed(name) is allowed


@needs_nvcc
def test_tool_on_one_file(tmp_path):
    out = tmp_path / "p.json"
    rc = gp.main(["--no-launches", "--files", "replayer/cuda/amp.cu", "--json", str(out), "--jobs", "1"])
    assert rc == 0
    rep = json.loads(out.read_text())["ptx"]
    names = {gp.short_name(k["kernel"]): k for k in rep["kernels"]}
    dts = {n: v for n, v in gp._enum_values(os.path.join(REPO, "trace-format", "rgpu_format.h"),
                                             r"RGPU_(F64|F32|F16|BF16)").items()}
    unscale = {f"unscale_kernel<{dts[d]}>" for d in ("RGPU_F64", "RGPU_F32", "RGPU_F16", "RGPU_BF16")}
    assert set(names) == unscale | {"update_scale_kernel"}, names
    for k in names.values():
        assert k["file"] == "amp.cu" and k["regs"] and k["regs"] > 0, k
        assert k["arith"] > 0
    s = rep["summary"]
    assert s["kernels"] == 5 and s["fp64_kernels"] == sum(1 for k in names.values() if k["fp64"])
    assert rep["per_file"]["amp.cu"]["kernels"] == 5
    # the float gradients' instantiations hold no FP64; the float64 one is allowed its own
    f64 = f"unscale_kernel<{dts['RGPU_F64']}>"
    assert names[f64]["allowed"] and names[f64]["fp64"] > 0
    assert all(names[n]["fp64"] == 0 and names[n]["cvt64"] == 0 for n in unscale - {f64}), names


def test_without_nvcc_the_ptx_part_is_skipped(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gp, "find_nvcc", lambda: None)
    out = tmp_path / "p.json"
    assert gp.main(["--no-launches", "--json", str(out)]) == 0
    assert "nvcc not found" in capsys.readouterr().out
    assert json.loads(out.read_text()) == {"ptx": {"skipped": "nvcc not found"}}


@needs_nvcc
@pytest.mark.parametrize("cu, kernels", [
    ("random.cu", ("k_dropout", "k_dropout_bw")),      # keep test in integers, bool masks
    ("rnn.cu", ("rnn_cell_kernel",)),                   # op/rnn.h's _f cell functions
    ("conv.cu", ("bias_grad_kernel",)),                 # the bias gradient's sums
])
def test_float_instantiations_hold_no_fp64(cu, kernels):
    """These kernels come in a float instantiation (float32/float16/bfloat16
    data, ATen's opmath) and a double one (float64): the float one holds no
    FP64 instruction and no f64 conversion, the double one does compute in
    double."""
    rep = gp.ptx_report([os.path.join("replayer", "cuda", cu)], 1, NVCC, REPO)
    assert not rep["errors"], rep["errors"]
    got = {gp.short_name(k["kernel"]).split("::")[-1]: k for k in rep["kernels"]}
    for base in kernels:
        f, d = got.get(f"{base}<float>"), got.get(f"{base}<double>")
        assert f and d, (base, sorted(got))
        assert f["fp64"] == 0 and f["cvt64"] == 0 and not f["allowed"], (base, f)
        assert d["fp64"] > 0 and d["allowed"], (base, d)


def test_mem_width():
    assert gp.mem_width("ld.global.nc.v4.u32") == (1, 1)
    assert gp.mem_width("st.v4.u32") == (1, 1)            # generic address space
    assert gp.mem_width("ld.global.v2.u64") == (1, 1)
    assert gp.mem_width("ld.global.u16") == (1, 0)
    assert gp.mem_width("st.global.f32") == (1, 0)
    assert gp.mem_width("ld.global.v4.u16") == (1, 0)     # 8 bytes
    assert gp.mem_width("ld.param.v4.u32") == (0, 0)
    assert gp.mem_width("st.local.v4.u32") == (0, 0)
    assert gp.mem_width("ld.shared.v2.f64") == (0, 0)
    assert gp.mem_width("add.f32") == (0, 0)


@pytest.fixture(scope="module")
def opmath_rep():
    files = [os.path.join("replayer", "cuda", f) for f in ("softmax.cu", "norm.cu", "reduce.cu", "loss.cu",
                                                            "pointwise.cu")]
    rep = gp.ptx_report(files, 2, NVCC, REPO)
    assert not rep["errors"], rep["errors"]
    return rep


@needs_nvcc
def test_contiguous_pointwise_kernels_move_16_bytes(opmath_rep):
    """pointwise.cu's contiguous kernels (pw_vec_kernel per dtype and hot op,
    pw_bvec_kernel for the row-broadcast arithmetic, pw_vec_cast_kernel per
    pair of float32/float16/bfloat16): every one loads
    and stores 16 bytes at a time, and holds no FP64 and no f64 conversion
    (the generic f32 kernel pw_kernel<0, ...> loads element by element)."""
    ks = [k for k in opmath_rep["kernels"] if k["file"] == "pointwise.cu"]
    vec = [k for k in ks if "pw_vec_kernel<" in k["kernel"] or "pw_bvec_kernel<" in k["kernel"]]
    cast = [k for k in ks if "pw_vec_cast_kernel<" in k["kernel"]]
    assert len(vec) >= 3 * 24 and len(cast) == 6, [k["kernel"] for k in ks]
    for k in vec + cast:
        assert k["mem128"] >= 2 and k["fp64"] == 0 and k["cvt64"] == 0, k
    generic = [k for k in ks if "pw_kernel<0, true, false>" in k["kernel"]]
    assert len(generic) == 1 and generic[0]["mem128"] == 0, generic


@needs_nvcc
def test_opmath_families_run_no_fp64_outside_float64(opmath_rep):
    """Issue 25's ATen opmath, held: in the row kernels (softmax.cu, norm.cu),
    the reduction engine and cumsum (reduce.cu) and nll_loss (loss.cu), every
    kernel that is not the float64 instantiation has no FP64 instruction and no
    f64 conversion (ctc_loss, still in double, is the known exception); the f32
    pointwise kernel of the training ops keeps at most the few FP64
    instructions of libdevice's sinf/cosf large-argument reduction and of a
    float64 condition's load (it held 645 when it evaluated POW_SCALAR,
    digamma, polygamma and erfinv in double)."""
    rep = opmath_rep
    by_file = {}
    for k in rep["kernels"]:
        by_file.setdefault(k["file"], []).append(k)
    for f in ("softmax.cu", "norm.cu", "reduce.cu", "loss.cu"):
        ks = by_file[f]
        floats = [k for k in ks if "double" not in k["kernel"] and not k["kernel"].startswith("ctc_")]
        assert len(floats) >= {"softmax.cu": 4, "norm.cu": 6, "reduce.cu": 37, "loss.cu": 4}[f], (f, len(floats))
        bad = [(k["kernel"], k["fp64"], k["cvt64"]) for k in floats if k["fp64"] or k["cvt64"]]
        assert not bad, (f, bad)
        # and the float64 instantiations do compute in double
        assert any(k["fp64"] > 0 for k in ks if "double" in k["kernel"]), f
    train = [k for k in by_file["pointwise.cu"]
             if "pw_kernel<0, true, false>" in k["kernel"] or "pw_kernel<0, false, false>" in k["kernel"]]
    assert len(train) == 2, [k["kernel"] for k in by_file["pointwise.cu"]]
    for k in train:
        assert k["fp64"] <= 8, (k["kernel"], k["fp64"])
