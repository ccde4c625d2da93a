"""The contiguous pointwise kernels of the cuda backend (replayer/cuda/pointwise.cu
pw_vec_kernel: 16-byte loads and stores, the dtype and the op fixed at compile
time). Run by tests/cudaemu/run-tests.sh on the cuda backend (cudaemu).

Every op of PW_VEC_OPS, in float32, float16 and bfloat16, out-of-place,
in-place and out=, and the casts among the three (pw_vec_cast_kernel), on
sizes around the vector width (the tail elements), foreach ops (held, one
pw_multi_kernel launch), row broadcasting (pw_bvec_kernel: a bias over the
rows, a per-row scale, an outer product),
with scalar operands, NaN/inf/-0 among the values, and on views the fast path
must refuse (a storage offset that breaks the 16-byte alignment, a strided
view, mixed dtypes):
  * bitwise equal to the generic kernel (RGPU_CUDA_PW_VEC=0), element for
    element the same code;
  * equal to PyTorch CPU within the dtype's rounding;
  * cudaemu's launch counts (CUDAEMU_STATS) show the contiguous kernel ran
    for the eligible cases and never with RGPU_CUDA_PW_VEC=0."""
import os
import textwrap

import pytest
import torch

import rgpu  # noqa: F401  (registers the device)
from emu_child import run_counted

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_BACKEND") != "cuda",
                                reason="the contiguous kernels are the cuda backend's (run-tests.sh)")

