"""Every compute op of trace-format/ops.def against PyTorch CPU.

CASES is a table of named cases; each runs one torch expression on CPU tensors
and on rgpu copies laid out the same way (contiguous, transposed, strided), for
every dtype the op takes, and compares dtype, shape and values at per-dtype
tolerances. test_every_op_has_a_case records which ops.def ops the cases emit
and fails when an op has none. Autograd through a few ops closes the file."""
import math

import pytest
import torch
import torch.nn.functional as F

import rgpu
from rgpu import _C

aten = torch.ops.aten
DEV = "rgpu"
F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
I64, I32, I16, I8, U8, BOOL = torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool
FLOATS = [F32, F64, F16, BF16]
INTS = [I64, I32, I16, I8, U8]
NUMS = FLOATS + INTS
ALL = NUMS + [BOOL]
C64, C128 = torch.complex64, torch.complex128
CPLX = [C64, C128]

TOL = {F32: (1.3e-6, 1e-5), F64: (1e-7, 1e-7), F16: (1e-3, 1e-3), BF16: (1.6e-2, 1e-2),
       C64: (1.3e-6, 1e-5), C128: (1e-7, 1e-7)}
LOOSE = {F32: (1e-5, 1e-4), F64: (1e-10, 1e-10), F16: (1e-2, 1e-2), BF16: (5e-2, 5e-2),
         C64: (1e-5, 1e-4), C128: (1e-10, 1e-10)}


# --- inputs -------------------------------------------------------------------------

def sample(shape, dtype, seed, dom="normal"):
    g = torch.Generator().manual_seed(seed)
    if dtype is BOOL:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        r = sample(shape, torch.float64, seed, dom)
        i = sample(shape, torch.float64, seed + 1000, "normal" if dom == "pos" else dom)
        return torch.complex(r, i).to(dtype)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=F64)
        if dom == "pos":
            x = x.abs() + 0.1
        elif dom == "unit":
            x = x.clamp(-0.9, 0.9)
        elif dom == "nonzero":
            x = x + torch.where(x >= 0, 0.5, -0.5)
        else:
            x = x * 3
        return x.to(dtype)
    lo, hi = (1, 20) if dom in ("pos", "nonzero") else (-20, 20)
    if dtype is U8:
        lo = max(lo, 0)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


class Idx:
    """An integer index tensor input: values in [0, bound), or [-bound, bound) when neg."""
    def __init__(self, shape, bound, dtype=I64, neg=False):
        self.shape, self.bound, self.dtype, self.neg = shape, bound, dtype, neg

    def make(self, seed):
        g = torch.Generator().manual_seed(seed)
        lo = -self.bound if self.neg else 0
        return torch.randint(lo, self.bound, self.shape, generator=g).to(self.dtype)


class Fixed:
    """An input given as a CPU tensor factory of the dtype (masks, weights ...)."""
    def __init__(self, fn):
        self.fn = fn


def _layout_view(shape, layout):
    """(base shape, view fn): the view of a contiguous base that has `shape`."""
    nd = len(shape)
    if layout == "T" and nd >= 2:
        base = list(shape)
        base[-1], base[-2] = base[-2], base[-1]
        return tuple(base), lambda t: t.transpose(-1, -2)
    if layout == "strided" and nd >= 1 and shape[-1] > 0:
        base = list(shape)
        base[-1] *= 2
        return tuple(base), lambda t: t[..., ::2]
    return tuple(shape), lambda t: t


def make_inputs(spec, dtype, layout, seed):
    """(cpu inputs, rgpu inputs) from a case's input spec: shapes (tensors of the
    case dtype), (shape, dtype) or (shape, dtype, domain), Idx, Fixed, or other
    values passed as they are."""
    cpu, rg = [], []
    for i, s in enumerate(spec):
        if isinstance(s, Idx):
            t = s.make(seed + i)
            cpu.append(t)
            rg.append(t.to(DEV))
        elif isinstance(s, Fixed):
            t = s.fn(dtype)
            cpu.append(t)
            rg.append(t.to(DEV))
        elif isinstance(s, tuple) and (len(s) == 0 or isinstance(s[0], int)):
            base, view = _layout_view(s, layout)
            b = sample(base, dtype, seed + i)
            cpu.append(view(b))
            rg.append(view(b.to(DEV)))
        elif isinstance(s, tuple) and len(s) in (2, 3) and isinstance(s[1], torch.dtype):
            base, view = _layout_view(s[0], layout)
            b = sample(base, s[1], seed + i, s[2] if len(s) == 3 else "normal")
            cpu.append(view(b))
            rg.append(view(b.to(DEV)))
        elif isinstance(s, tuple) and len(s) == 2 and isinstance(s[1], str):
            base, view = _layout_view(s[0], layout)
            b = sample(base, dtype, seed + i, s[1])
            cpu.append(view(b))
            rg.append(view(b.to(DEV)))
        else:
            cpu.append(s)
            rg.append(s)
    return cpu, rg


# --- the cases ----------------------------------------------------------------------

class Case:
    def __init__(self, name, fn, inputs, dtypes, tol=TOL, layouts=("contig", "T", "strided"),
                 compare=None):
        self.name, self.fn, self.inputs, self.dtypes = name, fn, inputs, dtypes
        self.tol, self.layouts, self.compare = tol, layouts, compare


CASES = []


def case(name, fn, inputs, dtypes, **kw):
    """inputs: a list of alternative input specs; the first also runs transposed/strided."""
    CASES.append(Case(name, fn, inputs, dtypes, **kw))


def shp(spec):
    parts = []
    for s in spec:
        if isinstance(s, Idx):
            parts.append("i" + str(tuple(s.shape)).replace(" ", ""))
        elif isinstance(s, tuple) and (len(s) == 0 or isinstance(s[0], int)):
            parts.append(str(s).replace(" ", ""))
        elif isinstance(s, tuple) and isinstance(s[0], tuple):
            parts.append(str(s[0]).replace(" ", ""))
        elif isinstance(s, Fixed):
            parts.append("f")
        else:
            parts.append(repr(s).replace(" ", ""))
    return "x".join(parts)


U = [((3, 5),), ((2, 3, 4),), ((0, 3),), ((),)]
UPOS = [(((3, 5), "pos"),), (((2, 3, 4), "pos"),), (((0, 3), "pos"),)]
FLOAT_UNARY = FLOATS + [I64, I32, BOOL]        # ints promote to the default float dtype

for name in ("neg", "abs", "floor", "ceil", "round", "trunc", "sign"):
    case(name, getattr(torch, name), U, NUMS)
case("relu", torch.relu, U, NUMS)
for name in ("exp", "expm1", "tanh", "sigmoid", "sin", "cos", "erf", "reciprocal"):
    case(name, getattr(torch, name), U, FLOAT_UNARY)
for name in ("log", "log1p", "sqrt", "rsqrt"):
    case(name, getattr(torch, name), UPOS, FLOAT_UNARY)
case("silu", F.silu, U, FLOATS)
case("gelu", F.gelu, U, FLOATS)
case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), U, FLOATS)
case("logical_not", torch.logical_not, U, ALL)
case("bitwise_not", torch.bitwise_not, U, INTS + [BOOL])
case("isnan", lambda x: torch.isnan(torch.where(x > 1, x * float("nan"), x)), U, FLOATS)
case("isnan_int", torch.isnan, U[:1], INTS + [BOOL])
case("unary_inplace", lambda x: x.clone().exp_().neg_().abs_(), U[:2], FLOATS)
case("unary_out", lambda x: torch.sigmoid(x, out=torch.empty_like(x)), U[:2], FLOATS)
case("unary_out_cast", lambda x: torch.exp(x, out=torch.empty(x.shape, dtype=F64, device=x.device)), U[:1], [F32, F16, I64])
case("relu_inplace", lambda x: x.clone().relu_(), U[:2], FLOATS + [I64])
case("silu_inplace", lambda x: F.silu(x.clone(), inplace=True), U[:1], FLOATS)

B = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((0, 4), (4,)), ((3, 4), ())]
BNZ = [((3, 4), ((3, 4), "nonzero")), ((2, 3, 4), ((4,), "nonzero")), ((0, 4), ((4,), "nonzero"))]
for name in ("maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"):
    case(name, getattr(torch, name), B, NUMS)
for name in ("eq", "ne", "lt", "le", "gt", "ge"):
    case(name + "_scalar", lambda x, s, f=getattr(torch, name): f(x, s), [((3, 4), 1), ((3, 4), 0.5)], NUMS)
case("eq_bool", torch.eq, B[:2], [BOOL])
for name in ("logical_and", "logical_or", "logical_xor"):
    case(name, getattr(torch, name), B, ALL)
for name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    case(name, getattr(torch, name), B, INTS + [BOOL])
    case(name + "_scalar", lambda x, f=getattr(torch, name): f(x, 6), [((3, 4),)], INTS)
    case(name + "_scalar_tensor", lambda x, f=getattr(torch, name): f(5, x), [((3, 4),)], INTS)
case("remainder", torch.remainder, BNZ, NUMS)
case("remainder_scalar", lambda x: torch.remainder(x, 3), U[:2], NUMS)
case("remainder_scalar_tensor", lambda x: torch.remainder(7, x), [(((3, 4), "nonzero"),)], NUMS)
case("fmod", torch.fmod, BNZ, NUMS)
case("fmod_scalar", lambda x: torch.fmod(x, -2.5), U[:2], FLOATS)
case("atan2", torch.atan2, B, FLOATS + [I64])
case("hypot", torch.hypot, B, FLOATS)
BPOS = [((3, 4), ((3, 4), "pos")), ((2, 3, 4), ((4,), "pos")), ((0, 4), ((4,), "pos")), ((3, 4), ((), "pos"))]
case("xlogy", lambda a, b: torch.xlogy(torch.relu(a), b), BPOS, FLOATS + [I64])   # relu: x == 0 half the time
case("xlogy_special", torch.xlogy,
     [(Fixed(lambda dt: torch.tensor([0.0, 0.0, 0.0, 1.0, 2.0, -1.0, 0.0], dtype=dt)),
       Fixed(lambda dt: torch.tensor([math.nan, 0.0, math.inf, 0.0, -1.0, 3.0, 2.0], dtype=dt)))], FLOATS)
case("xlogy_scalar_self", lambda b: torch.xlogy(2.0, b), UPOS, FLOATS)
case("xlogy_scalar_other", lambda a: torch.xlogy(torch.relu(a), 3.0), U[:2], FLOATS)
case("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), BNZ, NUMS)
case("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), BNZ, NUMS)
case("div_floor_scalar", lambda a: torch.div(a, -3, rounding_mode="floor"), U[:2], NUMS)
case("floor_divide", torch.floor_divide, BNZ, NUMS)
case("div_mode_inplace", lambda a, b: a.clone().div_(b, rounding_mode="trunc"), BNZ[:1], FLOATS + [I64])
case("pow", lambda a, b: torch.pow(a.abs(), b), [(((3, 4), "unit"), ((3, 4), "unit")),
                                                   (((2, 3, 4), "unit"), ((4,), "unit"))], FLOATS)
case("pow_int", lambda a, b: torch.pow(a, b.abs() % 4), B[:2], INTS)
case("pow_scalar", lambda a: a ** 2, U, NUMS)
case("pow_scalar_float", lambda a: a.abs() ** 0.5, U[:2], FLOATS + [I64])
case("pow_scalar_base", lambda a: torch.pow(2, a.clamp(-3, 3)), U[:2], FLOATS + [I64])
case("pow_inplace", lambda a: a.clone().pow_(3), U[:1], FLOATS)
case("binary_out", lambda a, b: torch.maximum(a, b, out=torch.empty(0, dtype=a.dtype, device=a.device)), B[:2], [F32, I32])
case("mixed_dtypes", lambda a, b: torch.maximum(a, b.to(I64)), B[:2], FLOATS)
case("cmp_mixed", lambda a, b: torch.lt(a, b.to(F64)), B[:2], [F16, I32])
case("cpu_scalar_tensor", lambda a: torch.maximum(a, torch.tensor(0.5, dtype=F64)), U[:2], [F32, I64])
case("compare_inplace", lambda a, b: a.clone().ge_(b), B[:2], [F32, I64])
case("compare_out", lambda a, b: torch.ne(a, b, out=torch.empty(a.shape, dtype=BOOL, device=a.device)), B[:1], [F32])
case("logical_out_float", lambda a, b: torch.logical_and(a, b, out=torch.empty(a.shape, dtype=F32, device=a.device)),
     B[:1], [F32, I64])

W = [(Fixed(lambda d: sample((3, 4), BOOL, 7)), (3, 4), (3, 4)),
     (Fixed(lambda d: sample((2, 1, 4), BOOL, 8)), (3, 1), (4,)),
     (Fixed(lambda d: sample((0, 4), BOOL, 9)), (0, 4), (4,))]
case("where", torch.where, W, ALL)
case("where_scalar_other", lambda c, a: torch.where(c, a, 2), [W[0][:2]], NUMS)
case("where_scalar_self", lambda c, a: torch.where(c, 0.5, a), [W[0][:2]], FLOATS + [I64])
case("where_scalars", lambda c: torch.where(c, 1.5, -2.0), [W[0][:1]], [F32])
case("where_mixed", lambda c, a, b: torch.where(c, a, b.to(I32)), W[:2], FLOATS + [I64])
case("masked_fill", lambda a, c: a.masked_fill(c, -1.5), [((3, 4), Fixed(lambda d: sample((3, 4), BOOL, 7))),
                                                          ((2, 3, 4), Fixed(lambda d: sample((3, 1), BOOL, 8)))],
     FLOATS + [I64, BOOL])
case("masked_fill_tensor", lambda a, c: a.clone().masked_fill_(c, torch.tensor(3)),
     [((3, 4), Fixed(lambda d: sample((3, 4), BOOL, 7)))], FLOATS + [I64])
case("clamp", lambda x: torch.clamp(x, -1, 2), U, NUMS)
case("clamp_float_bounds", lambda x: torch.clamp(x, -0.5, 1.5), U[:2], FLOATS + [I64])
case("clamp_min", lambda x: torch.clamp(x, min=0.25), U[:2], FLOATS)
case("clamp_max", lambda x: x.clamp_max(1), U[:2], NUMS)
case("clamp_min_", lambda x: x.clone().clamp_min_(0), U[:2], NUMS)
case("clamp_tensor", lambda x, lo, hi: torch.clamp(x, lo, hi - 1),
     [((3, 4), (3, 4), (4,)), ((2, 3, 4), (1, 4), ())], FLOATS + [I64])
case("clamp_tensor_min", lambda x, lo: torch.clamp(x, min=lo), B[:2], FLOATS + [I32])
case("clamp_tensor_max", lambda x, hi: x.clamp_max(hi), B[:2], FLOATS)
case("lerp", lambda a, b: torch.lerp(a, b, 0.3), B[:4], FLOATS)
case("lerp_tensor", torch.lerp, [((3, 4), (3, 4), (3, 4)), ((2, 3, 4), (4,), (3, 1))], FLOATS)
case("lerp_", lambda a, b: a.clone().lerp_(b, 0.75), B[:2], FLOATS)
case("addcmul", lambda a, b, c: torch.addcmul(a, b, c, value=0.5), [((3, 4), (3, 4), (3, 4)),
                                                                     ((2, 3, 4), (4,), (3, 1))], FLOATS + [I64])
case("addcmul_int", lambda a, b, c: torch.addcmul(a, b, c, value=3), [((3, 4), (3, 4), (3, 4))], INTS)
case("addcdiv", lambda a, b, c: torch.addcdiv(a, b, c, value=-2),
     [((3, 4), (3, 4), ((3, 4), "nonzero")), ((2, 3, 4), (4,), ((3, 1), "nonzero"))], FLOATS)
case("addcmul_", lambda a, b, c: a.clone().addcmul_(b, c, value=2), [((3, 4), (3, 4), (3, 4))], FLOATS)
case("addcdiv_", lambda a, b, c: a.clone().addcdiv_(b, c), [((3, 4), (3, 4), ((3, 4), "pos"))], FLOATS)

G2 = [((3, 5), (3, 5)), ((2, 3, 4), (2, 3, 4)), ((0, 3), (0, 3))]
case("threshold_backward", lambda g, x: aten.threshold_backward(g, x, 0.5), G2, FLOATS + [I64])
case("gelu_backward", lambda g, x: aten.gelu_backward(g, x), G2, FLOATS)
case("gelu_backward_tanh", lambda g, x: aten.gelu_backward(g, x, approximate="tanh"), G2, FLOATS)
def _below_autograd(fn):
    """silu_backward has a CompositeImplicitAutograd kernel: autograd decomposes it
    before __torch_dispatch__; only a call below autograd (as from inside a
    decomposition) reaches SILU_BACKWARD."""
    def run(*a):
        with torch._C._AutoDispatchBelowAutograd():
            return fn(*a)
    return run


case("silu_backward", _below_autograd(aten.silu_backward), G2, FLOATS)
case("sigmoid_backward", lambda g, y: aten.sigmoid_backward(g, torch.sigmoid(y)), G2, FLOATS)
case("tanh_backward", lambda g, y: aten.tanh_backward(g, torch.tanh(y)), G2, FLOATS)
TR = [((4, 5),), ((2, 3, 4),), ((0, 3),), ((5, 3),)]
case("tril", torch.tril, TR, ALL)
case("triu", torch.triu, TR, ALL)
case("tril_diag", lambda x: torch.tril(x, -1), TR[:2], [F32, I64])
case("triu_diag", lambda x: torch.triu(x, 2), TR[:2], [F32, BOOL])
case("tril_", lambda x: x.clone().tril_(1), TR[:1], [F32])

# reductions
R = [((3, 4, 5),), ((6,),), ((),)]
case("amax", lambda x: torch.amax(x, (0, 2)), R[:1], NUMS + [BOOL])
case("amax_all", lambda x: torch.amax(x), R, NUMS)
case("amin_keep", lambda x: torch.amin(x, -1, keepdim=True), R[:2], NUMS)
case("amax_empty_dim", lambda x: torch.amax(x, 1), [((0, 4),)], FLOATS)
case("max_all", lambda x: x.max(), R, NUMS + [BOOL])
case("min_all", lambda x: x.min(), R, NUMS)
case("argmax", lambda x: torch.argmax(x), R, NUMS)
case("argmax_dim", lambda x: torch.argmax(x, 1, keepdim=True), R[:1], NUMS)
case("argmin", lambda x: torch.argmin(x, -1), R[:2], NUMS)
case("argmin_all", lambda x: torch.argmin(x), R[:1], NUMS)
case("max_dim", lambda x: torch.max(x, 1), R[:1], NUMS + [BOOL])
case("max_dim_keep", lambda x: torch.max(x, -1, keepdim=True), R[:2], FLOATS)
case("min_dim", lambda x: torch.min(x, 0), R[:2], NUMS)
case("max_other", lambda a, b: torch.max(a, b), B[:2], NUMS)
case("min_other", lambda a, b: torch.min(a, b), B[:2], NUMS)
case("var", lambda x: torch.var(x, 1), R[:1], FLOATS)
case("var_all", lambda x: torch.var(x), R[:2], FLOATS)
case("var_correction0_keep", lambda x: torch.var(x, (0, 2), correction=0, keepdim=True), R[:1], FLOATS)
case("std", lambda x: torch.std(x, -1), R[:2], FLOATS)
case("std_correction2", lambda x: torch.std(x, 0, correction=2), R[:1], FLOATS)
case("norm", lambda x: torch.linalg.vector_norm(x), R, FLOATS)
case("norm_dim", lambda x: torch.linalg.vector_norm(x, 1, dim=(0, 2), keepdim=True), R[:1], FLOATS)
case("norm_inf", lambda x: torch.linalg.vector_norm(x, float("inf"), dim=1), R[:1], FLOATS)
case("norm_3", lambda x: torch.linalg.vector_norm(x, 3, dim=-1), R[:1], FLOATS)
case("norm_dtype", lambda x: torch.linalg.vector_norm(x, dtype=F64), R[:1], [F32])
case("tensor_norm", lambda x: x.norm(), R[:1], FLOATS)
case("any", lambda x: torch.any(x), R, ALL)
case("any_dim", lambda x: torch.any(x, 1), R[:1], ALL)
case("any_dims", lambda x: torch.any(x, (0, 2), keepdim=True), R[:1], [BOOL, F32])
case("all", lambda x: torch.all(x), R, ALL)
case("all_dim", lambda x: torch.all(x, -1, keepdim=True), R[:1], ALL)
case("all_dims", lambda x: aten.all.dims(x, [0, 1]), R[:1], [BOOL, I32])
case("prod", lambda x: torch.prod(x), [(((2, 3), "unit"),), (((5,), "unit"),)], FLOATS + [I64, I32, BOOL])
case("prod_dim", lambda x: torch.prod(x, 1), [(((3, 4, 2), "unit"),)], FLOATS + [I64, U8])
case("prod_dtype", lambda x: torch.prod(x, 0, keepdim=True, dtype=F64), [(((3, 4), "unit"),)], [F32, I32])
case("cumsum", lambda x: torch.cumsum(x, 1), [((3, 4, 5),), ((0, 3),)], NUMS + [BOOL])
case("cumsum_neg", lambda x: torch.cumsum(x, -1), [((6,),), ((),)], FLOATS + [I64])
case("cumsum_dtype", lambda x: torch.cumsum(x, 0, dtype=F64), [((5, 3),)], [F32, I32])
case("cumsum_", lambda x: x.clone().cumsum_(0), [((5, 3),)], [F32])
case("sum_mean", lambda x: x.sum(1) + x.mean(), [((3, 4, 5),)], FLOATS)

# softmax, norms, losses
S = [((3, 5),), ((2, 3, 4),), ((0, 4),)]
case("softmax", lambda x: torch.softmax(x, -1), S, FLOATS)
case("softmax_dim0", lambda x: torch.softmax(x, 0), S[:2], FLOATS)
case("log_softmax", lambda x: torch.log_softmax(x, 1), S[:2], FLOATS)
case("softmax_half_to_float",   # CUDA's fused half->float softmax; CPU has only the unfused form
     lambda x: aten._softmax(x, 1, True) if x.device.type == DEV else aten._softmax(x.float(), 1, False),
     S[:1], [F16])
case("log_softmax_dtype", lambda x: torch.log_softmax(x, -1, dtype=F32), S[:1], [F16, BF16])
case("softmax_backward", lambda g, y: aten._softmax_backward_data(g, torch.softmax(y, 1), 1, y.dtype),
     [((3, 5), (3, 5)), ((2, 3, 4), (2, 3, 4))], FLOATS)
case("log_softmax_backward",
     lambda g, y: aten._log_softmax_backward_data(g, torch.log_softmax(y, -1), -1, y.dtype),
     [((3, 5), (3, 5)), ((2, 3, 4), (2, 3, 4))], FLOATS)
case("softmax_backward_half",   # CUDA's float grad -> half input grad; CPU only has the unfused form
     lambda g, y: (aten._softmax_backward_data(g, torch.softmax(y, 1), 1, F16) if g.device.type == DEV
                   else aten._softmax_backward_data(g, torch.softmax(y, 1), 1, F32).half()),
     [((3, 5), (3, 5))], [F32])
def _ln(x, w, b):
    # mean/rstd of half inputs: float32 on meta (CUDA's choice), the input dtype on CPU
    y, mean, rstd = aten.native_layer_norm(x, [5], w, b, 1e-5)
    return y, mean.to(x.dtype), rstd.to(x.dtype)


case("layer_norm", _ln,
     [((3, 5), (5,), (5,)), ((2, 3, 5), (5,), (5,))], FLOATS)
case("layer_norm_2d", lambda x, w: aten.native_layer_norm(x, [3, 4], w, None, 1e-3),
     [((2, 3, 4), (3, 4))], [F32, F64])
case("layer_norm_noaffine", lambda x: F.layer_norm(x, (4,)), [((2, 3, 4),), ((0, 4),)], FLOATS)


def _ln_bw(g, x, w, b, mask):
    y, mean, rstd = aten.native_layer_norm(x, [x.shape[-1]], w, b, 1e-5)
    return aten.native_layer_norm_backward(g, x, [x.shape[-1]], mean, rstd, w, b, mask)


case("layer_norm_backward", lambda g, x, w, b: _ln_bw(g, x, w, b, [True, True, True]),
     [((3, 5), (3, 5), (5,), (5,)), ((2, 3, 5), (2, 3, 5), (5,), (5,))], FLOATS, tol=LOOSE)
case("layer_norm_backward_mask", lambda g, x, w, b: _ln_bw(g, x, w, b, [True, False, True]),
     [((3, 5), (3, 5), (5,), (5,))], [F32])
case("layer_norm_backward_noweight", lambda g, x: _ln_bw(g, x, None, None, [True, False, False]),
     [((3, 5), (3, 5))], [F32, F64])

def _nll(logp, t, w=None, red=1, ig=-100):
    return aten.nll_loss_forward(logp, t, w, red, ig)


case("nll_loss", lambda x, t: _nll(torch.log_softmax(x, -1), t), [((4, 5), Idx((4,), 5)), ((5,), Idx((), 5))],
     FLOATS, layouts=("contig",))
case("nll_loss_sum_weight", lambda x, t, w: _nll(x, t, w, 2), [((6, 5), Idx((6,), 5), ((5,), "pos"))], FLOATS,
     layouts=("contig",))
case("nll_loss_none_ignore", lambda x, t: _nll(x, t, None, 0, 2), [((6, 5), Idx((6,), 5))], FLOATS,
     layouts=("contig",))
case("nll_loss_mean_weight_ignore", lambda x, t, w: _nll(x, t, w, 1, 1),
     [((6, 5), Idx((6,), 5), ((5,), "pos"))], [F32, F64], layouts=("contig",))


def _nll_bw(g, x, t, w, red, ig):
    loss, tw = aten.nll_loss_forward(x, t, w, red, ig)
    gg = g if red == 0 else g.sum()
    return aten.nll_loss_backward(gg, x, t, w, red, ig, tw)


case("nll_loss_backward", lambda g, x, t: _nll_bw(g, x, t, None, 1, -100), [((4,), (4, 5), Idx((4,), 5))],
     FLOATS, layouts=("contig",))
case("nll_loss_backward_none_w", lambda g, x, t, w: _nll_bw(g, x, t, w, 0, 3),
     [((6,), (6, 5), Idx((6,), 5), ((5,), "pos"))], [F32, F64], layouts=("contig",))
case("nll_loss_backward_sum", lambda g, x, t: _nll_bw(g, x, t, None, 2, 0), [((6,), (6, 5), Idx((6,), 5))],
     [F32], layouts=("contig",))
case("cross_entropy", lambda x, t: F.cross_entropy(x, t), [((4, 5), Idx((4,), 5))], FLOATS,
     layouts=("contig", "T"))


def _grads(fn, n_diff):
    """fn's output and the gradients of sum(out * g) wrt its first n_diff inputs (g: the last
    input): the fused ops' backward records (autograd runs them on rgpu like any backward)."""
    def run(*a):
        with torch.enable_grad():
            xs = [x.detach().requires_grad_() for x in a[:n_diff]]
            y = fn(*xs, *a[n_diff:-1])
            gs = torch.autograd.grad(y, xs, a[-1])
        return (y.detach(),) + tuple(gs)
    return run


# fused cross-entropy (CROSS_ENTROPY, CROSS_ENTROPY_BACKWARD), rms norm (RMS_NORM, RMS_NORM_BACKWARD),
# attention (SDPA, SDPA_BACKWARD): value and gradients against CPU's composites
case("cross_entropy_grad", _grads(lambda x, t: F.cross_entropy(x, t, ignore_index=1), 1),
     [((6, 5), Idx((6,), 5), ())], FLOATS, layouts=("contig",), tol=LOOSE)
case("cross_entropy_grad_none_w", _grads(lambda x, t, w: F.cross_entropy(x, t, weight=w, reduction="none"), 1),
     [((6, 5), Idx((6,), 5), ((5,), "pos"), (6,))], [F32, F64], layouts=("contig",), tol=LOOSE)
case("rms_norm", _grads(lambda x, w: F.rms_norm(x, (5,), w, 1e-5), 2),
     [((3, 5), (5,), (3, 5)), ((2, 3, 5), (5,), (2, 3, 5))], FLOATS, tol=LOOSE)
case("rms_norm_noweight", _grads(lambda x: F.rms_norm(x, (3, 4)), 1), [((2, 3, 4), (2, 3, 4))], [F32, F64],
     tol=LOOSE)
case("sdpa_fused", _grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), 3),
     [((1, 2, 5, 8), (1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 5, 8))], [F32], tol=LOOSE)
# float16/bfloat16 contiguous only: for strided inputs CPU takes its math path in half precision, whose
# gradients are further from float64's than the fused op's (which computes in float)
case("sdpa_fused_half", _grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), 3),
     [((1, 2, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8))], [F16, BF16], layouts=("contig",), tol=LOOSE)
case("sdpa_fused_causal_mask", _grads(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), 3),
     [((2, 2, 4, 8), (2, 2, 4, 8), (2, 2, 4, 8), (2, 1, 4, 4), (2, 2, 4, 8))], [F32], tol=LOOSE)
case("cross_entropy_smooth", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1, ignore_index=1),
     [((6, 5), Idx((6,), 5))], [F32], layouts=("contig",))