CHILD = textwrap.dedent("""
    import sys, torch, rgpu
    import torch.nn.functional as F
    out = sys.argv[1]
    g = torch.Generator().manual_seed(0)

    def vals(n, dt, pos=False):
        x = torch.randn(n, generator=g) * 3
        if n > 5:
            x[1], x[3], x[5] = float("nan"), float("inf"), -0.0
        if pos:
            x = x.abs() + 0.25
        return x.to(dt)

    def grad_of(fn, x, dev):
        a = x.detach().clone().to(dev).requires_grad_()
        y = fn(a)
        y.backward(torch.ones_like(y))
        return a.grad

    UNARY = {
        "neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
        "reciprocal": torch.reciprocal, "relu": torch.relu, "gelu": F.gelu,
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "tanh": torch.tanh,
        "sigmoid": torch.sigmoid, "clamp": lambda x: x.clamp(-1.5, 2.0), "clamp_min": lambda x: x.clamp(min=0.5),
        "mul_scalar": lambda x: x * 2.5, "add_scalar_alpha": lambda x: torch.add(x, 3.0, alpha=-0.5),
        "rsub": lambda x: 1.0 - x, "div_scalar": lambda x: x / 3.0,
    }
    BINARY = {
        "add": torch.add, "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5), "sub": torch.sub,
        "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
        "clamp_t": lambda a, b: a.clamp(min=b), "lerp_s": lambda a, b: torch.lerp(a, b, 0.3),
    }
    TERNARY = {
        "addcmul": lambda a, b, c: torch.addcmul(a, b, c, value=0.5),
        "addcdiv": lambda a, b, c: torch.addcdiv(a, b, c.abs() + 0.5, value=-2.0),
        "lerp_t": lambda a, b, c: torch.lerp(a, b, c),
    }
    GRADS = {"relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
             "silu": F.silu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}
    INPLACE = {
        "add_": lambda a, b: a.add_(b), "mul_": lambda a, b: a.mul_(b), "sub_alpha_": lambda a, b: a.sub_(b, alpha=0.5),
        "div_": lambda a, b: a.div_(b), "mul_scalar_": lambda a, b: a.mul_(0.9), "lerp_": lambda a, b: a.lerp_(b, 0.1),
        "addcmul_": lambda a, b: a.addcmul_(b, b, value=0.1), "maximum_out": lambda a, b: torch.maximum(a, b, out=a),
        "add_out": lambda a, b: torch.add(a, b, out=a), "relu_": lambda a, b: a.relu_(),
    }
    res = {}
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for n in (1, 3, 4, 7, 8, 9, 17, 64, 1001):
            name = f"{str(dt)[6:]}-{n}"
            xs = [vals(n, dt), vals(n, dt), vals(n, dt, pos=True)]
            for k, fn in UNARY.items():
                res[f"{k}-{name}"] = (fn(xs[0].to("rgpu")).cpu(), fn(xs[0].float()).to(dt))
            for k, fn in BINARY.items():
                res[f"{k}-{name}"] = (fn(xs[0].to("rgpu"), xs[1].to("rgpu")).cpu(), fn(xs[0].float(), xs[1].float()).to(dt))
            for k, fn in TERNARY.items():
                r = [x.to("rgpu") for x in xs]
                res[f"{k}-{name}"] = (fn(*r).cpu(), fn(*[x.float() for x in xs]).to(dt))
            for k, fn in GRADS.items():
                res[f"{k}_grad-{name}"] = (grad_of(fn, xs[0], "rgpu").cpu(), grad_of(fn, xs[0].float(), "cpu").to(dt))
            for k, fn in INPLACE.items():
                a, b = xs[0].to("rgpu"), xs[1].to("rgpu")
                fn(a, b)
                c = xs[0].float().clone()
                fn(c, xs[1].float())
                res[f"{k}-{name}"] = (a.cpu(), c.to(dt))
            for dt2 in (torch.float32, torch.float16, torch.bfloat16):
                if dt2 != dt:   # the held casts (pw_vec_cast_kernel)
                    res[f"cast_{str(dt2)[6:]}-{name}"] = (xs[0].to("rgpu").to(dt2).cpu(), xs[0].to(dt2))
            # views the contiguous kernel refuses (an offset of 1 element, a stride of 2) and mixed dtypes
            big = vals(2 * n + 2, dt)
            r = big.to("rgpu")
            res[f"offset-{name}"] = ((r[1:n + 1] + r[2:n + 2]).cpu(), (big[1:n + 1].float() + big[2:n + 2].float()).to(dt))
            res[f"strided-{name}"] = ((r[::2] * 2.0).cpu(), (big[::2].float() * 2.0).to(dt))
            res[f"mixed-{name}"] = ((xs[0].to("rgpu") + xs[1].float().to("rgpu")).cpu(), xs[0].float() + xs[1].float())
    # row broadcasting (pw_bvec_kernel): x[R, C] op b[C], op s[R, 1], outer products, 3-d x + bias
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for R, C in ((1, 8), (3, 16), (5, 24), (4, 64), (3, 7), (2, 12)):
            name = f"{str(dt)[6:]}-{R}x{C}"
            x, b, sc = vals(R * C, dt).view(R, C), vals(C, dt), vals(R, dt, pos=True).view(R, 1)
            X, B, S = x.to("rgpu"), b.to("rgpu"), sc.to("rgpu")
            xf, bf, sf = x.float(), b.float(), sc.float()
            res[f"bc_add-{name}"] = ((X + B).cpu(), (xf + bf).to(dt))
            res[f"bc_rsub-{name}"] = ((B - X).cpu(), (bf - xf).to(dt))
            res[f"bc_mul_alpha-{name}"] = (torch.add(X, B, alpha=-1.5).cpu(), torch.add(xf, bf, alpha=-1.5).to(dt))
            res[f"bc_div_col-{name}"] = ((X / S).cpu(), (xf / sf).to(dt))
            res[f"bc_outer-{name}"] = ((S * B).cpu(), (sf * bf).to(dt))
            Y = X.clone()
            Y.mul_(B)
            res[f"bc_mul_-{name}"] = (Y.cpu(), (xf * bf).to(dt))
            x3 = vals(2 * R * C, dt).view(2, R, C)
            res[f"bc_3d-{name}"] = ((x3.to("rgpu") + B).cpu(), (x3.float() + bf).to(dt))
    # foreach ops: held records over disjoint tensors, one pw_multi_kernel launch (float32 records
    # contiguous and aligned take its 16-byte loop, any op; the others its element loop)
    for dt in (torch.float32, torch.bfloat16):
        ns = (1, 5, 8, 13, 64, 1001, 3)
        ps, gs, ms = ([vals(n, dt) for n in ns] for _ in range(3))
        cpu = [[x.clone() for x in l] for l in (ps, gs, ms)]
        dev = [[x.to("rgpu") for x in l] for l in (ps, gs, ms)]
        for p, gr, m in (cpu, dev):
            torch._foreach_lerp_(m, gr, 0.1)
            torch._foreach_addcmul_(p, gr, m, value=-0.01)
            torch._foreach_maximum_(m, gr)
            torch._foreach_mul_(p, 0.99)
            torch._foreach_add_(p, torch._foreach_sqrt(torch._foreach_abs(m)), alpha=0.5)
            torch._foreach_clamp_min_(gr, -1.0)
        for k, (a, c) in enumerate(zip(dev[0] + dev[1] + dev[2], cpu[0] + cpu[1] + cpu[2])):
            res[f"foreach-{str(dt)[6:]}-{k}"] = (a.cpu(), c)
    torch.save(res, out)
""")