# dense
MM = [((3, 4), (4, 5)), ((1, 7), (7, 1)), ((0, 4), (4, 5)), ((3, 0), (0, 5))]
case("mm", torch.mm, MM, FLOATS + [I64, I32], tol=LOOSE)
case("mm_out", lambda a, b: torch.mm(a, b, out=torch.empty(0, dtype=a.dtype, device=a.device)), MM[:1], [F32], tol=LOOSE)
case("matmul_linear", lambda x, w, b: F.linear(x, w, b), [((2, 3, 4), (5, 4), (5,))], FLOATS, tol=LOOSE)
case("mv", torch.mv, [((3, 4), (4,))], [F32, F64], tol=LOOSE)
case("dot", torch.dot, [((6,), (6,))], [F32, F64], tol=LOOSE)
case("bmm", torch.bmm, [((2, 3, 4), (2, 4, 5)), ((0, 3, 4), (0, 4, 2)), ((3, 1, 4), (3, 4, 1))],
     FLOATS + [I64], tol=LOOSE)
case("matmul_batched", torch.matmul, [((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2))], [F32], tol=LOOSE)
case("addmm", lambda s, a, b: torch.addmm(s, a, b), [((3, 5), (3, 4), (4, 5)), ((5,), (3, 4), (4, 5))],
     FLOATS + [I64], tol=LOOSE)
case("addmm_beta_alpha", lambda s, a, b: torch.addmm(s, a, b, beta=0.5, alpha=-2), [((3, 5), (3, 4), (4, 5))],
     FLOATS, tol=LOOSE)
case("addmm_beta0", lambda s, a, b: torch.addmm(s * float("nan"), a, b, beta=0), [((3, 5), (3, 4), (4, 5))],
     [F32], tol=LOOSE)
case("addmm_", lambda s, a, b: s.clone().addmm_(a, b, alpha=3), [((3, 5), (3, 4), (4, 5))], [F32], tol=LOOSE)
case("baddbmm", lambda s, a, b: torch.baddbmm(s, a, b, beta=2, alpha=0.5),
     [((2, 3, 5), (2, 3, 4), (2, 4, 5)), ((3, 5), (2, 3, 4), (2, 4, 5))], FLOATS, tol=LOOSE)
case("baddbmm_", lambda s, a, b: s.clone().baddbmm_(a, b), [((2, 3, 5), (2, 3, 4), (2, 4, 5))], [F32],
     tol=LOOSE)

CONV = dict(tol=LOOSE, layouts=("contig", "strided"))
CONV_BW = dict(tol={**LOOSE, BF16: (5e-2, 2e-1)}, layouts=("contig", "strided"))
case("conv2d", lambda x, w, b: F.conv2d(x, w, b), [((2, 3, 6, 6), (4, 3, 3, 3), (4,))], FLOATS, **CONV)
case("conv2d_stride_pad", lambda x, w: F.conv2d(x, w, None, stride=2, padding=1),
     [((1, 2, 7, 6), (3, 2, 3, 2))], [F32, F64], **CONV)
case("conv2d_dilation_groups", lambda x, w, b: F.conv2d(x, w, b, padding=(2, 1), dilation=2, groups=2),
     [((2, 4, 7, 7), (6, 2, 3, 3), (6,))], [F32, F64], **CONV)
case("conv1d", lambda x, w, b: F.conv1d(x, w, b, padding=1), [((2, 3, 8), (4, 3, 3), (4,))], [F32], **CONV)
case("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
     [((1, 3, 4, 4), (3, 2, 3, 3), (2,))], [F32, F64], **CONV)


def _conv_bw(g, x, w, mask, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, transposed=False,
             bias=True):
    return aten.convolution_backward(g, x, w, [w.shape[0]] if bias else None, list(stride), list(padding),
                                     list(dilation), transposed, [0, 0], groups, mask)


case("convolution_backward", lambda g, x, w: _conv_bw(g, x, w, [True, True, True]),
     [((2, 4, 4, 4), (2, 3, 6, 6), (4, 3, 3, 3))], FLOATS, **CONV_BW)
case("convolution_backward_strided", lambda g, x, w: _conv_bw(g, x, w, [True, True, False], (2, 2), (1, 1),
                                                              groups=2, bias=False),
     [((1, 4, 4, 4), (1, 2, 7, 7), (4, 1, 3, 3))], [F32, F64], **CONV)
case("convolution_backward_weight_only", lambda g, x, w: _conv_bw(g, x, w, [False, True, False], dilation=(2, 2)),
     [((2, 3, 2, 2), (2, 2, 6, 6), (3, 2, 3, 3))], [F32], **CONV)

BN = [((4, 3, 5, 5), (3,), (3,), Fixed(lambda d: torch.zeros(3, dtype=d)), Fixed(lambda d: torch.ones(3, dtype=d))),
      ((6, 3), (3,), (3,), Fixed(lambda d: torch.zeros(3, dtype=d)), Fixed(lambda d: torch.ones(3, dtype=d)))]


def _bn_train(x, w, b, rm, rv):
    out = aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
    return out + (rm, rv)


case("batch_norm_train", _bn_train, BN, [F32, F64], tol=LOOSE, layouts=("contig",))
case("batch_norm_eval", lambda x, w, b, rm, rv: aten.native_batch_norm(x, w, b, rm + 0.5, rv + 1, False, 0.1, 1e-5)[0],
     BN, [F32, F64], tol=LOOSE, layouts=("contig",))
case("batch_norm_nostats", lambda x: aten.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-3),
     [((4, 3, 2, 2),)], [F32], tol=LOOSE, layouts=("contig",))
case("batch_norm_functional", lambda x, w, b, rm, rv: (F.batch_norm(x, rm, rv, w, b, training=True), rm, rv),
     BN[:1], [F32], tol=LOOSE, layouts=("contig",))
case("batch_norm_legit", lambda x, w, b, rm, rv: aten._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5),
     BN[:1], [F32], tol=LOOSE, layouts=("contig",))
case("batch_norm_legit_no_training",
     lambda x, w, b, rm, rv: aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5)[0],
     BN[:1], [F32], tol=LOOSE, layouts=("contig",))


def _bn_bw(g, x, w, rm, rv, train, mask):
    y, sm, si = aten.native_batch_norm(x, w, None, rm, rv, train, 0.1, 1e-5)
    return aten.native_batch_norm_backward(g, x, w, rm, rv, sm, si, train, 1e-5, mask)


BNB = [((4, 3, 5, 5), (4, 3, 5, 5), (3,), Fixed(lambda d: torch.zeros(3, dtype=d)),
        Fixed(lambda d: torch.ones(3, dtype=d)))]
case("batch_norm_backward", lambda g, x, w, rm, rv: _bn_bw(g, x, w, rm, rv, True, [True, True, True]), BNB,
     [F32, F64], tol=LOOSE, layouts=("contig",))
case("batch_norm_backward_eval", lambda g, x, w, rm, rv: _bn_bw(g, x, w, rm, rv, False, [True, True, False]), BNB,
     [F32, F64], tol=LOOSE, layouts=("contig",))
case("batch_norm_backward_noweight", lambda g, x, w, rm, rv: _bn_bw(g, x, None, rm, rv, True, [True, False, False]),
     BNB, [F32], tol=LOOSE, layouts=("contig",))

P = [((2, 3, 6, 6),), ((1, 2, 7, 5),)]
case("max_pool2d", lambda x: F.max_pool2d(x, 2, return_indices=True), P, FLOATS + [I64])
case("max_pool2d_pad_ceil", lambda x: aten.max_pool2d_with_indices(x, [3, 2], [2, 1], [1, 1], [1, 1], True),
     P, [F32, F64])
case("max_pool2d_dilation", lambda x: aten.max_pool2d_with_indices(x, [2, 2], [], [0, 0], [2, 2], False),
     P[:1], [F32])
case("max_pool2d_3d_input", lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), [((3, 6, 6),)], [F32])


def _mp_bw(g_shape_src, x, k, s, p, d, c):
    y, idx = aten.max_pool2d_with_indices(x, k, s, p, d, c)
    g = torch.ones_like(y) * 0.5 + y * 0.25
    return aten.max_pool2d_with_indices_backward(g, x, k, s, p, d, c, idx)


case("max_pool2d_backward", lambda x: _mp_bw(None, x, [2, 2], [2, 2], [0, 0], [1, 1], False), P, FLOATS,
     tol=LOOSE)
case("max_pool2d_backward_overlap", lambda x: _mp_bw(None, x, [3, 3], [1, 2], [1, 1], [1, 1], True), P,
     [F32, F64], tol=LOOSE)
case("avg_pool2d", lambda x: F.avg_pool2d(x, 2), P, FLOATS + [I64])
case("avg_pool2d_pad", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), P, [F32, F64])
case("avg_pool2d_divisor", lambda x: F.avg_pool2d(x, (2, 3), 1, (1, 1), divisor_override=3), P[:1], [F32])


def _ap_bw(x, k, s, p, c, cip, dv):
    y = aten.avg_pool2d(x, k, s, p, c, cip, dv)
    return aten.avg_pool2d_backward(y * 2 + 1, x, k, s, p, c, cip, dv)


case("avg_pool2d_backward", lambda x: _ap_bw(x, [2, 2], [2, 2], [0, 0], False, True, None), P, FLOATS,
     tol=LOOSE)
case("avg_pool2d_backward_pad", lambda x: _ap_bw(x, [3, 3], [2, 1], [1, 1], True, False, None), P, [F32, F64],
     tol=LOOSE)
case("avg_pool2d_backward_divisor", lambda x: _ap_bw(x, [2, 2], [1, 1], [1, 0], False, True, 5), P[:1], [F32],
     tol=LOOSE)
case("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 2)), P, FLOATS, tol=LOOSE)
case("adaptive_avg_pool2d_1", lambda x: F.adaptive_avg_pool2d(x, 1), P[:1], [F32], tol=LOOSE)
case("adaptive_avg_pool2d_backward",
     lambda x: aten._adaptive_avg_pool2d_backward(aten._adaptive_avg_pool2d(x, [4, 3]) + 1, x),
     P, FLOATS, tol=LOOSE)

# index family
case("embedding", lambda w, i: F.embedding(i, w), [((10, 4), Idx((3, 5), 10)), ((10, 4), Idx((0,), 10))],
     FLOATS + [I64])
case("embedding_padding_idx", lambda w, i: aten.embedding(w, i, 2), [((10, 4), Idx((7,), 10))], [F32])
case("embedding_backward", lambda g, i: aten.embedding_dense_backward(g, i, 10, -1, False),
     [((3, 5, 4), Idx((3, 5), 10))], FLOATS, tol=LOOSE)
case("embedding_backward_pad_scale", lambda g, i: aten.embedding_dense_backward(g, i, 10, 3, True),
     [((12, 4), Idx((12,), 10))], [F32, F64], tol=LOOSE)
case("gather", lambda x, i: torch.gather(x, 1, i), [((3, 5), Idx((3, 4), 5)), ((3, 5), Idx((2, 2), 5))], ALL)
case("gather_dim0", lambda x, i: torch.gather(x, -2, i), [((4, 3, 2), Idx((2, 3, 2), 4))], [F32, I32])
case("scatter_src", lambda x, i, s: torch.scatter(x, 1, i, s),
     [((3, 5), Fixed(lambda d: torch.tensor([[0, 1, 2], [4, 3, 2], [1, 0, 4]])), (3, 3))], ALL)
case("scatter_value", lambda x, i: x.clone().scatter_(0, i, 7),
     [((4, 3), Fixed(lambda d: torch.tensor([[3, 0, 1], [1, 2, 0]])))], NUMS)
case("scatter_reduce_add", lambda x, i, s: torch.scatter(x, 1, i, s, reduce="add"),
     [((3, 5), Idx((3, 6), 5), (3, 6))], [F32, F64, I64])
case("scatter_reduce_multiply", lambda x, i, s: x.clone().scatter_(1, i, s, reduce="multiply"),
     [((3, 5), Idx((3, 4), 5), ((3, 4), "unit"))], [F32, F64])
case("scatter_value_reduce", lambda x, i: torch.scatter(x, 0, i, 2.0, reduce="add"),
     [((4, 3), Idx((5, 3), 4))], [F32])
case("scatter_add", lambda x, i, s: torch.scatter_add(x, 1, i, s), [((3, 5), Idx((3, 6), 5), (3, 6))],
     FLOATS + [I64, I32], tol=LOOSE)
case("scatter_add_", lambda x, i, s: x.clone().scatter_add_(0, i, s), [((4, 3), Idx((6, 3), 4), (6, 3))],
     [F32, I64])
case("index_select", lambda x, i: torch.index_select(x, 0, i), [((5, 3), Idx((7,), 5)), ((5, 3), Idx((0,), 5))],
     ALL)
case("index_select_dim1", lambda x, i: x.index_select(-1, i), [((2, 5, 4), Idx((3,), 4, I32))], [F32, F16])
case("index_add", lambda x, i, s: torch.index_add(x, 0, i, s), [((5, 3), Idx((7,), 5), (7, 3))],
     FLOATS + [I64], tol=LOOSE)
case("index_add_alpha", lambda x, i, s: x.clone().index_add_(1, i, s, alpha=-2),
     [((3, 5), Idx((4,), 5), (3, 4))], [F32, F64, I32])
case("index_tensor", lambda x, i: x[i], [((5, 3), Idx((2, 4), 5)), ((5, 3), Idx((4,), 5, neg=True))], ALL)
case("index_tensor_multi", lambda x, i, j: x[i, :, j], [((5, 3, 4), Idx((2, 3), 5), Idx((3,), 4))], [F32, I64])
case("index_tensor_none_first", lambda x, i: x[:, i], [((3, 5, 2), Idx((4,), 5))], [F32, BF16])
case("index_tensor_int32", lambda x, i: x[i], [((5, 3), Idx((4,), 5, I32))], [F32])
case("index_put", lambda x, i, v: torch.index_put(x, (i,), v), [((5, 3), Fixed(lambda d: torch.tensor([4, 0, 2])),
                                                                  (3, 3))], ALL)
case("index_put_accumulate", lambda x, i, v: x.clone().index_put_((i,), v, accumulate=True),
     [((5, 3), Idx((6,), 5), (6, 3)), ((5, 3), Idx((6,), 5), (3,))], FLOATS + [I64], tol=LOOSE)
case("index_put_multi", lambda x, i, j, v: x.clone().index_put_((i, None, j), v),
     [((5, 2, 4), Fixed(lambda d: torch.tensor([1, 3])), Fixed(lambda d: torch.tensor([0, 2])), (2,))],
     [F32, I32])
case("setitem_int_index", lambda x, i: _setitem(x.clone(), i, 2.5), [((5, 3), Fixed(lambda d: torch.tensor([0, 4])))],
     [F32, F64])
case("setitem_bool_mask", lambda x, m: _setitem(x.clone(), m, -1), [((4, 3), Fixed(lambda d: sample((4, 3), BOOL, 3)))],
     [F32, I64])
case("setitem_bool_rows", lambda x, m: _setitem(x.clone(), m, 7), [((4, 3), Fixed(lambda d: sample((4,), BOOL, 4)))],
     [F32])
case("cat", lambda a, b: torch.cat([a, b]), [((2, 3), (4, 3)), ((2, 0), (2, 0)), ((0, 3), (2, 3))], ALL)
case("cat_dim1", lambda a, b, c: torch.cat([a, b, c], -1), [((2, 3, 1), (2, 3, 4), (2, 3, 2))], [F32, I64, BOOL])
case("cat_mixed_dtypes", lambda a, b: torch.cat([a, b.to(I32)], 0), [((2, 3), (1, 3))], [F16, I64, BOOL])
case("cat_legacy_empty", lambda a: torch.cat([a, torch.empty(0, dtype=a.dtype, device=a.device), a]), [((2, 3),)], [F32])
case("cat_many", lambda a: torch.cat([a * k for k in range(20)], 1), [((2, 3),)], [F32], layouts=("contig",))
case("cat_out", lambda a, b: torch.cat([a, b], out=torch.empty(0, dtype=a.dtype, device=a.device)), [((2, 3), (1, 3))], [F32])
case("stack", lambda a, b: torch.stack([a, b], 1), [((2, 3), (2, 3)), ((0, 2), (0, 2))], [F32, I64, BOOL])
case("stack_neg", lambda a, b, c: torch.stack([a, b, c], -1), [((4,), (4,), (4,))], [F64])
case("pad", lambda x: F.pad(x, (1, 2)), [((2, 3),), ((2, 3, 4),)], ALL)
case("pad_value_neg", lambda x: F.pad(x, (1, -1, 2, 0), value=-3.5), [((2, 3, 4),)], FLOATS)
case("pad_4d", lambda x: F.pad(x, (0, 1, 1, 1, 1, 0)), [((1, 2, 3, 3),)], [F32, I8])

# mixed precision (GradScaler's ops): grads in place, any layout, inf/nan; found_inf, scale, tracker
def _unscale(a, b, inv, found0=0.0, bad=None):
    found = torch.full((), found0, device=a.device)
    if bad is not None:
        a[0, 1] = bad
    torch._amp_foreach_non_finite_check_and_unscale_([a, b], found, torch.full((), inv, device=a.device))
    return a, b, found


AMPG = [((3, 4), (5,))]
case("amp_unscale", lambda a, b: _unscale(a, b, 0.125), AMPG, FLOATS, tol={d: (0, 0) for d in FLOATS})
case("amp_unscale_inf", lambda a, b: _unscale(a, b, 1 / 3, bad=float("inf")), AMPG, FLOATS,
     tol={d: (0, 0) for d in FLOATS})
case("amp_unscale_nan_inv1", lambda a, b: _unscale(a, b, 1.0, bad=float("nan")), AMPG[:1], [F32, BF16])
case("amp_unscale_found_kept", lambda a, b: _unscale(a, b, 2.0, found0=1.0), AMPG[:1], [F16])


def _amp_update(x, s, t, f, g=2.0, b=0.5, n=3):
    d = x.device
    scale, tracker = torch.full((), s, device=d), torch.full((), t, dtype=I32, device=d)
    r = torch._amp_update_scale_(scale, tracker, torch.full((), f, device=d), g, b, n)
    assert r is scale
    return scale, tracker


AMPU = [((1,),)]
case("amp_update_scale_backoff", lambda x: _amp_update(x, 65536.0, 2, 1.0), AMPU, [F32], layouts=("contig",))
case("amp_update_scale_count", lambda x: _amp_update(x, 65536.0, 0, 0.0), AMPU, [F32], layouts=("contig",))
case("amp_update_scale_grow", lambda x: _amp_update(x, 1000.1, 2, 0.0, 1.7, 0.3), AMPU, [F32], layouts=("contig",))
case("amp_update_scale_grow_inf", lambda x: _amp_update(x, 3e38, 2, 0.0), AMPU, [F32], layouts=("contig",))
case("amp_update_scale_nan", lambda x: _amp_update(x, 8.0, 1, float("nan")), AMPU, [F32], layouts=("contig",))

# the first op set
case("add_sub_mul_div", lambda a, b: (a + b, a - b, a * b, a / b), BNZ[:2], FLOATS)
case("scalar_arith", lambda a: (a + 2, a - 1.5, 3 - a, a * 2, a / 4), U[:2], FLOATS + [I64])
case("copy_clone_item", lambda a: (a.t().contiguous(), a.clone(), torch.tensor(a[0, 0].item(), device=a.device)), [((3, 4),)],
     FLOATS + [I64])
case("factories", lambda a: (torch.zeros_like(a), torch.full_like(a, 2), a + torch.arange(a.shape[-1], device=a.device)), U[:1],
     [F32, I64])


def _setitem(x, i, v):
    x[i] = v
    return x


# --- pointwise: elementary and gamma-family ops, their prims
UNIT = [(((3, 5), "unit"),), (((2, 3, 4), "unit"),)]
FLOAT_UNARY13 = FLOATS + [I64]                 # I64 promotes to the default float dtype
case("trig13", lambda x: (torch.atan(x), torch.asinh(x), torch.sinh(x), torch.cosh(x), torch.tan(x)),
     U[:2], FLOAT_UNARY13)
case("exp2_erfc", lambda x: (torch.exp2(x), torch.erfc(x)), U[:2], FLOAT_UNARY13)
case("lgamma_digamma", lambda x: (torch.lgamma(x), torch.digamma(x)), U[:2], FLOAT_UNARY13)
case("unit_domain13", lambda x: (torch.acos(x), torch.asin(x), torch.atanh(x), torch.erfinv(x)), UNIT, FLOAT_UNARY13)
case("log2_log10_acosh", lambda x: (torch.log2(x), torch.log10(x), torch.acosh(x + 1)), UPOS[:2], FLOAT_UNARY13)
case("unary13_empty_0d_bool", lambda x: (torch.acos(x), torch.lgamma(x), torch.polygamma(2, x)), [U[2], U[3]], [F32, BOOL, I32])
case("digamma_poles", lambda x: torch.digamma(torch.round(x) * (x > 0)), U[:1], [F32, F64])
for n in range(5):
    case(f"polygamma_{n}", lambda x, n=n: torch.polygamma(n, x), U[:1], [F32, F64, F16, I64])
case("polygamma_pos", lambda x: torch.special.polygamma(3, x), UPOS[:2], [F32, F64])
case("polygamma_", lambda x: x.clone().polygamma_(2), U[:1], [F32])
case("mvlgamma", lambda x: torch.mvlgamma(x.abs() + 2, 3), U[:2], [F32, F64])
case("round_decimals", lambda x: torch.round(x, decimals=2), U[:2], FLOATS + [I64])
case("round_decimals_neg", lambda x: torch.round(x * 100, decimals=-1), U[:2], FLOATS)
case("signbit", lambda x: torch.signbit(x * -0.0 if x.is_floating_point() else x), U[:1], ALL)
case("signbit_values", torch.signbit, U[:2], ALL)
case("frexp", torch.frexp, U[:2], FLOATS + [I64])
case("frexp_special", lambda x: torch.frexp(torch.where(x > 1, x * float("inf"), x * 1e-30)), U[:1], [F32, F64])
case("fmax", torch.fmax, B[:3], ALL)
case("fmin", torch.fmin, B[:2], NUMS)
case("fmax_nan", lambda a, b: torch.fmax(a.masked_fill(a > 1, float("nan")), b.masked_fill(b < -1, float("nan"))),
     B[:2], FLOATS)
case("fmin_nan", lambda a, b: torch.fmin(a.masked_fill(a > 1, float("nan")), b), B[:2], FLOATS)
case("copysign", torch.copysign, B[:3], FLOATS + [I64, BOOL])
case("copysign_scalar", lambda x: torch.copysign(x, -1.5), U[:2], FLOATS + [I64])
case("nextafter", torch.nextafter, B[:3], FLOATS + [I64], tol={d: (0, 0) for d in FLOATS})
case("nextafter_zero", lambda a, b: torch.nextafter(a * 0, b), B[:2], FLOATS, tol={d: (0, 0) for d in FLOATS})
case("logaddexp2", torch.logaddexp2, B[:3], FLOATS)
case("logit_eps", lambda x: torch.logit(torch.sigmoid(x), 1e-3), U[:2], FLOATS)
case("scalar_first_arith", lambda x: (torch.sub(2, x), torch.add(1.5, x, alpha=2), torch.ops.aten.div.Tensor(3, x)),
     U[:2], [F32, F64, I64])
case("cumprod", lambda x: torch.cumprod(x, 1), U[:2], [F32, F64, I64])
case("vander", lambda x: torch.linalg.vander(x.flatten()[:5]), U[:1], [F32, F64, I64])
case("prims_mul_prod", lambda x: (torch.ops.prims.mul.default(x, x), torch.ops.prims.prod.default(x, [0])),
     U[:1], [F32, I64])

# --- special functions ( replayer/op/special_math.h)
SP = torch.special
SPF = [F32, F64, I64]                      # integer inputs compute in the default float dtype
SPU = [((3, 5),), (((2, 3, 4), "pos"),), ((0, 3),)]
SPV = Fixed(lambda d: torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 8.0, 8.5, -9.0, 30.0, 60.0, -27.0, 1e-6,
                                    float("inf"), float("-inf"), float("nan")], dtype=F64).to(d))
for name, fn in (("special_erfcx", SP.erfcx), ("special_log_ndtr", SP.log_ndtr), ("i0", torch.i0),
                 ("special_i0e", SP.i0e), ("special_i1", SP.i1), ("special_i1e", SP.i1e),
                 ("special_bessel_j0", SP.bessel_j0), ("special_bessel_j1", SP.bessel_j1),
                 ("special_bessel_y0", SP.bessel_y0), ("special_bessel_y1", SP.bessel_y1),
                 ("special_modified_bessel_i0", SP.modified_bessel_i0),
                 ("special_modified_bessel_i1", SP.modified_bessel_i1),
                 ("special_modified_bessel_k0", SP.modified_bessel_k0),
                 ("special_modified_bessel_k1", SP.modified_bessel_k1),
                 ("special_scaled_modified_bessel_k0", SP.scaled_modified_bessel_k0),
                 ("special_scaled_modified_bessel_k1", SP.scaled_modified_bessel_k1),
                 ("special_spherical_bessel_j0", SP.spherical_bessel_j0), ("special_airy_ai", SP.airy_ai)):
    case(name, fn, SPU, SPF)
    case(name + "_edges", fn, [(SPV,)], [F32, F64], layouts=("contig",))
case("special_i0_half", torch.i0, SPU[:1], [F16, BF16], layouts=("contig",))
case("special_bessel_j0_half_refused", SP.bessel_j0, SPU[:1], [F16], layouts=("contig",))
case("special_ndtri", lambda x: SP.ndtri(torch.sigmoid(x)), SPU, [F32, F64])
case("special_ndtri_edges", SP.ndtri, [(Fixed(lambda d: torch.tensor([0.0, 1.0, 0.5, 0.1, 0.9, 1e-20, 1 - 1e-7, -0.5, 2.0,
                                                                      float("nan")], dtype=F64).to(d)),)],
     [F32, F64], layouts=("contig",))
case("special_ndtri_int", SP.ndtri, SPU[:1], [I64, I32])
case("igamma", torch.igamma, [(((3, 5), "pos"), ((3, 5), "pos")), (((2, 3, 4), "pos"), ((4,), "pos"))], SPF)
case("igammac", torch.igammac, [(((3, 5), "pos"), ((3, 5), "pos")), (((2, 3, 4), "pos"), ((4,), "pos"))], SPF)
case("igamma_regimes", lambda a, x: (torch.igamma(a * 40, x * 40 + a * 20), torch.igammac(a * 300, a * 300 + x),
                                     torch.igamma(a, x * 0.3), torch.igammac(a * 0.5, x * 0.8),
                                     torch.igammac(a * 2, x * 2 + 1.5)),
     [(((3, 5), "pos"), ((3, 5), "pos"))], [F32, F64], tol=LOOSE)
case("igamma_scalar", lambda a: (torch.igamma(a, 2.5), torch.special.gammaincc(a, 0.5)), [(((3, 5), "pos"),)], [F32, F64])
case("igamma_inplace", lambda a, x: a.clone().igamma_(x), [(((3, 5), "pos"), ((3, 5), "pos"))], [F32])
case("special_zeta", lambda x, q: SP.zeta(x.abs() + 1, q), [((3, 5), ((3, 5), "pos")), ((2, 3, 4), (4,))], SPF)
case("special_zeta_scalar", lambda q: (SP.zeta(3.0, q), SP.zeta(q.abs() + 1.5, 2.0)), [((3, 5),)], [F32, F64])
POLYS = ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
         "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
         "laguerre_polynomial_l", "legendre_polynomial_p")
# (no NaN x: ATen returns an unset value for it once n >= 2)
SPX = Fixed(lambda d: torch.tensor([0.0, 1.0, -1.0, 0.5, -0.3, 0.25, 0.75, 1.5, -2.0], dtype=F64).to(d))
for name in POLYS:
    fn = getattr(SP, name)
    case("special_" + name, fn, [(((3, 5), "unit"), Idx((3, 5), 14)), (((2, 3, 4), "unit"), Idx((4,), 14))],
         [F32, F64], tol=LOOSE)
    case("special_" + name + "_scalar_n", lambda x, f=fn: (f(x, 3), f(x, 9), f(x, -1), f(x, 2.7)),
         [(((3, 5), "unit"),)], [F32, F64, I64], tol=LOOSE)
    case("special_" + name + "_edges", lambda x, f=fn: (f(x, 0), f(x, 1), f(x, 4), f(x, 7), f(x, 12), f(x, 200),
                                                        f(x, float("nan"))),
         [(SPX,)], [F32, F64], layouts=("contig",), tol=LOOSE)
    case("special_" + name + "_scalar_x", lambda n, f=fn: f(0.3, n), [(Idx((3, 5), 14),)], [I64], tol=LOOSE)
# --- pooling, upsampling, grid sampling
# (ATen's CPU avg_pool3d takes no f16/bf16, adaptive_max_pool2d no integers.)
# 3-d convolution (the convolution kernels, both backends), 3-d / adaptive /
# fractional pooling, grid sampling and every upsample mode, forward and
# backward (torchhook/rgpu/decomp_sample.py: decompositions into ops.def ops).

def _conv3d_bw(g, x, w, mask, stride, padding, dilation, groups, transposed, out_pad):
    return aten.convolution_backward(g, x, w, [w.shape[1] * groups if transposed else w.shape[0]], stride, padding,
                                     dilation, transposed, out_pad, groups, mask)