def run_child(tmp_path, vec):
    stats, res = run_counted(tmp_path, vec, CHILD, env={"RGPU_CUDA_PW_VEC": vec}, timeout=900)
    kernels = {}
    for d in stats:
        for k in d["kernels"]:
            kernels[k["name"]] = kernels.get(k["name"], 0) + k["launches"]
    return kernels, res


def vec_launches(kernels, name="pw_vec_kernel"):
    return sum(v for k, v in kernels.items() if name in k)


def test_contiguous_kernels_give_the_generic_kernels_bits(tmp_path):
    kv, rv = run_child(tmp_path, "1")
    kg, rg = run_child(tmp_path, "0")
    assert vec_launches(kg) == 0, kg
    # 3 dtypes x 9 sizes x (18 unary + 8 binary + 3 ternary + 6 grads + 10 in-place) records at least
    assert vec_launches(kv) >= 3 * 9 * 45, {k: v for k, v in kv.items() if "pw_" in k}
    assert vec_launches(kg, "pw_vec_cast_kernel") == 0 and vec_launches(kg, "pw_bvec_kernel") == 0
    # 3 dtypes x 4 two-dim shapes with C a multiple of the width x 7 records: 84, less the few
    # whose small operands did not land 16-byte aligned
    assert vec_launches(kv, "pw_bvec_kernel") >= 60, {k: v for k, v in kv.items() if "pw_" in k}
    # 6 pairs x the 8 sizes > 1 (a one-element upload need not land 16-byte aligned)
    assert vec_launches(kv, "pw_vec_cast_kernel") >= 6 * 8, {k: v for k, v in kv.items() if "pw_" in k}
    assert rv.keys() == rg.keys()
    for key in rv:
        a, cpu = rv[key]
        b, _ = rg[key]
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert torch.equal(a.view(torch.uint8) if a.dtype != torch.bool else a,
                           b.view(torch.uint8) if b.dtype != torch.bool else b), key   # bitwise, NaN payloads too
        tol = {torch.float32: (1.3e-6, 1e-5), torch.float16: (1e-3, 2e-3), torch.bfloat16: (8e-3, 1.6e-2)}[cpu.dtype]
        if key.startswith("foreach-bfloat16"):   # six ops rounded to bfloat16 in turn: a few ulps apart
            tol = (2.4e-2, 3e-2)
        # where PyTorch CPU's value is finite (its vectorised gelu gives NaN at inf, PyTorch CUDA and the
        # cpu backend inf: the non-finite lanes are held to the generic kernel's bits above)
        m = torch.isfinite(cpu)
        torch.testing.assert_close(a.to(cpu.dtype)[m], cpu[m], rtol=tol[0], atol=tol[1],
                                   msg=lambda m, key=key: f"{key}: {m}")