case("conv3d", lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=(1, 0, 1), dilation=(2, 1, 1)),
     [((2, 4, 5, 6, 5), (4, 2, 2, 3, 2), (4,))], [F32, F64], **CONV)
case("conv3d_groups", lambda x, w: F.conv3d(x, w, None, stride=2, groups=2), [((1, 4, 5, 5, 6), (6, 2, 3, 1, 2))],
     [F32, F64, F16, BF16], **CONV)
case("conv_transpose3d", lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2, padding=1, output_padding=1,
                                                            groups=1, dilation=(1, 2, 1)),
     [((1, 3, 3, 4, 3), (3, 2, 3, 2, 2), (2,))], [F32, F64], **CONV)
case("conv3d_backward", lambda g, x, w: _conv3d_bw(g, x, w, [True, True, True], [2, 1, 1], [1, 0, 1], [1, 1, 2],
                                                   2, False, [0, 0, 0]),
     [((2, 4, 3, 3, 4), (2, 4, 5, 5, 6), (4, 2, 2, 3, 2))], [F32, F64], **CONV_BW)
case("conv_transpose3d_backward",
     lambda g, x, w: _conv3d_bw(g, x, w, [True, True, False], [2, 1, 2], [1, 0, 1], [2, 1, 1], 1, True, [1, 0, 1]),
     [((1, 2, 6, 5, 7), (1, 3, 3, 4, 4), (3, 2, 2, 2, 2))], [F32, F64], **CONV_BW)
P3 = [((2, 3, 5, 6, 7),)]
POOL3 = dict(layouts=("contig", "T", "strided"))
case("avg_pool3d", lambda x: F.avg_pool3d(x, 2), P3, [F32, F64], tol=LOOSE, **POOL3)
case("avg_pool3d_pad", lambda x: F.avg_pool3d(x, (3, 2, 3), (2, 1, 2), (1, 1, 0), ceil_mode=True,
                                              count_include_pad=False), P3, [F32, F64], tol=LOOSE, **POOL3)
case("avg_pool3d_divisor", lambda x: F.avg_pool3d(x, 2, 1, 1, divisor_override=3), P3, [F32], tol=LOOSE)
case("avg_pool3d_backward",
     lambda x: aten.avg_pool3d_backward(aten.avg_pool3d(x, [3, 2, 3], [2, 1, 2], [1, 1, 0], True, True, None) + 1,
                                        x, [3, 2, 3], [2, 1, 2], [1, 1, 0], True, True, None),
     P3, [F32, F64], tol=LOOSE, **POOL3)
case("avg_pool3d_backward_divisor",
     lambda x: aten.avg_pool3d_backward(aten.avg_pool3d(x, [2, 2, 2], [1, 1, 1], [1, 0, 0], False, False, 5) + 1,
                                        x, [2, 2, 2], [1, 1, 1], [1, 0, 0], False, False, 5), P3, [F32], tol=LOOSE)


def _maxp3_bw(x, k, s, p, d, c):
    y, idx = aten.max_pool3d_with_indices(x, k, s, p, d, c)
    return aten.max_pool3d_with_indices_backward(y * 2 + 1, x, k, s, p, d, c, idx)


case("max_pool3d_backward", lambda x: _maxp3_bw(x, [3, 2, 2], [1, 2, 1], [1, 0, 1], [1, 1, 2], True), P3, FLOATS,
     **POOL3)
case("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, (3, 4, 2)), P3, FLOATS, tol=LOOSE, **POOL3)
case("adaptive_avg_pool3d_backward",
     lambda x: aten._adaptive_avg_pool3d_backward(aten._adaptive_avg_pool3d(x, [2, 4, 3]) + 1, x), P3, FLOATS,
     tol=LOOSE, **POOL3)
P2 = [((2, 3, 7, 9),), ((3, 5, 6),)]
case("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True), P2, FLOATS)
case("adaptive_max_pool1d", lambda x: F.adaptive_max_pool1d(x, 4, return_indices=True), [((2, 3, 9),)], [F32, F64])


def _amp_bw(x, size, sp):
    f = aten.adaptive_max_pool2d if sp == 2 else aten.adaptive_max_pool3d
    b = aten.adaptive_max_pool2d_backward if sp == 2 else aten.adaptive_max_pool3d_backward
    y, idx = f(x, size)
    return b(y * 2 + 1, x, idx)


case("adaptive_max_pool2d_backward", lambda x: _amp_bw(x, [4, 5], 2), P2, FLOATS)
case("adaptive_max_pool3d_backward", lambda x: _amp_bw(x, [2, 4, 3], 3), P3, [F32, F64])


def _frac(x, u, k, size, sp):
    f = aten.fractional_max_pool2d if sp == 2 else aten.fractional_max_pool3d
    b = aten.fractional_max_pool2d_backward if sp == 2 else aten.fractional_max_pool3d_backward
    y, idx = f(x, k, size, u)
    return y, idx, b(y * 2 + 1, x, k, size, idx)


U01 = lambda *s: Fixed(lambda d: torch.rand(*s, generator=torch.Generator().manual_seed(5)).to(d))  # noqa: E731
case("fractional_max_pool2d", lambda x, u: _frac(x, u, [2, 3], [4, 5], 2), [((2, 3, 7, 9), U01(2, 3, 2))], FLOATS)
case("fractional_max_pool2d_one", lambda x, u: _frac(x, u, [3, 2], [1, 3], 2), [((3, 5, 6), U01(1, 3, 2))], [F32])
case("fractional_max_pool3d", lambda x, u: _frac(x, u, [2, 2, 3], [3, 4, 4], 3), [(P3[0][0], U01(2, 3, 3))],
     [F32, F64])

UP = [((2, 3, 4, 5),)]
UPMODES = {
    "nearest": lambda x: F.interpolate(x, scale_factor=(1.7, 2.0), mode="nearest"),
    "nearest_exact": lambda x: F.interpolate(x, size=(7, 3), mode="nearest-exact"),
    "bilinear": lambda x: F.interpolate(x, size=(7, 8), mode="bilinear"),
    "bilinear_ac": lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
    "bicubic": lambda x: F.interpolate(x, size=(6, 9), mode="bicubic"),
    "bilinear_aa": lambda x: F.interpolate(x, size=(3, 2), mode="bilinear", antialias=True),
    "bicubic_aa": lambda x: F.interpolate(x, size=(2, 7), mode="bicubic", antialias=True),
}
UPMODES_1D = {
    "nearest1d": lambda x: F.interpolate(x, size=9, mode="nearest"),
    "nearest_exact1d": lambda x: F.interpolate(x, scale_factor=0.6, mode="nearest-exact"),
    "linear": lambda x: F.interpolate(x, size=11, mode="linear"),
}
UPMODES_3D = {
    "nearest3d": lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
    "nearest_exact3d": lambda x: F.interpolate(x, size=(3, 5, 4), mode="nearest-exact"),
    "trilinear": lambda x: F.interpolate(x, size=(5, 4, 6), mode="trilinear"),
    "trilinear_ac": lambda x: F.interpolate(x, scale_factor=(1.5, 1, 2), mode="trilinear", align_corners=True),
}


def _vjp(f):
    """f's output and the gradient of sum(out * (2 + out)) wrt its input: the
    upsample backward op (autograd runs it on rgpu like any backward)."""
    def run(x):
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            y = f(x)
            (gx,) = torch.autograd.grad(y, x, y.detach() + 2)
        return y.detach(), gx
    return run


for _n, _f in UPMODES.items():
    case("upsample_" + _n, _vjp(_f), UP, FLOATS if "aa" not in _n else [F32, F64], tol=LOOSE)
for _n, _f in UPMODES_1D.items():
    case("upsample_" + _n, _vjp(_f), [((2, 3, 6),)], [F32, F64], tol=LOOSE)
for _n, _f in UPMODES_3D.items():
    case("upsample_" + _n, _vjp(_f), [((1, 2, 3, 4, 3),)], [F32, F64], tol=LOOSE)

GRID = Fixed(lambda d: torch.rand(2, 3, 4, 2, 3, generator=torch.Generator().manual_seed(7)).to(d) * 2.6 - 1.3)
GRID2 = Fixed(lambda d: torch.rand(2, 4, 5, 2, generator=torch.Generator().manual_seed(8)).to(d) * 2.6 - 1.3)


def _gs_bw(x, grid, mode, pad, align, sp):
    f = aten.grid_sampler_3d if sp == 3 else aten.grid_sampler_2d
    b = aten.grid_sampler_3d_backward if sp == 3 else aten.grid_sampler_2d_backward
    y = f(x, grid, mode, pad, align)
    return (y,) + tuple(b(y * 2 + 1, x, grid, mode, pad, align, [True, True]))


for _m, _p, _a in [(0, 0, False), (0, 1, True), (0, 2, False), (0, 2, True), (1, 0, True), (1, 2, False)]:
    case(f"grid_sampler_3d_m{_m}_p{_p}_a{int(_a)}", lambda x, g, m=_m, p=_p, a=_a: _gs_bw(x, g, m, p, a, 3),
         [((2, 2, 4, 5, 3), GRID)], [F32, F64], tol=LOOSE, layouts=("contig", "strided"))
    case(f"grid_sampler_2d_backward_m{_m}_p{_p}_a{int(_a)}", lambda x, g, m=_m, p=_p, a=_a: _gs_bw(x, g, m, p, a, 2),
         [((2, 3, 5, 6), GRID2)], [F32, F64], tol=LOOSE, layouts=("contig", "strided"))

CONV_POOL_SAMPLE_AUTOGRAD = {
    "conv3d": (lambda x, w, b: F.conv3d(x, w, b, stride=2, padding=1), [(2, 3, 5, 6, 6), (4, 3, 3, 3, 3), (4,)]),
    "conv_transpose3d": (lambda x, w: F.conv_transpose3d(x, w, stride=(2, 1, 2), padding=1, output_padding=(1, 0, 0)),
                         [(1, 4, 3, 4, 3), (4, 2, 3, 3, 2)]),
    "avg_pool3d": (lambda x: F.avg_pool3d(x, 3, 2, 1), [(2, 2, 5, 6, 5)]),
    "max_pool3d": (lambda x: F.max_pool3d(x, 2, 1), [(2, 2, 4, 5, 4)]),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), [(2, 2, 5, 6, 5)]),
    "adaptive_max_pool1d": (lambda x: F.adaptive_max_pool1d(x, 4), [(2, 3, 9)]),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (3, 4)), [(2, 3, 7, 9)]),
    "adaptive_max_pool3d": (lambda x: F.adaptive_max_pool3d(x, (2, 3, 4)), [(2, 3, 5, 6, 7)]),
    "fractional_max_pool2d": (lambda x: F.fractional_max_pool2d(
        x, 2, output_size=(3, 4), _random_samples=torch.full((2, 3, 2), 0.3, dtype=x.dtype, device=x.device)),
        [(2, 3, 7, 9)]),
    "fractional_max_pool3d": (lambda x: F.fractional_max_pool3d(
        x, 2, output_size=(3, 3, 4), _random_samples=torch.full((2, 3, 3), 0.6, dtype=x.dtype, device=x.device)),
        [(2, 3, 5, 6, 7)]),
    "grid_sample3d": (lambda x, g: F.grid_sample(x, g.tanh() * 1.2, padding_mode="reflection",
                                                    align_corners=False),
                      [(2, 2, 4, 5, 3), (2, 3, 4, 2, 3)]),
    "grid_sample2d": (lambda x, g: F.grid_sample(x, g.tanh() * 1.2, padding_mode="border", align_corners=True),
                      [(2, 3, 5, 6), (2, 4, 5, 2)]),
    **{"interpolate_" + n: (f, [(2, 3, 4, 5)]) for n, f in UPMODES.items()},
    **{"interpolate_" + n: (f, [(2, 3, 6)]) for n, f in UPMODES_1D.items()},
    **{"interpolate_" + n: (f, [(1, 2, 3, 4, 3)]) for n, f in UPMODES_3D.items()},
}


@pytest.mark.parametrize("dt", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CONV_POOL_SAMPLE_AUTOGRAD))
def test_autograd_conv_pool_sample(name, dt):
    fn, shapes = CONV_POOL_SAMPLE_AUTOGRAD[name]
    _grads(fn, [sample(s, dt, i) for i, s in enumerate(shapes)])
# --- index ops
_NAN_SRC = Fixed(lambda d: torch.tensor([[1.0, float("nan"), -2.0, 0.5], [float("nan"), 3.0, 4.0, -1.0]]).to(d))
for _red in ("sum", "prod", "mean", "amax", "amin"):
    for _incl in (True, False):
        case(f"scatter_reduce_{_red}{'' if _incl else '_noself'}",
             lambda x, i, s, r=_red, inc=_incl: torch.scatter_reduce(x, 1, i, s, r, include_self=inc),
             [((3, 5), Idx((3, 6), 5), (3, 6)), ((6,), Idx((9,), 6), (9,)), ((2, 0), Idx((2, 0), 1), (2, 0))],
             FLOATS + [I64, I32, U8], tol=LOOSE)
case("scatter_reduce_inplace_dim0", lambda x, i, s: x.clone().scatter_reduce_(0, i, s, "amax", include_self=False),
     [((4, 3, 2), Idx((5, 3, 2), 4, I32), (6, 3, 2))], [F32, I16, BOOL])
case("scatter_reduce_bool", lambda x, i, s: (torch.scatter_reduce(x, 0, i, s, "sum"), torch.scatter_reduce(x, 0, i, s, "prod"),
                                             torch.scatter_reduce(x, 0, i, s, "amin", include_self=False)),
     [((4, 3), Idx((5, 3), 4), (5, 3))], [BOOL])
case("scatter_reduce_nan", lambda x, i, s: (torch.scatter_reduce(x, 1, i, s, "amax"),
                                            torch.scatter_reduce(x, 1, i, s, "amin", include_self=False)),
     [((2, 3), Fixed(lambda d: torch.tensor([[0, 0, 1, 1], [2, 2, 2, 0]])), _NAN_SRC)], [F32, F64, BF16])
case("index_reduce", lambda x, i, s: tuple(torch.index_reduce(x, 0, i, s, r, include_self=inc)
                                           for r in ("prod", "mean", "amax", "amin") for inc in (True, False)),
     [((5, 3), Idx((7,), 5), (7, 3))], [F32, F64, I64], tol=LOOSE)
case("index_reduce_dim1_", lambda x, i, s: x.clone().index_reduce_(1, i, s, "mean"),
     [((3, 5), Idx((4,), 5, I32), (3, 4))], [F32, F16])
case("segment_reduce", lambda d, L: tuple(torch.segment_reduce(d, r, lengths=L, initial=ini)
                                         for r in ("sum", "mean", "max", "min", "prod") for ini in (None, 2.0)),
     [((6, 3), Fixed(lambda d: torch.tensor([2, 0, 3, 1])))], [F32, F64], tol=LOOSE)
case("segment_reduce_offsets", lambda d, o: torch.segment_reduce(d, "mean", offsets=o, axis=0),
     [((5,), Fixed(lambda d: torch.tensor([0, 2, 2, 5])))], [F32])
case("put", lambda x, i, s: (torch.put(x, i, s), x.clone().put_(i, s, accumulate=True)),
     [((3, 4), Idx((5,), 12, neg=True), (5,))], [F32, F64, I64], tol=LOOSE)
case("masked_scatter", lambda x, m, s: (x.masked_scatter(m, s), x.clone().masked_scatter_(m[0], s)),
     [((3, 4), Fixed(lambda d: sample((3, 4), BOOL, 5)), (14,))], [F32, I64, BOOL])
case("nonzero_static", lambda x: (torch.nonzero_static(x, size=4), torch.nonzero_static(x, size=20, fill_value=-7)),
     [((3, 4), "normal"), ((2, 3, 2),), ((0, 3),)], [F32, BOOL])
case("embedding_max_norm", lambda w, i: (F.embedding(i, w, max_norm=2.0), F.embedding(i, w, max_norm=1.5, norm_type=1.0)),
     [((8, 3), Idx((2, 5), 8))], [F32, F64], tol=LOOSE)
for _m in ("sum", "mean", "max"):
    case(f"embedding_bag_{_m}", lambda w, i, o, m=_m: (F.embedding_bag(i, w, o[:-1], mode=m),
                                                      F.embedding_bag(i, w, o[:-1], mode=m, padding_idx=3),
                                                      F.embedding_bag(i, w, o, mode=m, include_last_offset=True)),
         [((10, 3), Idx((9,), 10), Fixed(lambda d: torch.tensor([0, 2, 2, 7, 9])))], [F32, F64], tol=LOOSE)
case("embedding_bag_2d_psw", lambda w, i, p: F.embedding_bag(i, w, per_sample_weights=p, mode="sum"),
     [((10, 3), Idx((3, 4), 10), (3, 4))], [F32, F64], tol=LOOSE)
case("addbmm", lambda x, a, b: (torch.addbmm(x, a, b), torch.addbmm(x[0], a, b, beta=0.5, alpha=-2)),
     [((3, 5), (4, 3, 2), (4, 2, 5))], [F32, F64], tol=LOOSE)
case("bilinear", lambda a, b, w, bias: F.bilinear(a, b, w, bias), [((4, 3), (4, 2), (5, 3, 2), (5,))],
     [F32, F64], tol=LOOSE)
case("cdist", lambda a, b: tuple(torch.cdist(a, b, p) for p in (2.0, 1.0, 0.0, 0.5, 3.0, float("inf"))),
     [((2, 4, 3), (2, 5, 3)), ((30, 3), (4, 3))], [F32, F64], tol=LOOSE)
case("pdist", lambda a: tuple(F.pdist(a, p) for p in (2.0, 1.0, float("inf"))), [((5, 3),), ((1, 3),)],
     [F32, F64], tol=LOOSE)
# --- nn modules' ops
def _ctc(x, t, il, tl, red="mean", zinf=False, norm=True):
    """F.ctc_loss and its gradient (through _ctc_loss_backward) for x (T, N, C):
    log_softmax(x), or x itself as the log-probabilities (its layout reaches the op)."""
    x = x.detach().requires_grad_()
    lp = x.log_softmax(2) if norm else x
    loss = F.ctc_loss(lp, t, il, tl, reduction=red, zero_infinity=zinf)
    (g,) = torch.autograd.grad(loss.sum() if red == "none" else loss, x)
    return loss, g


_CTC_T2 = Fixed(lambda dt: torch.tensor([[1, 2, 2], [3, 1, 4], [2, 0, 0]]))        # padded, a repeat
_CTC_T1 = Fixed(lambda dt: torch.tensor([1, 2, 2, 3, 1, 4, 2]))                     # concatenated 3+3+1
case("ctc_loss_mean_lists", lambda x, t: _ctc(x, t, [6, 5, 3], [3, 2, 0], norm=False),
     [((6, 3, 5), _CTC_T2)], [F32, F64], tol=LOOSE)
case("ctc_loss_concat_none", lambda x, t, il, tl: _ctc(x, t, il, tl, "none"),
     [((7, 3, 5), _CTC_T1, Fixed(lambda dt: torch.tensor([7, 6, 2])), Fixed(lambda dt: torch.tensor([3, 3, 1])))],
     [F32, F64], tol=LOOSE, layouts=("contig",))
case("ctc_loss_sum_zero_infinity", lambda x, t, il, tl: _ctc(x, t, il, tl, "sum", zinf=True),
     [((5, 3, 5), _CTC_T2, Fixed(lambda dt: torch.tensor([5, 2, 4], dtype=I32)),
       Fixed(lambda dt: torch.tensor([3, 3, 1], dtype=I32)))],
     [F32, F64], tol=LOOSE, layouts=("contig",))


def _cells(x):
    """The fused cells: rgpu's ops, or on the CPU (where ATen has no kernel for
    them) the aten math of the CUDA kernels, written in decomp.py."""
    from rgpu import decomp
    if x.device.type == "cpu":
        return (decomp._fused_lstm_cell, decomp._fused_lstm_cell_backward, decomp._fused_gru_cell,
                decomp._fused_gru_cell_backward)
    return (aten._thnn_fused_lstm_cell, aten._thnn_fused_lstm_cell_backward_impl, aten._thnn_fused_gru_cell,
            aten._thnn_fused_gru_cell_backward)


def _lstm_cell(ig, hg, cx, ib, hb, ghy, gcy):
    cell, back, _, _ = _cells(ig)
    hy, cy, ws = cell(ig, hg, cx, ib, hb)
    gg, gcx, gb = back(ghy, gcy, cx, cy, ws, True)
    gg2, gcx2, _ = back(None, gcy, cx, cy, ws, False)
    hy2, cy2, _ = cell(ig, hg, cx)
    return hy, cy, ws, gg, gcx, gb, gg2, gcx2, hy2, cy2


def _gru_cell(ig, hg, hx, ib, hb, ghy):
    _, _, cell, back = _cells(ig)
    hy, ws = cell(ig, hg, hx, ib, hb)
    hy2, _ = cell(ig, hg, hx)
    return (hy, ws, hy2) + tuple(back(ghy, ws, True))


case("lstm_cell", _lstm_cell, [((3, 8), (3, 8), (3, 2), (8,), (8,), (3, 2), (3, 2))], [F32, F64], tol=LOOSE)
case("gru_cell", _gru_cell, [((3, 6), (3, 6), (3, 2), (6,), (6,), (3, 2))], [F32, F64], tol=LOOSE)

# --- sorting
SR = [((3, 5),), ((2, 3, 4),), ((0, 3),), ((),)]
_NANS = Fixed(lambda dt: torch.tensor([[1.0, float("nan"), -0.0, 0.0, 2.0, float("nan"), -float("inf"), 1.0],
                                       [3.0, 2.0, 1.0, 0.0, -1.0, -2.0, -3.0, 4.0]]).to(dt))
_MODES = Fixed(lambda dt: torch.tensor([[1, 2, 2, 3, 3, 0], [5, 5, 5, 1, 1, 1], [0, 0, 0, 0, 0, 0], [4, 3, 2, 1, 0, 6]]).to(dt))
_BOUNDS = Fixed(lambda dt: torch.tensor([-5, -1, 0, 2, 2, 7]).to(dt))
_BOUNDS2 = Fixed(lambda dt: torch.tensor([[-5, -1, 0, 2, 2, 7], [-9, -8, 0, 1, 3, 3], [0, 0, 0, 1, 1, 1]]).to(dt))
_REPEATS = Fixed(lambda dt: torch.tensor([1, 0, 3, 2]))
case("sort", lambda x: torch.sort(x), SR, NUMS + [BOOL])
case("sort_stable_desc", lambda x: torch.sort(x, 0, descending=True, stable=True), SR[:2], NUMS + [BOOL])
case("sort_nan", lambda x: (torch.sort(x, stable=True), torch.sort(x, 0, descending=True, stable=True),
                            torch.msort(x), torch.argsort(x, descending=True, stable=True)), [(_NANS,)], FLOATS)
case("sort_long_row", lambda x: torch.sort(x, stable=True), [((2, 300), I32)], [F32], layouts=("contig", "T"))
case("argsort_msort", lambda x: (torch.argsort(x, 1, stable=True), torch.msort(x)), SR[:1], [F32, I64])
case("topk", lambda x: (torch.topk(x, 2), torch.topk(x, 3, 0, largest=False)), [((4, 5),)], [F32, F64])
case("kthvalue", lambda x: (torch.kthvalue(x, 2, 1), torch.kthvalue(x, 1, 0, keepdim=True)), [((4, 5),)], [F32, F64])
case("median", lambda x: (torch.median(x), torch.median(x, -1), torch.median(x, 0, keepdim=True)), [((4, 5),), ((),)],
     [F32, F64])
case("median_nan", lambda x: (torch.median(x), torch.median(x, 1), torch.nanmedian(x), torch.nanmedian(x, 1)),
     [(_NANS,)], FLOATS)
case("nanmedian", lambda x: (torch.nanmedian(x), torch.nanmedian(x, 0)), [((4, 5),)], [F32, I64])
case("mode", lambda x: (torch.mode(x), torch.mode(x, 0, keepdim=True)), [(_MODES,)], NUMS)
case("mode_layouts", lambda x: torch.mode(x, 1), [((3, 4), I64)], [F32])
case("cummax_cummin", lambda x: (torch.cummax(x, -1), torch.cummin(x, 0)), SR, NUMS + [BOOL])
case("cummax_nan", lambda x: (torch.cummax(x, 1), torch.cummin(x, 1)), [(_NANS,)], FLOATS)
case("logcumsumexp", lambda x: torch.logcumsumexp(x, -1), SR, FLOATS)
case("logcumsumexp_inf", lambda x: torch.logcumsumexp(x, 1), [(_NANS,)], FLOATS)
case("cumprod", lambda x: torch.cumprod(x, -1), [(((3, 5), "unit"),), ((0, 3),), ((),)], NUMS + [BOOL])
case("cumprod_dtype", lambda x: (torch.cumprod(x, 0, dtype=F64), x.clone().cumprod_(1)), [(((5, 3), "unit"),)], [F32, I32])
case("searchsorted", lambda b, v: (torch.searchsorted(b, v), torch.searchsorted(b, v, right=True),
                                   torch.searchsorted(b, v, side="right", out_int32=True),
                                   torch.searchsorted(b, 2), torch.bucketize(v, b), torch.bucketize(v, b, right=True)),
     [(_BOUNDS, (3, 4))], [F32, F64, I64, I32])
case("searchsorted_nd", lambda b, v: (torch.searchsorted(b, v), torch.searchsorted(b, v, right=True)),
     [(_BOUNDS2, (3, 4))], [F32, I64])
case("searchsorted_sorter", lambda x, v: torch.searchsorted(x, v, sorter=torch.argsort(x, stable=True)),
     [((6,), (2, 5))], [F32, I64])
case("histc", lambda x: (torch.histc(x, 5), torch.histc(x, 4, -2, 2), torch.histc(x, 3, 1, 1)), SR[:2], [F32, F64])
case("histogram", lambda x, w: (torch.histogram(x, 5), torch.histogram(x, 4, range=(-2.0, 2.0), weight=w),
                                 torch.histogram(x, torch.tensor([-3.0, -1.0, 0.0, 0.5, 4.0], dtype=x.dtype,
                                                                 device=x.device), weight=w, density=True),
                                 torch.histogram(x * 0 + 1, 3)), [((3, 5), ((3, 5), "pos"))], [F32, F64])
case("repeat_interleave", lambda r, x: (torch.repeat_interleave(r), x.repeat_interleave(r, dim=0)),
     [(_REPEATS, (4, 3))], [F32])
case("equal_allclose", lambda a, b: (torch.equal(a, b), torch.equal(a, a.clone()), torch.allclose(a, b),
                                     torch.allclose(a, a * 1.0000001)), [((3, 4), (3, 4))], [F32, F64])
case("quantile", lambda x: (torch.quantile(x, 0.3, dim=1),
                            torch.nanquantile(x, torch.tensor([0.25, 0.5], dtype=x.dtype, device=x.device), dim=0)),
     [((4, 5),)], [F32, F64])
_RUNS = Fixed(lambda dt: torch.tensor([[1, 1, 2, 2, 2, 3], [3, 1, 1, 0, 0, 1]]).to(dt))
case("unique_consecutive", lambda x: (torch.unique_consecutive(x),
                                      torch.unique_consecutive(x, return_inverse=True, return_counts=True)),
     [(_RUNS,)], [F32, I64, BOOL])
case("isin", lambda a, b: (torch.isin(a, b), torch.isin(a, b, invert=True)), [((3, 4), (40,))], [I64])

# --- linalg -------------------------------------------------------------------------------------

def _eye_like(a):
    return torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)


def _spd(a):
    """A symmetric positive-definite matrix (batch) from a square a."""
    return a @ a.mT + a.shape[-1] * _eye_like(a)


def _wc(a):
    """A well-conditioned square matrix from a."""
    return a + 2 * a.shape[-1] * _eye_like(a)


LA = [((3, 4, 4), (3, 4, 2)), ((4, 4), (4, 3)), ((2, 1, 3, 3), (4, 3, 1)), ((0, 3, 3), (0, 3, 2))]
LA1 = [((2, 4, 4),), ((5, 5),), ((0, 3, 3),)]
LAF = [F32, F64]
case("linalg_cholesky", lambda a: (torch.linalg.cholesky_ex(_spd(a)), torch.linalg.cholesky(_spd(a), upper=True)),
     LA1, LAF, tol=LOOSE)
case("linalg_cholesky_error", lambda a: torch.linalg.cholesky(-_spd(a)), LA1[:1], LAF, layouts=("contig",))
case("linalg_cholesky_info", lambda a: torch.linalg.cholesky_ex(-_spd(a)).info, LA1[:1], LAF, layouts=("contig",))
case("linalg_lu_factor", lambda a: torch.linalg.lu_factor_ex(_wc(a)), LA1 + [((2, 5, 3),), ((3, 4),)], LAF, tol=LOOSE)
case("lu_unpack", lambda a: torch.lu_unpack(*torch.linalg.lu_factor(a)), LA1 + [((2, 5, 3),), ((3, 4),)], LAF,
     tol=LOOSE)
case("linalg_lu", lambda a: torch.linalg.lu(a), LA1[:2], LAF, tol=LOOSE)
case("linalg_lu_solve", lambda a, b: (torch.linalg.lu_solve(*torch.linalg.lu_factor(_wc(a)), b),
                                      torch.linalg.lu_solve(*torch.linalg.lu_factor(_wc(a)), b, adjoint=True),
                                      torch.linalg.lu_solve(*torch.linalg.lu_factor(_wc(a)), b.mT, left=False)),
     LA, LAF, tol=LOOSE)
case("linalg_solve", lambda a, b: (torch.linalg.solve(_wc(a), b), torch.linalg.solve_ex(_wc(a), b.mT, left=False),
                                   torch.linalg.solve(_wc(a), b[..., 0])), LA, LAF, tol=LOOSE)
case("linalg_inv", lambda a: (torch.linalg.inv(_wc(a)), torch.linalg.inv_ex(_wc(a))), LA1, LAF, tol=LOOSE)
case("linalg_inv_singular", lambda a: torch.linalg.inv_ex(a * 0).info, LA1[:1], LAF, layouts=("contig",))
case("linalg_inv_error", lambda a: torch.linalg.inv(a * 0), LA1[:1], LAF, layouts=("contig",))
case("linalg_det", lambda a: (torch.linalg.det(a), torch.linalg.slogdet(a), torch.logdet(_spd(a))),
     LA1, LAF, tol=LOOSE)
case("linalg_det_singular", lambda a: (torch.linalg.det(a * 0), torch.linalg.slogdet(a * 0)), LA1[:1], LAF,
     layouts=("contig",))
case("linalg_solve_triangular",
     lambda a, b: (torch.linalg.solve_triangular(_wc(a), b, upper=True),
                   torch.linalg.solve_triangular(_wc(a), b, upper=False, unitriangular=True),
                   torch.linalg.solve_triangular(_wc(a), b.mT, upper=True, left=False)), LA, LAF, tol=LOOSE)
case("triangular_solve", lambda a, b: (torch.triangular_solve(b, _wc(a)),
                                       torch.triangular_solve(b, _wc(a), upper=False, transpose=True,
                                                              unitriangular=True)), LA, LAF, tol=LOOSE)
case("cholesky_solve", lambda a, b: (torch.cholesky_solve(b, torch.linalg.cholesky(_spd(a))),
                                     torch.cholesky_solve(b, torch.linalg.cholesky(_spd(a), upper=True), upper=True)),
     LA, LAF, tol=LOOSE)
case("cholesky_inverse", lambda a: (torch.cholesky_inverse(torch.linalg.cholesky(_spd(a))),
                                    torch.cholesky_inverse(torch.linalg.cholesky(_spd(a), upper=True), upper=True)),
     LA1, LAF, tol=LOOSE)


def _svd_cmp(r):
    """SVD outputs up to the signs of singular-vector pairs: S, U Vh-products, |U|, |Vh| (reduced)."""
    u, s_, vh = r
    return s_, u.abs(), vh.abs(), (u * s_.unsqueeze(-2)) @ vh


LAQ = [((2, 5, 3),), ((3, 4),), ((4, 4),), ((0, 3, 2),)]
case("linalg_qr", lambda a: (torch.linalg.qr(a), torch.linalg.qr(a, mode="r")[1],
                             torch.linalg.qr(a, mode="complete")[1]), LAQ, LAF, tol=LOOSE)
case("geqrf_householder", lambda a: (torch.geqrf(a), torch.linalg.householder_product(*torch.geqrf(a))),
     [((2, 5, 3),), ((4, 4),)], LAF, tol=LOOSE)
case("ormqr", lambda a, c: (torch.ormqr(*torch.geqrf(a), c), torch.ormqr(*torch.geqrf(a), c, transpose=True),
                            torch.ormqr(*torch.geqrf(a), c.mT, left=False)),
     [((2, 5, 3), (2, 5, 4)), ((4, 4), (4, 2))], LAF, tol=LOOSE)
case("linalg_eigh", lambda a: (torch.linalg.eigvalsh(a + a.mT), torch.linalg.eigh(a + a.mT, UPLO="U")[0],
                               torch.linalg.eigh(a + a.mT)[1].abs()), LA1, LAF, tol=LOOSE)
case("linalg_svd", lambda a: (_svd_cmp(torch.linalg.svd(a, full_matrices=False)), torch.linalg.svdvals(a),
                              torch.linalg.svd(a)[1]), [((2, 5, 3),), ((3, 5),), ((4, 4),), ((0, 3, 2),)], LAF,
     tol=LOOSE)
case("linalg_pinv", lambda a: (torch.linalg.pinv(a), torch.linalg.pinv(a @ a.mT, hermitian=True)),
     [((2, 5, 3),), ((3, 4),)], LAF, tol=LOOSE)


# --- complex (the hook's complex layer, torchhook/rgpu/cplx.py, over real records;
# copy_/cat/index/gather/scatter records with complex views on both backends)
CU = [((3, 5),), ((2, 3, 4),), ((0, 3),), ((),)]
CB = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((3, 4), ())]
for name in ("neg", "abs", "angle", "sgn", "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "rsqrt",
             "reciprocal", "square", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan",
             "asinh", "acosh", "atanh", "sigmoid", "exp2", "sinc", "isnan", "isfinite", "isinf",
             "logical_not", "conj_physical", "resolve_conj"):
    case("c_" + name, getattr(torch, name), CU, CPLX, tol=LOOSE)
for name in ("add", "sub", "mul", "div", "eq", "ne", "logical_and", "logical_or", "logical_xor"):
    case("c_" + name, getattr(torch, name), CB, CPLX, tol=LOOSE)
case("c_pow", torch.pow, CB[:3], CPLX, tol=LOOSE)
case("c_pow_scalar", lambda x: (x ** 2, x ** 0.5, x ** -1, x ** 2.5, x ** (1 + 1j)), CU[:2], CPLX, tol=LOOSE)
case("c_scalar_ops", lambda x: (x + 1j, 2j * x, x - (1 - 2j), (3 + 1j) / x, x * 2.5, 1 - x), CU[:2], CPLX, tol=LOOSE)
case("c_mixed_real", lambda x, y: (x + y, x * y, y / x, torch.where(y > 0, x, y)),
     [((3, 4), ((3, 4), F32)), ((2, 3, 4), ((4,), F64))], CPLX, tol=LOOSE)
case("c_inplace", lambda x, y: x.clone().mul_(y).add_(y, alpha=2 - 1j).div_(y).neg_(), CB[:2], CPLX, tol=LOOSE)
case("c_conj_views", lambda x: (x.conj(), x.conj().T.contiguous(), x.conj().imag, x.mH, x.conj() * x,
                                torch._neg_view(x), x.conj().clone(), x.conj()[0]),
     [((3, 4),), ((2, 3, 4),)], CPLX)
case("c_views", lambda x: (torch.view_as_real(x), torch.view_as_real(x)[..., 1], x.real, x.imag,
                           torch.view_as_complex(torch.view_as_real(x).contiguous()), x.T, x.reshape(-1)),
     [((3, 4),), ((2, 3, 4),)], CPLX)
case("c_casts", lambda x: (x.to(torch.complex128), x.to(torch.complex64), x.real.to(torch.complex64),
                           x.abs().to(x.dtype), x.to(torch.complex32).to(torch.complex64)), CU[:2], CPLX)
case("c_complex_polar", lambda x, y: (torch.complex(x, y), torch.polar(x.abs(), y)),
     [((3, 4), (3, 4)), ((2, 3, 4), (4,))], [F32, F64], tol=LOOSE)
case("c_fill", lambda x: (torch.full_like(x, 2 - 3j), x.clone().fill_(1j), torch.zeros_like(x), torch.ones_like(x),
                          x.clone().zero_(), torch.full(x.shape, 1 + 1j, dtype=x.dtype, device=x.device)),
     CU[:3], CPLX)
case("c_where", lambda x, y: (torch.where(x.real > 0, x, y), torch.where(x.real > 0, x, 1j),
                              x.masked_fill(x.imag > 0, 2 + 2j)), CB[:3], CPLX)
case("c_reduce", lambda x: (x.sum(), x.sum(0), x.sum(-1, keepdim=True), x.mean(), x.mean(0), x.prod(-1),
                            x.var(0), x.std(-1), torch.linalg.vector_norm(x), torch.linalg.vector_norm(x, 1, -1),
                            x.norm(), x.cumsum(0), x.cumprod(-1), torch.logsumexp(x, -1)),
     [((3, 5),), ((2, 3, 4),)], CPLX, tol=LOOSE)
case("c_any_all_nonzero", lambda x: (x.any(), x.all(-1), torch.count_nonzero(x), torch.nonzero(x)),
     [((3, 5),)], CPLX)
case("c_movement", lambda x: (torch.cat([x, x * 1j], -1), torch.stack([x, x]), x.flip(-1), torch.roll(x, 1, 0),
                              x.tril(), x.triu(1), F.pad(x, (1, 2)), F.pad(x, (1, 0), value=0.5),
                              x.repeat(2, 1), x[1:, ::2], x.t().contiguous()), [((3, 4),)], CPLX)
case("c_index", lambda x, i: (x[i], x.index_select(0, i), x.gather(0, i[:, None].expand(-1, 4)),
                              x.clone().index_put_((i,), x[:2] * 1j), x.clone().index_put_((i,), x[:2], True),
                              x.clone().scatter_(0, i[:, None].expand(-1, 4), x[:2]),
                              x.clone().scatter_add_(0, i[:, None].expand(-1, 4), x[:2]),
                              x.clone().index_add_(0, i, x[:2], alpha=2), x.masked_select(x.real > 0)),
     [((3, 4), Idx((2,), 3))], CPLX)
case("c_addc_lerp", lambda x, y: (torch.addcmul(x, x, y, value=2), torch.addcdiv(x, x, y + 3),
                                  torch.lerp(x, y, 0.3), torch.dot(x.flatten(), y.flatten()),
                                  torch.vdot(x.flatten(), y.flatten())), [((3, 4), (3, 4))], CPLX, tol=LOOSE)
# --- complex matmul, matrix_exp ------------------------------------------------------------
# Complex operands are view_as_complex of (..., 2) F32/F64 inputs (complex64/complex128);
# results come back view_as_real, so the float tolerances apply. Transposed and
# strided operands are made inside the expressions.

def _cx(*ts):
    return [torch.view_as_complex(t) for t in ts]


def _cmm(a, b):
    a, b = _cx(a, b)
    return torch.view_as_real(torch.mm(a, b)), torch.view_as_real(torch.mm(a.mT.contiguous().mT, b[:, ::2]))


def _cbmm(a, b):
    a, b = _cx(a, b)
    return torch.view_as_real(torch.bmm(a, b)), torch.view_as_real(torch.matmul(a.mT.contiguous().mT, b[0]))


def _caddmm(s, a, b):
    s, a, b = _cx(s, a, b)
    nan = torch.full_like(s, float("nan"))
    return (torch.view_as_real(torch.addmm(s, a, b, beta=0.5, alpha=-2)),
            torch.view_as_real(torch.addmm(nan, a, b, beta=0)),
            torch.view_as_real(torch.addmm(s[0], a, b, beta=2 + 0j, alpha=1.5 + 0j)))


def _cbaddbmm(s, a, b):
    s, a, b = _cx(s, a, b)
    return torch.view_as_real(torch.baddbmm(s, a, b, beta=-1, alpha=0.25))


CM = dict(tol=LOOSE, layouts=("contig",))
case("complex_mm", _cmm, [((3, 4, 2), (4, 10, 2)), ((0, 4, 2), (4, 10, 2)), ((3, 0, 2), (0, 10, 2))], LAF, **CM)
case("complex_bmm", _cbmm, [((2, 3, 4, 2), (2, 4, 5, 2))], LAF, **CM)
case("complex_addmm", _caddmm, [((3, 5, 2), (3, 4, 2), (4, 5, 2))], LAF, **CM)
case("complex_baddbmm", _cbaddbmm, [((2, 3, 5, 2), (2, 3, 4, 2), (2, 4, 5, 2))], LAF, **CM)
case("matrix_exp", lambda a: (torch.linalg.matrix_exp(a), torch.matrix_exp(a * 0.01)),
     [((2, 4, 4),), ((3, 3),)], LAF, tol=LOOSE)
# --- fft (complex outputs compared through view_as_real)
_FFT_C = {F32: torch.complex64, F64: torch.complex128}
FFT_IN = [((3, 5),), ((2, 3, 8),)]
case("fft_r2c", lambda x: (torch.view_as_real(torch.fft.rfft(x)), torch.view_as_real(torch.fft.rfft2(x, norm="ortho")),
                           torch.view_as_real(aten._fft_r2c(x, [0], 2, False))), FFT_IN, [F32, F64], tol=LOOSE)
case("fft_c2c", lambda x: (torch.view_as_real(torch.fft.fft(x.to(_FFT_C[x.dtype]))),
                           torch.view_as_real(torch.fft.ifftn(x.to(_FFT_C[x.dtype]), norm="forward"))),
     FFT_IN, [F32, F64], tol=LOOSE)
case("fft_c2r", lambda x: (torch.fft.irfft(x.to(_FFT_C[x.dtype])), torch.fft.irfft2(x.to(_FFT_C[x.dtype]), norm="ortho"),
                           aten._fft_c2r(x.to(_FFT_C[x.dtype]), [0, x.dim() - 1], 1, 2 * x.shape[-1] - 1)), FFT_IN, [F32, F64], tol=LOOSE)
# --- complex linalg ---------------------------------------------------------------------------
# complex64/complex128 through the LINALG ops, inputs made on the CPU (Fixed) so that only linalg
# ops run on rgpu; complex outputs compared as view_as_real. Eigenvectors and singular vectors
# (phases differ between LAPACKs) are checked by reconstruction in test_linalg_complex.py.

C64, C128 = torch.complex64, torch.complex128
LAC = [C64, C128]


def _cx(shape, kind="gen", seed=0):
    """A complex input (Fixed): general, well-conditioned ("wc") or Hermitian positive-definite ("hpd")."""
    def fn(dt):
        g = torch.Generator().manual_seed(seed)
        a = torch.complex(torch.randn(shape, generator=g, dtype=F64), torch.randn(shape, generator=g, dtype=F64))
        eye = torch.eye(shape[-1], dtype=C128)
        if kind == "wc":
            a = a + 2 * shape[-1] * eye
        elif kind == "zero":
            a = a * 0
        elif kind == "hpd":
            a = a @ a.mH + shape[-1] * eye
        return a.to(dt)
    return Fixed(fn)


def _vr(r):
    """Complex tensors as their real views (tuples kept)."""
    if isinstance(r, (tuple, list)):
        return tuple(_vr(x) for x in r)
    if not (isinstance(r, torch.Tensor) and r.is_complex()):
        return r
    return torch.view_as_real(r.resolve_conj() if r.is_conj() else r)


CLA_SQ = [(_cx((2, 4, 4), "wc"), _cx((2, 4, 3), seed=1)), (_cx((3, 3), "wc"), _cx((3, 2), seed=1))]
case("cla_cholesky", lambda a: _vr((torch.linalg.cholesky_ex(a), torch.linalg.cholesky(a.mT, upper=True))),
     [(_cx((2, 4, 4), "hpd"),), (_cx((3, 3), "hpd"),)], LAC, tol=LOOSE, layouts=("contig",))
case("cla_cholesky_error", lambda a: torch.linalg.cholesky(-a), [(_cx((2, 3, 3), "hpd"),)], LAC,
     layouts=("contig",))
case("cla_lu", lambda a: _vr((torch.linalg.lu_factor_ex(a), torch.lu_unpack(*torch.linalg.lu_factor(a.mT)),
                              torch.linalg.lu(a))),
     [(_cx((2, 4, 4), "wc"),), (_cx((2, 5, 3)),), (_cx((3, 4)),)], LAC, tol=LOOSE, layouts=("contig",))
case("cla_lu_solve", lambda a, b: _vr((torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
                                       torch.linalg.lu_solve(*torch.linalg.lu_factor(a.mT), b, adjoint=True))),
     CLA_SQ, LAC, tol=LOOSE, layouts=("contig",))
case("cla_solve_inv", lambda a, b: _vr((torch.linalg.solve(a, b), torch.linalg.solve_ex(a.mT, b.mT, left=False),
                                        torch.linalg.solve(a, b[..., 0]), torch.linalg.inv_ex(a),
                                        torch.linalg.inv(a.mT))),
     CLA_SQ, LAC, tol=LOOSE, layouts=("contig",))
case("cla_inv_singular", lambda a: (torch.linalg.inv_ex(a).info, torch.linalg.lu_factor_ex(a).info),
     [(_cx((2, 3, 3), "zero"),)], LAC, layouts=("contig",))
case("cla_inv_error", lambda a: torch.linalg.inv(a), [(_cx((2, 3, 3), "zero"),)], LAC, layouts=("contig",))
case("cla_det", lambda a, z: _vr((torch.linalg.det(a), torch.linalg.det(a.mT), torch.linalg.slogdet(a),
                                  torch.linalg.slogdet(a.mT), torch.linalg.det(z), torch.linalg.slogdet(z))),
     [(_cx((2, 4, 4)), _cx((2, 2), "zero")), (_cx((3, 3)), _cx((3, 3), "zero")), (_cx((0, 2, 2)), _cx((1, 1), "zero"))],
     LAC, tol=LOOSE, layouts=("contig",))
case("cla_triangular", lambda a, b: _vr((torch.linalg.solve_triangular(a, b, upper=True),
                                         torch.linalg.solve_triangular(a.mT, b, upper=False, unitriangular=True),
                                         torch.linalg.solve_triangular(a, b.mT, upper=True, left=False),
                                         torch.triangular_solve(b, a, upper=False, transpose=True),
                                         torch.triangular_solve(b, a.mT, unitriangular=True))),
     CLA_SQ, LAC, tol=LOOSE, layouts=("contig",))
case("cla_cholesky_solve", lambda a, b: _vr((torch.cholesky_solve(b, torch.linalg.cholesky(a)),
                                             torch.cholesky_solve(b, torch.linalg.cholesky(a, upper=True), upper=True),
                                             torch.cholesky_inverse(torch.linalg.cholesky(a.mT)),
                                             torch.cholesky_inverse(torch.linalg.cholesky(a, upper=True),
                                                                    upper=True))),
     [(_cx((2, 4, 4), "hpd"), _cx((2, 4, 3), seed=1))], LAC, tol=LOOSE, layouts=("contig",))
case("cla_qr", lambda a, c: _vr((torch.linalg.qr(a), torch.linalg.qr(a.mT, mode="complete"),
                                 torch.linalg.qr(a, mode="r")[1], torch.geqrf(a),
                                 torch.linalg.householder_product(*torch.geqrf(a)),
                                 torch.ormqr(*torch.geqrf(a), c), torch.ormqr(*torch.geqrf(a), c, transpose=True),
                                 torch.ormqr(*torch.geqrf(a), c.mT, left=False))),
     [(_cx((2, 5, 3)), _cx((2, 5, 4), seed=1)), (_cx((4, 4)), _cx((4, 2), seed=1))], LAC, tol=LOOSE,
     layouts=("contig",))
case("cla_eigh_svd", lambda a: (torch.linalg.eigvalsh(a), torch.linalg.eigvalsh(a.mT, UPLO="U"),
                                torch.linalg.eigh(a)[0], torch.linalg.svdvals(a), torch.linalg.svdvals(a[..., :3]),
                                torch.linalg.svd(a.mT[..., :2, :])[1]),
     [(_cx((2, 4, 4), "hpd"),), (_cx((0, 3, 3), "hpd"),)], LAC, tol=LOOSE, layouts=("contig",))
case("cla_eig", lambda a: _vr((torch.linalg.eigvals(a), torch.linalg.eig(a.mT)[0])),
     [(_cx((2, 4, 4)),), (_cx((3, 3)),), (_cx((0, 2, 2)),)], LAC, tol=LOOSE, layouts=("contig",))
def _ldl(a, b, herm):
    ld, piv, info = torch.linalg.ldl_factor_ex(a, hermitian=herm)
    return ld, piv, info, torch.linalg.ldl_solve(ld, piv, b, hermitian=herm)


def _sym(kind, shape, seed=0):
    """A symmetric (or Hermitian, kind "herm") indefinite input of the case dtype, real or complex."""
    def fn(dt):
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(shape, generator=g, dtype=F64)
        if dt.is_complex:
            a = torch.complex(a, torch.randn(shape, generator=g, dtype=F64))
        return (a + (a.mH if kind == "herm" else a.mT)).to(dt)
    return Fixed(fn)


def _gen(shape, seed=1):
    def fn(dt):
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(shape, generator=g, dtype=F64)
        return (torch.complex(a, torch.randn(shape, generator=g, dtype=F64)) if dt.is_complex else a).to(dt)
    return Fixed(fn)


case("linalg_ldl", lambda a, b: _vr((_ldl(a, b, False), _ldl(a, b[..., :1], True) if not a.is_complex() else None,
                                     torch.linalg.ldl_factor(a.mT)[0])),
     [(_sym("sym", (2, 5, 5)), _gen((2, 5, 2))), (_sym("sym", (4, 4)), _gen((4, 3))),
      (_sym("sym", (0, 3, 3)), _gen((0, 3, 1)))], LAF + LAC, tol=LOOSE, layouts=("contig",))
def _herm_ldl(i):
    """LD (i = 0) or pivots (1) of a Hermitian complex matrix, factored on the CPU (the cuda backend's
    cuSOLVER has no hetrf; its ldl_solve runs our kernel; factoring is in test_linalg_complex.py)."""
    return Fixed(lambda dt: torch.linalg.ldl_factor(_sym("herm", (2, 5, 5)).fn(dt), hermitian=True)[i])


case("linalg_ldl_solve_herm", lambda ld, piv, b: _vr(torch.linalg.ldl_solve(ld, piv, b, hermitian=True)),
     [(_herm_ldl(0), _herm_ldl(1), _gen((2, 5, 2)))], LAC, tol=LOOSE, layouts=("contig",))
case("linalg_eig", lambda a: _vr((torch.linalg.eigvals(a), torch.linalg.eig(a)[0], torch.linalg.eig(a[:1])[1].shape)),
     [((2, 4, 4),), ((5, 5),), ((0, 3, 3),)], LAF, tol=LOOSE)


# --- running a case --------------------------------------------------------------------

def _params():
    ps = []
    for c in CASES:
        for di, dt in enumerate(c.dtypes):
            for si, spec in enumerate(c.inputs):
                layouts = c.layouts if (si == 0 and di < 2) else ("contig",)
                for lay in layouts:
                    ps.append(pytest.param(c, dt, spec, lay,
                                           id=f"{c.name}-{str(dt)[6:]}-{shp(spec)}-{lay}"))
    return ps


def _flat(r):
    if isinstance(r, (tuple, list)):
        out = []
        for x in r:
            out.extend(_flat(x))
        return out
    return [r]


def check(r, c, tol, label):
    rs, cs = _flat(r), _flat(c)
    assert len(rs) == len(cs), label
    for k, (a, b) in enumerate(zip(rs, cs)):
        what = f"{label} output {k}"
        if b is None:
            assert a is None, what
            continue
        if not isinstance(b, torch.Tensor):
            assert a == b, what
            continue
        assert isinstance(a, rgpu.RemoteTensor), f"{what}: {type(a)}"
        assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
        got = a.cpu()
        assert a.is_conj() == b.is_conj() and a.is_neg() == b.is_neg(), f"{what}: conj/neg bits differ"
        if b.dtype.is_floating_point or b.dtype.is_complex:
            rtol, atol = tol[b.dtype]
            torch.testing.assert_close(got, b, rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda m: f"{what}: {m}")
        else:
            assert torch.equal(got, b), f"{what}: {got} != {b}"


def run_case(c, dt, spec, lay, seed=0):
    cin, rin = make_inputs(spec, dt, lay, seed)
    label = f"{c.name} {dt} {shp(spec)} {lay}"
    try:
        want = c.fn(*cin)
    except Exception as e:      # noqa: BLE001 - the op must fail on rgpu too
        with pytest.raises(Exception):
            _flat_cpu(c.fn(*rin))
        return f"cpu raised {type(e).__name__}"
    got = c.fn(*rin)
    check(got, want, c.tol, label)
    return None


def _flat_cpu(r):
    for x in _flat(r):
        if isinstance(x, torch.Tensor):
            x.cpu()


@pytest.mark.parametrize("c,dt,spec,lay", _params())
def test_op(c, dt, spec, lay):
    run_case(c, dt, spec, lay)


# --- every op of ops.def has a case ---------------------------------------------------------

NOT_COMPUTE = {"uniform_", "normal_", "bernoulli", "random_.from", "randperm", "native_dropout",
               "native_dropout_backward", "nonzero", "masked_select", "_unique2"}


def test_every_op_has_a_case(monkeypatch):
    """Run each case once with the recorder watched: every ops.def op that is not
    control, random or data-dependent must be emitted by some case."""
    seen = set()
    real = _C.record

    def spy(op, outs, ins, args):
        seen.add(op)
        return real(op, outs, ins, args)

    monkeypatch.setattr(_C, "record", spy)
    monkeypatch.setattr(rgpu.dispatch, "_record", spy)
    for c in CASES:
        run_case(c, c.dtypes[0], c.inputs[0], "contig")
    names = _C.op_names
    want = {i for i, n in enumerate(names) if not n.startswith("rgpu::") and n not in NOT_COMPUTE}
    missing = sorted(names[i] for i in want - seen)
    assert not missing, f"ops.def ops without a conformance case: {missing}"


def test_result_type_matches_torch():
    from rgpu.opmap import result_type
    t = {d: torch.zeros(2, dtype=d) for d in ALL}
    z = {d: torch.zeros((), dtype=d) for d in ALL}
    for a in ALL:
        for b in ALL:
            assert result_type(t[a], t[b]) == torch.result_type(t[a], t[b])
            assert result_type(t[a], z[b]) == torch.result_type(t[a], z[b])
        for s in (1, 2.5, True):
            assert result_type(t[a], s) == torch.result_type(t[a], s), (a, s)
            assert result_type(z[a], s) == torch.result_type(z[a], s), (a, s)


# --- autograd through a few ops ---------------------------------------------------------------

def _grads(fn, tensors, idx_inputs=()):
    """Run fn on CPU and rgpu leaves; backward of the sum of the output."""
    cl = [t.clone().requires_grad_(t.is_floating_point()) for t in tensors]
    rl = [t.to(DEV).requires_grad_(t.is_floating_point()) for t in tensors]
    ci = list(idx_inputs)
    ri = [i.to(DEV) for i in idx_inputs]
    oc = fn(*cl, *ci)
    orr = fn(*rl, *ri)
    w = sample(tuple(oc.shape), oc.dtype, 99)
    (oc * w).sum().backward()
    (orr * w.to(DEV)).sum().backward()
    check(orr.detach(), oc.detach(), LOOSE, "forward")
    for k, (a, b) in enumerate(zip(rl, cl)):
        if b.grad is not None:
            check(a.grad, b.grad, LOOSE, f"grad {k}")


AUTOGRAD = {
    "gelu": (lambda x: F.gelu(x), [(3, 4)], ()),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [(3, 4)], ()),
    "silu": (lambda x: F.silu(x), [(3, 4)], ()),
    "relu_tanh_sigmoid": (lambda x: torch.relu(x) + torch.tanh(x) * torch.sigmoid(x), [(3, 4)], ()),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), [(2, 3, 4), (4,), (4,)], ()),
    "softmax": (lambda x: torch.softmax(x, -1), [(3, 5)], ()),
    "log_softmax": (lambda x: torch.log_softmax(x, 0), [(3, 5)], ()),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3), (4,)], ()),
    "embedding": (lambda w, i: F.embedding(i, w), [(10, 4)], (torch.tensor([[1, 2, 1], [9, 0, 1]]),)),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), [(4, 5)], (torch.tensor([0, 4, 2, 2]),)),
    "linear_mse": (lambda x, w, b: ((F.linear(x, w, b) - 1) ** 2).mean(), [(3, 4), (2, 4), (2,)], ()),
    "batch_norm": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [(4, 3, 2, 2), (3,), (3,)], ()),
    "max_pool_avg_pool": (lambda x: F.max_pool2d(x, 2) + F.avg_pool2d(x, 2), [(1, 2, 4, 4)], ()),
    "adaptive_avg_pool": (lambda x: F.adaptive_avg_pool2d(x, 1), [(2, 3, 4, 4)], ()),
    "attention": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                  [(1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)], ()),
    "cat_stack_index": (lambda a, b: torch.stack([a, b])[:, torch.tensor([2, 0])].sum(0) + torch.cat([a, b])[1],
                        [(3, 4), (3, 4)], ()),
    "norm_var_cumsum": (lambda x: x.norm() + x.var(0).sum() + x.cumsum(1).amax(), [(3, 4)], ()),
}


@pytest.mark.parametrize("name", sorted(AUTOGRAD))
def test_autograd(name):
    fn, shapes, idx = AUTOGRAD[name]
    _grads(fn, [sample(s, F32, i) for i, s in enumerate(shapes)], idx)


def test_unsupported_op_names_itself_at_the_call():
    x = torch.ones(3, device=DEV)
    with pytest.raises(NotImplementedError, match=r"aten\.quantize_per_tensor"):
        torch.quantize_per_tensor(x, 0.1, 0, torch.quint8)
    assert x.tolist() == [1.0, 1.0, 1.0]
