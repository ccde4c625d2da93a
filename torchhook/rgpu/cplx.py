"""Complex tensors (complex64, complex128, complex32) on rgpu.

The server stores a complex tensor as ATen does, (re, im) pairs, and runs the
data-movement ops on it directly (ops.def's COMPLEX flag: copy_, fill, cat,
gather, scatter, index, index_put, index_select, masked_select; views of any
kind, view_as_real/view_as_complex included, are plain ALIAS records). The
arithmetic on complex values is done here: each handler views its complex
operands as real (view_as_real: a last dim of 2, no copy), computes the real
and imaginary parts with real ops, and stacks them back (one CAT, then
view_as_complex, no copy). Formulas follow c10::complex / std::complex
(ATen's CPU kernels); the transcendental ones run in float64 for complex64,
so their values are at least as close to the exact ones as CPU's.

Lazy conjugation and negation: x.conj() and _neg_view are ALIAS views whose
wrapper carries PyTorch's conj / neg bit (views of them inherit it, as in
ATen); torch's Conjugate/Negative fallbacks materialise them before most ops,
and the handlers here (copy_, clone, _to_copy, and every complex handler
through resolve()) materialise the rest: a copy, then the imaginary part (or
all) negated.

dispatch.py routes an overload here (route()) when HANDLERS has it and a
call has a complex operand; real calls go to the overload's usual handler at
the cost of one type check per argument."""
import math
import warnings

import torch

from ._dtypes import c10_name
from .tensor import RemoteTensor

aten = torch.ops.aten
_set_conj = torch._C._set_conj
_set_neg = torch._C._set_neg

HANDLERS = {}

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}
_CPLX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128, torch.float16: torch.complex32,
            torch.bfloat16: torch.complex64}


def _is_c(a):
    return isinstance(a, torch.Tensor) and a.dtype.is_complex


def has_complex(args, kwargs):
    """Whether a call has a complex tensor or a Python complex among its operands."""
    for a in args:
        t = type(a)
        if t is RemoteTensor:
            if a.dtype.is_complex:
                return True
        elif t is complex:
            return True
        elif t is list or t is tuple:
            for b in a:
                if type(b) is RemoteTensor and b.dtype.is_complex:
                    return True
        elif isinstance(a, torch.Tensor) and a.dtype.is_complex:
            return True
    if kwargs:
        return has_complex(kwargs.values(), None)
    return False


_CSET = frozenset((torch.complex64, torch.complex128, torch.complex32))
_SLOW = frozenset((complex, list, tuple, torch.Tensor))


def route(real_handler, complex_handler):
    """The handler of an overload with a complex decomposition: complex calls go
    to complex_handler. On the per-op path: a tuple index and a set lookup per
    argument (the dtype is _key's last item)."""
    def handler(func, args, kwargs):
        for a in args:
            ta = type(a)
            if ta is RemoteTensor:
                if a._key[3] in _CSET:
                    return complex_handler(func, args, kwargs)
            elif ta in _SLOW and has_complex((a,), None):
                return complex_handler(func, args, kwargs)
        if kwargs and has_complex((), kwargs):
            return complex_handler(func, args, kwargs)
        return real_handler(func, args, kwargs)
    # a caller that has ruled out complex arguments may take the table handler itself
    handler.table = getattr(real_handler, "table", None)
    return handler


# --- conj / neg bits --------------------------------------------------------------------

def warn_discard():
    warnings.warn("Casting complex values to real discards the imaginary part", UserWarning, stacklevel=3)


# dispatch.py's view handler and its copy of a tensor's stored values, handed
# down by dispatch at its import (use_dispatch): dispatch imports this module,
# so this one does not import dispatch.
_view_handler = _clone_raw = None


def use_dispatch(view_handler, clone_raw):
    """view_handler(func, args, kwargs): dispatch's handler of view ops;
    clone_raw(x): a copy of x's values as stored, its conj/neg bits not applied."""
    global _view_handler, _clone_raw
    _view_handler, _clone_raw = view_handler, clone_raw


def _alias(x):
    r = _view_handler(aten.alias.default, (x,), {})
    return r


def _raw(x):
    """x's storage and metadata without its conj/neg bits (an alias)."""
    r = _alias(x)
    _set_conj(r, False)
    _set_neg(r, False)
    return r


def resolve(x):
    """x with its conj/neg bits applied to the values (a new tensor), or x itself."""
    c, n = x.is_conj(), x.is_neg()
    if not (c or n):
        return x
    r = _clone_raw(_raw(x))
    if x.dtype.is_complex:
        v = torch.view_as_real(r)
        if c and n:
            v[..., 0].neg_()
        elif c:
            v[..., 1].neg_()
        elif n:
            v.neg_()
    elif n:
        r.neg_()
    return r


def _conj_view(x):
    if not x.dtype.is_complex:
        return x
    r = _alias(x)
    _set_conj(r, not x.is_conj())
    return r


def _neg_view(x):
    r = _alias(x)
    _set_neg(r, not x.is_neg())
    return r


def _conj_physical(x):
    if not x.dtype.is_complex:
        return x.clone()
    r = resolve(x)
    if r is x:
        r = x.clone()
    torch.view_as_real(r)[..., 1].neg_()
    return r


def _conj_physical_(x):
    if x.dtype.is_complex:
        if x.is_conj() or x.is_neg():
            x.copy_(_conj_physical(x))
        else:
            torch.view_as_real(x)[..., 1].neg_()
    return x


# --- parts ------------------------------------------------------------------------------

def _rdt(cdt):
    return _REAL_OF[cdt]


def _cdt(dt):
    return dt if dt.is_complex else _CPLX_OF.get(dt, torch.complex64)


def parts(x, cdt, wide=False):
    """(re, im) of operand x as dtype cdt's component dtype (float64 when wide):
    views of a complex tensor's storage, (x, None) for a real tensor, numbers
    for a scalar. None stands for an imaginary part of 0."""
    rdt = torch.float64 if wide else _rdt(cdt)
    if type(x) is RemoteTensor:
        if x.dtype.is_complex:
            x = resolve(x)
            v = torch.view_as_real(x)
            re, im = v[..., 0], v[..., 1]
            if re.dtype != rdt:
                re, im = re.to(rdt), im.to(rdt)
            return re, im
        return (x if x.dtype == rdt else x.to(rdt)), None
    if isinstance(x, torch.Tensor):
        x = x.item()
    if isinstance(x, complex):
        return x.real, x.imag
    return float(x), None


def _full_like_shape(v, like, dt):
    return torch.full(like.shape, v, dtype=dt, device=like.device)


def make(re, im, cdt):
    """A complex tensor of dtype cdt from real parts (tensors or numbers; im None = 0)."""
    rdt = _rdt(cdt)
    if not isinstance(re, torch.Tensor) and not isinstance(im, torch.Tensor):
        r = torch.full((), complex(re, im or 0.0), dtype=cdt, device="rgpu")
        return r
    if im is None:
        return re.to(cdt)
    like = re if isinstance(re, torch.Tensor) else im
    if not isinstance(re, torch.Tensor):
        re = _full_like_shape(re, like, rdt)
    if not isinstance(im, torch.Tensor):
        im = _full_like_shape(im, like, rdt)
    re, im = torch.broadcast_tensors(re, im)
    if re.dtype != rdt:
        re = re.to(rdt)
    if im.dtype != rdt:
        im = im.to(rdt)
    return torch.view_as_complex(torch.stack([re, im], -1))


def _scalar_c(a):
    return isinstance(a, (int, float, bool, complex))


# ops on parts (None = 0)
def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _sub(a, b):
    if b is None:
        return a
    if a is None:
        return -b
    return a - b


def _mul(a, b):
    if a is None or b is None:
        return None
    return a * b


def cmul(ar, ai, br, bi):
    return _sub(_mul(ar, br), _mul(ai, bi)), _add(_mul(ar, bi), _mul(ai, br))


def cdiv(ar, ai, br, bi):
    """(ar + i ai) / (br + i bi), c10::complex's (Smith's) algorithm."""
    if bi is None:
        return ar / br, (None if ai is None else ai / br)
    if not isinstance(br, torch.Tensor) and not isinstance(bi, torch.Tensor):
        if br == 0 and bi == 0 and isinstance(ar, torch.Tensor):
            # c10: (a / |c|, b / |d|): infinities, or NaN for 0/0
            return ar / 0.0, (ai if ai is not None else torch.zeros_like(ar)) / 0.0
        z = complex(1.0, 0.0) / complex(br, bi) if (br or bi) else complex(math.nan, math.nan)
        return cmul(ar, ai, z.real, z.imag)
    br_t = br if isinstance(br, torch.Tensor) else torch.full_like(bi, br)
    bi_t = bi if isinstance(bi, torch.Tensor) else torch.full_like(br_t, bi)
    if ai is None:
        ai = 0.0
    big = br_t.abs() >= bi_t.abs()
    # |br| >= |bi|: rat = bi/br, scl = 1/(br + bi*rat); re = (ar + ai*rat)*scl, im = (ai - ar*rat)*scl
    rat1 = bi_t / br_t
    scl1 = 1.0 / (br_t + bi_t * rat1)
    re1 = (ar + ai * rat1) * scl1
    im1 = (ai - ar * rat1) * scl1
    rat2 = br_t / bi_t
    scl2 = 1.0 / (bi_t + br_t * rat2)
    re2 = (ar * rat2 + ai) * scl2
    im2 = (ai * rat2 - ar) * scl2
    re, im = torch.where(big, re1, re2), torch.where(big, im1, im2)
    zero = (br_t == 0) & (bi_t == 0)
    return torch.where(zero, ar / br_t.abs(), re), torch.where(zero, ai / bi_t.abs(), im)


def _rt(a, b):
    return torch.result_type(a, b)


# --- registration -----------------------------------------------------------------------

def _reg(names, impl, inplace=True, out=True):
    """impl(*args, **kwargs) for the functional overloads of each packet; the
    in-place overloads (name_) compute it and copy into self; .out overloads
    into out."""
    for name in names.split():
        for pk_name, wrapper in ((name, None), (name + "_", "inplace")):
            pk = getattr(aten, pk_name, None)
            if pk is None:
                continue
            for ov in pk.overloads():
                f = getattr(pk, ov)
                if wrapper == "inplace":
                    if inplace:
                        HANDLERS[f] = _inplace(impl)
                elif ov == "out" or ov.endswith("_out") or any(a.name == "out" for a in f._schema.arguments):
                    if out:
                        HANDLERS[f] = _outv(impl)
                else:
                    HANDLERS[f] = _fn(impl)


def _fn(impl):
    return lambda func, args, kwargs: impl(*args, **kwargs)


def _check_cast(r, self):
    if r.dtype.is_complex and not self.dtype.is_complex:
        raise RuntimeError(f"result type {c10_name(r.dtype)} can't be cast to the desired output type "
                           f"{c10_name(self.dtype)}")


def _inplace(impl):
    def h(func, args, kwargs):
        r = impl(*args, **kwargs)
        _check_cast(r, args[0])
        return args[0].copy_(r)
    return h


def _outv(impl):
    def h(func, args, kwargs):
        kwargs = dict(kwargs)
        out = kwargs.pop("out")
        r = impl(*args, **kwargs)
        _check_cast(r, out)
        if out.shape != r.shape:
            out.resize_(r.shape)
        return out.copy_(r)
    return h


def _reg1(func, impl):
    HANDLERS[func] = _fn(impl)


# --- arithmetic -------------------------------------------------------------------------

def _both_c(a, b, cdt):
    """Both operands complex tensors of dtype cdt: the linear ops can run on
    their real views directly (one record, no parts)."""
    return (type(a) is RemoteTensor and type(b) is RemoteTensor and a.dtype == cdt and b.dtype == cdt)


def _rvc(x):
    return torch.view_as_real(resolve(x))


def _addsub(self, other, alpha, torch_op, part_op):
    cdt = _rt(self, other)
    if not cdt.is_complex:
        return torch_op(self, other, alpha=alpha)
    if _both_c(self, other, cdt) and not isinstance(alpha, complex):
        return torch.view_as_complex(torch_op(_rvc(self), _rvc(other), alpha=alpha))
    ar, ai = parts(self, cdt)
    br, bi = parts(other, cdt)
    if alpha != 1:
        if isinstance(alpha, complex):
            br, bi = cmul(br, bi, alpha.real, alpha.imag)
        else:
            br, bi = _mul(br, alpha), _mul(bi, alpha)
    return make(part_op(ar, br), part_op(ai, bi), cdt)


def add(self, other, *, alpha=1):
    return _addsub(self, other, alpha, torch.add, _add)


def sub(self, other, *, alpha=1):
    return _addsub(self, other, alpha, torch.sub, _sub)


def rsub(self, other, *, alpha=1):
    return sub(other, self, alpha=alpha)


def _real_factor(a, b, cdt):
    """(complex tensor, real factor) when a*b scales a complex tensor of dtype
    cdt by a real scalar or a real tensor of its component dtype, else None."""
    for z, r in ((a, b), (b, a)):
        if type(z) is RemoteTensor and z.dtype == cdt:
            if isinstance(r, (int, float)) and not isinstance(r, bool):
                return z, r
            if type(r) is RemoteTensor and r.dtype == _rdt(cdt):
                return z, r.unsqueeze(-1)
    return None


def mul(self, other):
    cdt = _rt(self, other)
    rf = _real_factor(self, other, cdt)
    if rf is not None:
        return torch.view_as_complex(torch.mul(_rvc(rf[0]), rf[1]))
    ar, ai = parts(self, cdt)
    br, bi = parts(other, cdt)
    return make(*cmul(ar, ai, br, bi), cdt)


def div(self, other, *, rounding_mode=None):
    if rounding_mode is not None:
        raise RuntimeError("div with rounding_mode is not supported for complex tensors")
    cdt = _rt(self, other)
    ar, ai = parts(self, cdt)
    br, bi = parts(other, cdt)
    return make(*cdiv(ar, ai, br, bi), cdt)


def neg(self):
    return torch.view_as_complex(torch.neg(_rvc(self)))


def reciprocal(self):
    ar, ai = parts(self, self.dtype)
    return make(*cdiv(1.0, None, ar, ai), self.dtype)


def square(self):
    return mul(self, self)


def abs_(self):
    ar, ai = parts(self, self.dtype)
    return torch.hypot(ar, ai)


def angle(self):
    ar, ai = parts(self, self.dtype)
    return torch.atan2(ai, ar)


def sgn(self):
    ar, ai = parts(self, self.dtype)
    a = torch.hypot(ar, ai)
    z = a == 0
    d = torch.where(z, torch.ones_like(a), a)
    return make(torch.where(z, 0.0, ar / d), torch.where(z, 0.0, ai / d), self.dtype)


def _or0(x):
    return 0.0 if x is None else x


def _eq_parts(a, b):
    """a == b elementwise, one of them a tensor (or both numbers: a bool)."""
    if isinstance(a, torch.Tensor):
        return torch.eq(a, b)
    return torch.eq(b, a) if isinstance(b, torch.Tensor) else a == b


def eq(self, other):
    cdt = _cdt(_rt(self, other))
    ar, ai = parts(self, cdt)
    br, bi = parts(other, cdt)
    r = _eq_parts(ar, br)
    if ai is None and bi is None:
        return r
    i = _eq_parts(_or0(ai), _or0(bi))
    return r & i if isinstance(i, torch.Tensor) else (r if i else torch.zeros_like(r))


def ne(self, other):
    return eq(self, other).logical_not()


def _nz(x):
    """x != 0 (bool) for a complex x."""
    ar, ai = parts(x, x.dtype)
    return (ar != 0) | (ai != 0)


def _isnan(self):
    ar, ai = parts(self, self.dtype)
    return ar.isnan() | ai.isnan()


def _isinf(self):
    ar, ai = parts(self, self.dtype)
    return ar.isinf() | ai.isinf()


def _isfinite(self):
    ar, ai = parts(self, self.dtype)
    return ar.isfinite() & ai.isfinite()


def _bool_of(x):
    return _nz(x) if _is_c(x) else x


def logical_and(self, other):
    return torch.logical_and(_bool_of(self), _bool_of(other))


def logical_or(self, other):
    return torch.logical_or(_bool_of(self), _bool_of(other))


def logical_xor(self, other):
    return torch.logical_xor(_bool_of(self), _bool_of(other))


def logical_not(self):
    return _nz(self).logical_not()


# --- transcendental (in float64 for complex64) ------------------------------------------

def _w(x):
    """(re, im) of x in float64, and x's complex dtype."""
    cdt = x.dtype if x.dtype.is_complex else _cdt(x.dtype)
    re, im = parts(x, cdt, wide=True)
    if im is None:
        im = torch.zeros_like(re)
    return re, im, cdt


def _cexp(re, im):
    e = torch.exp(re)
    # exp(x + i0) = e^x + i0 exactly; cos/sin of an infinite or NaN imaginary part as std::exp
    return e * torch.cos(im), e * torch.sin(im)


def _clog(re, im):
    return torch.log(torch.hypot(re, im)), torch.atan2(im, re)


def _csqrt(re, im):
    # sqrt(z): t = sqrt((|re| + |z|) / 2); re >= 0: (t, im / 2t); else (|im| / 2t, copysign(t, im))
    a = torch.hypot(re, im)
    t = torch.sqrt((re.abs() + a) * 0.5)
    t2 = torch.where(t == 0, torch.ones_like(t), 2.0 * t)
    pos = re >= 0
    r_re = torch.where(pos, t, im.abs() / t2)
    r_im = torch.where(pos, im / t2, torch.copysign(t, im))
    zero = a == 0
    return torch.where(zero, 0.0, r_re), torch.where(zero, im, r_im)


def _m_exp(re, im):
    return _cexp(re, im)


def _m_exp2(re, im):
    l2 = math.log(2.0)
    return _cexp(re * l2, im * l2)


def _m_expm1(re, im):
    # re: expm1(x) cos(y) - 2 sin^2(y/2) keeps the accuracy near 0
    s = torch.sin(im * 0.5)
    return torch.expm1(re) * torch.cos(im) - 2.0 * s * s, torch.exp(re) * torch.sin(im)


def _m_log(re, im):
    return _clog(re, im)


def _m_log2(re, im):
    lr, li = _clog(re, im)
    k = 1.0 / math.log(2.0)
    return lr * k, li * k


def _m_log10(re, im):
    lr, li = _clog(re, im)
    k = 1.0 / math.log(10.0)
    return lr * k, li * k


def _m_log1p(re, im):
    # log|1+z| = 0.5*log1p(2x + x^2 + y^2) keeps the accuracy near 0
    m = 2.0 * re + re * re + im * im
    return 0.5 * torch.log1p(m), torch.atan2(im, 1.0 + re)


def _m_sqrt(re, im):
    return _csqrt(re, im)


def _m_rsqrt(re, im):
    sr, si = _csqrt(re, im)
    return cdiv(1.0, None, sr, si)


def _m_sin(a, b):
    return torch.sin(a) * torch.cosh(b), torch.cos(a) * torch.sinh(b)


def _m_cos(a, b):
    return torch.cos(a) * torch.cosh(b), -(torch.sin(a) * torch.sinh(b))


def _m_sinh(a, b):
    return torch.sinh(a) * torch.cos(b), torch.cosh(a) * torch.sin(b)


def _m_cosh(a, b):
    return torch.cosh(a) * torch.cos(b), torch.sinh(a) * torch.sin(b)


def _ctanh(a, b):
    # tanh(a+ib) = (tanh a (1 + tan^2 b) + i tan b (1 - tanh^2 a)) / (1 + tanh^2 a tan^2 b)
    # (Kahan's form, as libm's ctanh): finite for large |a|
    t = torch.tan(b)
    beta = 1.0 + t * t
    s = torch.sinh(a)
    rho = torch.sqrt(1.0 + s * s)
    den = 1.0 + beta * s * s
    re = beta * rho * s / den
    im = t / den
    big = a.abs() > 22.0
    return torch.where(big, torch.sign(a), re), torch.where(big, 4.0 * torch.sin(b) * torch.cos(b) *
                                                            torch.exp(-2.0 * a.abs()), im)


def _casinh(a, b):
    # asinh(z) = log(z + sqrt(z^2 + 1))
    # for re < 0 use asinh(z) = -asinh(-z) to avoid cancellation
    neg = a < 0
    a2, b2 = torch.where(neg, -a, a), torch.where(neg, -b, b)
    sr2, si2 = _csqrt(a2 * a2 - b2 * b2 + 1.0, 2.0 * a2 * b2)
    lr, li = _clog(a2 + sr2, b2 + si2)
    return torch.where(neg, -lr, lr), torch.where(neg, -li, li)


def _m_acos(a, b):
    r, i = _casinh(-b, a)       # asinh(iz) = i asin(z)
    # acos = pi/2 - asin = pi/2 - (i, -r)
    return math.pi / 2 - i, r


def _catanh(a, b):
    # atanh(z) = 0.5 * (log1p(z) - log1p(-z))
    def l1p(x, y):
        m = 2.0 * x + x * x + y * y
        return 0.5 * torch.log1p(m), torch.atan2(y, 1.0 + x)
    pr, pi_ = l1p(a, b)
    nr, ni = l1p(-a, -b)
    return 0.5 * (pr - nr), 0.5 * (pi_ - ni)


def _m_acosh(a, b):
    # acosh(z) = log(z + sqrt(z+1) sqrt(z-1))
    s1r, s1i = _csqrt(a + 1.0, b)
    s2r, s2i = _csqrt(a - 1.0, b)
    pr, pi_ = cmul(s1r, s1i, s2r, s2i)
    return _clog(a + pr, b + pi_)


def _m_sigmoid(a, b):
    er, ei = _cexp(-a, -b)
    return cdiv(1.0, None, 1.0 + er, ei)


def _m_silu(a, b):
    er, ei = _cexp(-a, -b)
    return cdiv(a, b, 1.0 + er, ei)


def _m_sinc(a, b):
    pa, pb = a * math.pi, b * math.pi
    sr, si = torch.sin(pa) * torch.cosh(pb), torch.cos(pa) * torch.sinh(pb)
    zero = (a == 0) & (b == 0)
    one = torch.ones_like(pa)
    qr, qi = cdiv(sr, si, torch.where(zero, one, pa), pb)
    return torch.where(zero, 1.0, qr), torch.where(zero, 0.0, qi)


def _times_minus_i_of_i(fn):
    """z -> -i fn(iz): tan from tanh, asin from asinh, atan from atanh."""
    def g(a, b):
        r, i = fn(-b, a)
        return i, -r
    return g


_m_tanh, _m_asinh, _m_atanh = _ctanh, _casinh, _catanh
_m_tan, _m_asin, _m_atan = (_times_minus_i_of_i(f) for f in (_ctanh, _casinh, _catanh))


def _u(math_fn):
    """A complex unary op from math_fn(re, im) -> (re, im) on float64 parts."""
    def op(self):
        re, im, cdt = _w(self)
        return make(*math_fn(re, im), cdt)
    return op


UNARY = {name: _u(globals()["_m_" + name]) for name in (
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "sinh", "cosh", "tanh",
    "tan", "asinh", "asin", "acos", "atanh", "atan", "acosh", "sigmoid", "silu", "sinc")}
exp, log, sqrt = UNARY["exp"], UNARY["log"], UNARY["sqrt"]


def pow_(self, exponent):
    cdt = _rt(self, exponent)
    if not cdt.is_complex:
        return torch.pow(self, exponent)
    if _scalar_c(exponent) and not isinstance(exponent, bool):
        e = complex(exponent)
        if e == 2:
            return mul(self, self)
        if e == 1:
            return self.to(cdt).clone()
        if e == 0:
            return torch.ones(self.shape, dtype=cdt, device=self.device)
        if e == -1:
            return reciprocal(self.to(cdt))
        if e == 0.5:
            return sqrt(self.to(cdt))
    # z^w = exp(w log z); 0^w = 0 for re(w) > 0 (std::pow)
    a, b = parts(self, cdt, wide=True)
    if isinstance(self, torch.Tensor) and b is None:
        b = torch.zeros_like(a)
    wr, wi = parts(exponent, cdt, wide=True)
    if isinstance(a, torch.Tensor):
        lr, li = _clog(a, b)
    else:
        z = complex(a, b or 0.0)
        lr, li = (math.log(abs(z)) if z != 0 else -math.inf), math.atan2(z.imag, z.real)
    pr, pi_ = cmul(lr, li, wr, wi)
    if not isinstance(pr, torch.Tensor):
        pr = torch.full(wr.shape if isinstance(wr, torch.Tensor) else (), pr, dtype=torch.float64, device="rgpu")
    if pi_ is None:
        pi_ = torch.zeros_like(pr)
    er, ei = _cexp(pr, pi_)
    if isinstance(a, torch.Tensor):
        zero = (a == 0) & (b == 0)
        er, ei = torch.where(zero, 0.0, er), torch.where(zero, 0.0, ei)
        if isinstance(wr, torch.Tensor) or wr == 0:
            w0 = (wr == 0) if wi is None else ((wr == 0) & (wi == 0))
            er, ei = torch.where(w0, 1.0, er), torch.where(w0, 0.0, ei)
    return make(er, ei, cdt)


# --- construction, selection ------------------------------------------------------------

def _complex(real, imag):
    cdt = _CPLX_OF[torch.promote_types(real.dtype, imag.dtype)]
    return make(real, imag, cdt)


def _polar(abs, angle):
    cdt = _CPLX_OF[torch.promote_types(abs.dtype, angle.dtype)]
    return make(abs * torch.cos(angle), abs * torch.sin(angle), cdt)


def where(condition, self, other):
    cdt = _rt(self, other)
    ar, ai = parts(self, cdt)
    br, bi = parts(other, cdt)
    im = None if ai is None and bi is None else torch.where(condition, _or0(ai), _or0(bi))
    return make(torch.where(condition, ar, br), im, cdt)


def masked_fill(self, mask, value):
    return where(mask, value, self).to(self.dtype)


def fill(self, value):
    re, im = parts(value, self.dtype)
    r = torch.empty_like(self)
    v = torch.view_as_real(r)
    v[..., 0].fill_(re)
    v[..., 1].fill_(im or 0.0)
    return r


def _fill_(func, args, kwargs):
    self, value = args[0], args[1]
    if self.is_conj() or self.is_neg():
        return self.copy_(fill(self, value))
    re, im = parts(value, self.dtype)
    v = torch.view_as_real(self)
    v[..., 0].fill_(re)
    v[..., 1].fill_(im or 0.0)
    return self


def _zero_(func, args, kwargs):
    self = args[0]
    torch.view_as_real(_raw(self)).zero_()
    return self


def _full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    dt = dtype or (torch.complex64 if isinstance(fill_value, complex) else torch.get_default_dtype())
    if not dt.is_complex:
        return torch.full(size, fill_value.real if isinstance(fill_value, complex) else fill_value, dtype=dt,
                          device=device)
    r = torch.empty(size, dtype=dt, device=device)
    return _fill_(None, (r, fill_value), {})


def _full_like(self, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dt = dtype or self.dtype
    r = torch.empty_like(self, dtype=dt, device=device)
    return _fill_(None, (r, fill_value), {}) if dt.is_complex else r.fill_(
        fill_value.real if isinstance(fill_value, complex) else fill_value)


def _new_full(self, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    dt = dtype or self.dtype
    r = torch.empty(size, dtype=dt, device=device or self.device)
    return _fill_(None, (r, fill_value), {}) if dt.is_complex else r.fill_(
        fill_value.real if isinstance(fill_value, complex) else fill_value)


def _scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _full((), s, dtype=dtype, device=device)


def _lift_pair(self, fn):
    """Apply a real data-movement op fn to the real and imaginary parts and join them."""
    ar, ai = parts(self, self.dtype)
    return make(fn(ar), fn(ai), self.dtype)


def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
    return _lift_pair(self, lambda x: torch.nan_to_num(x, nan, posinf, neginf))


def tril(self, diagonal=0):
    return _lift_pair(self, lambda x: torch.tril(x, diagonal))


def triu(self, diagonal=0):
    return _lift_pair(self, lambda x: torch.triu(x, diagonal))


def constant_pad_nd(self, pad, value=0):
    re, im = parts(value, self.dtype)
    ar, ai = parts(self, self.dtype)
    return make(torch.constant_pad_nd(ar, pad, re), torch.constant_pad_nd(ai, pad, im or 0.0), self.dtype)


def _wrap(d, n):
    return d + n if d < 0 else d


def _rv(x, cdt=None):
    """view_as_real of x resolved (and cast to cdt)."""
    x = resolve(x)
    if cdt is not None and x.dtype != cdt:
        x = x.to(cdt)
    return torch.view_as_real(x)


def _zero_d(fn):
    """fn on 1-d views of 0-d operands (a real view needs a dim to index)."""
    def f(self, dim, index, *a, **k):
        if self.dim() == 0:
            a = tuple(x.reshape(1) if isinstance(x, torch.Tensor) and x.dim() == 0 else x for x in a)
            return fn(self.reshape(1), 0, index.reshape(1) if index.dim() == 0 else index, *a, **k).reshape(())
        return fn(self, dim, index, *a, **k)
    return f


def scatter_add(self, dim, index, src):
    d = _wrap(dim, self.dim())
    i2 = index.unsqueeze(-1).expand(*index.shape, 2)
    return torch.view_as_complex(torch.scatter_add(_rv(self).clone(), d, i2, _rv(src, self.dtype)))


def scatter(self, dim, index, src=None, value=None, *, reduce=None):
    d = _wrap(dim, self.dim())
    if src is None:
        src = value
    if not isinstance(src, torch.Tensor):
        src = _full(index.shape, src, dtype=self.dtype, device=self.device)
    i2 = index.unsqueeze(-1).expand(*index.shape, 2)
    s2 = _rv(src, self.dtype)
    base = _rv(self).clone()
    if reduce is None:
        return torch.view_as_complex(torch.scatter(base, d, i2, s2))
    if reduce == "add":
        return torch.view_as_complex(torch.scatter_add(base, d, i2, s2))
    raise RuntimeError(f"scatter with reduce={reduce!r} is not supported for complex tensors")


def index_add(self, dim, index, source, *, alpha=1):
    d = _wrap(dim, self.dim())
    if alpha != 1:
        source = mul(source, alpha)
    return torch.view_as_complex(torch.index_add(_rv(self).clone(), d, index, _rv(source, self.dtype)))


def index_put(self, indices, values, accumulate=False):
    v = _rv(values, self.dtype)
    return torch.view_as_complex(aten.index_put.default(_rv(self).clone(), indices, v, accumulate))


def _index_put_(func, args, kwargs):
    self, indices, values = args[0], args[1], args[2]
    acc = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    if self.is_conj() or self.is_neg():
        return self.copy_(index_put(self, indices, values, acc))
    aten.index_put_.default(torch.view_as_real(self), indices, _rv(values, self.dtype), acc)
    return self


def addcmul(self, tensor1, tensor2, *, value=1):
    return add(self, mul(mul(tensor1, tensor2), value))


def addcdiv(self, tensor1, tensor2, *, value=1):
    return add(self, mul(div(tensor1, tensor2), value))


def lerp(self, end, weight):
    # self + weight * (end - self)
    return add(self, mul(weight, sub(end, self)))


def logsumexp(self, dim, keepdim=False):
    x = resolve(self)
    dims = _dims(x, dim)
    if not dims:            # one element per result: log(exp(z - re z)) + re z
        m = torch.real(x)
        m = torch.where(m.isinf(), torch.zeros_like(m), m)
        return add(log(exp(sub(x, m))), m)
    re = torch.real(x)
    m = torch.amax(re, dims, keepdim=True)
    m = torch.where(m.isinf(), torch.zeros_like(m), m)
    r = add(log(sum_(exp(sub(x, m)), dims, True)), m)
    return r if keepdim else r.squeeze(dims)


def sigmoid_backward(grad_output, output):
    # grad * conj((1 - out) * out)
    o = resolve(output)
    return mul(grad_output, _conj_physical(mul(rsub(o, 1), o)))


def tanh_backward(grad_output, output):
    # grad * conj(1 - out^2)
    o = resolve(output)
    return mul(grad_output, _conj_physical(rsub(mul(o, o), 1)))


def _normal_(func, args, kwargs):
    # ATen: the real view, with std / sqrt(2) (each part carries half the variance)
    self = args[0]
    mean = args[1] if len(args) > 1 else kwargs.get("mean", 0.0)
    std = args[2] if len(args) > 2 else kwargs.get("std", 1.0)
    torch.view_as_real(_raw(self)).normal_(mean, std / math.sqrt(2.0), generator=kwargs.get("generator"))
    return self


def _uniform_(func, args, kwargs):
    self = args[0]
    lo = args[1] if len(args) > 1 else kwargs.get("from", 0.0)
    hi = args[2] if len(args) > 2 else kwargs.get("to", 1.0)
    torch.view_as_real(_raw(self)).uniform_(lo, hi, generator=kwargs.get("generator"))
    return self


def logcumsumexp(self, dim):
    """log(cumsum(exp(z - m))) + m, m the largest real part along dim (finite)."""
    x = resolve(self)
    if x.dim() == 0:
        return logsumexp(x, [])
    d = _wrap(dim, x.dim())
    m = torch.amax(torch.real(x), d, keepdim=True)
    m = torch.where(m.isinf(), torch.zeros_like(m), m)
    r = add(log(_cumsum(exp(sub(x, m)), d)), m)
    # ATen's scan adds log1p terms to the running maximum, so its imaginary
    # part stays within pi of the imaginary part of the largest element so far
    # (not reduced to (-pi, pi]): the same branch here
    k = torch.cummax(torch.real(x), d).indices
    ref = torch.gather(torch.imag(x), d, k)
    rr, ri = parts(r, r.dtype)
    two_pi = 2 * math.pi
    ri = ri + two_pi * torch.round((ref - ri) / two_pi)
    return make(rr, ri, r.dtype)


def _rand_like(fill):
    def f(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None, generator=None):
        r = torch.empty_like(self, dtype=dtype, device=device, memory_format=memory_format or torch.preserve_format)
        return fill(r, generator)
    return f


# --- reductions -------------------------------------------------------------------------

def _dims(x, dim):
    if x.dim() == 0:
        return []
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    if isinstance(dim, int):
        dim = [dim]
    return [_wrap(d, x.dim()) for d in dim]


def sum_(self, dim=None, keepdim=False, *, dtype=None):
    cdt = dtype or self.dtype
    if not cdt.is_complex:
        return torch.sum(torch.real(self), dim, keepdim, dtype=cdt)
    dims = _dims(self, dim)
    v = _rv(self, cdt)
    r = torch.sum(v, dims, keepdim) if dims else v.clone()
    return torch.view_as_complex(r.contiguous())


def mean(self, dim=None, keepdim=False, *, dtype=None):
    cdt = dtype or self.dtype
    dims = _dims(self, dim)
    v = _rv(self, cdt)
    r = torch.mean(v, dims, keepdim) if dims else v.clone()
    return torch.view_as_complex(r.contiguous())


def _sum_default(self, *, dtype=None):
    return sum_(self, None, False, dtype=dtype)


def _prod_tree(x, d):
    """Product of complex x along dim d (log2(n) rounds of pairwise multiplies)."""
    n = x.shape[d]
    if n == 0:
        sh = list(x.shape)
        sh[d] = 1
        return torch.ones(sh, dtype=x.dtype, device=x.device)
    while n > 1:
        if n % 2:
            sh = list(x.shape)
            sh[d] = 1
            x = torch.cat([x, torch.ones(sh, dtype=x.dtype, device=x.device)], d)
            n += 1
        a, b = x.narrow(d, 0, n // 2), x.narrow(d, n // 2, n // 2)
        x = mul(a, b)
        n //= 2
    return x


def prod(self, dim=None, keepdim=False, *, dtype=None):
    x = resolve(self)
    if dtype is not None and x.dtype != dtype:
        x = x.to(dtype)
    if dim is None:
        r = _prod_tree(x.reshape(-1), 0).reshape(())
        return r
    if x.dim() == 0:
        return x.clone()
    d = _wrap(dim, x.dim())
    r = _prod_tree(x, d)
    return r if keepdim else r.squeeze(d)


def _var(self, dim=None, *, correction=None, keepdim=False):
    v = _rv(self)
    dims = _dims(self, dim)
    if not dims:
        dims = list(range(self.dim()))
    if self.dim() == 0:
        return torch.var(v.unsqueeze(0), 0, correction=correction).sum(-1)
    return torch.var(v, dims, correction=correction, keepdim=keepdim).sum(-1)


def _std(self, dim=None, *, correction=None, keepdim=False):
    return torch.sqrt(_var(self, dim, correction=correction, keepdim=keepdim))


def _vector_norm(self, ord=2, dim=None, keepdim=False, *, dtype=None):
    a = abs_(self if dtype is None else self.to(dtype))
    return torch.linalg.vector_norm(a, ord, dim, keepdim)


def _cumsum(self, dim, *, dtype=None):
    cdt = dtype or self.dtype
    if self.dim() == 0:
        return resolve(self).to(cdt).clone()
    return torch.view_as_complex(torch.cumsum(_rv(self, cdt), _wrap(dim, self.dim())).contiguous())


def _cumprod(self, dim, *, dtype=None):
    """Inclusive scan of complex products along dim (Hillis-Steele, log2(n) rounds)."""
    x = resolve(self)
    if dtype is not None and x.dtype != dtype:
        x = x.to(dtype)
    d = _wrap(dim, x.dim()) if x.dim() else 0
    if x.dim() == 0:
        return x.clone()
    n = x.shape[d]
    k = 1
    while k < n:
        head = x.narrow(d, 0, k)
        tail = mul(x.narrow(d, k, n - k), x.narrow(d, 0, n - k))
        x = torch.cat([head, tail], d)
        k *= 2
    return x if x is not self else x.clone()


def _nonzero(self):
    return torch.nonzero(_nz(self))


def _count_nonzero(self, dim=None):
    return torch.count_nonzero(_nz(self), dim)


def _dot(self, other):
    return sum_(mul(self, other))


def _vdot(self, other):
    return sum_(mul(_conj_physical(self), other))


# --- copies with bits -------------------------------------------------------------------

def _register_all():
    _reg("add", add)
    _reg("sub", sub)
    _reg("rsub", rsub)
    _reg("mul", mul)
    _reg("div", div)
    _reg("true_divide", div)
    _reg("neg negative", neg)
    _reg("reciprocal", reciprocal)
    _reg("square", square)
    _reg("abs", abs_, inplace=False)
    _reg("angle", angle, inplace=False)
    _reg("sgn", sgn)
    _reg("eq", eq, inplace=False)
    _reg("ne", ne, inplace=False)
    _reg("isnan", _isnan, inplace=False)
    _reg("isinf", _isinf, inplace=False)
    _reg("isfinite", _isfinite, inplace=False)
    _reg("logical_and", logical_and, inplace=False)
    _reg("logical_or", logical_or, inplace=False)
    _reg("logical_xor", logical_xor, inplace=False)
    _reg("logical_not", logical_not, inplace=False)
    for name, fn in UNARY.items():
        _reg(name, fn)
    _reg("pow", pow_)
    _reg("complex", _complex, inplace=False)
    _reg("polar", _polar, inplace=False)
    _reg("where", where, inplace=False)
    _reg("masked_fill", masked_fill)
    _reg("tril", tril)
    _reg("nan_to_num", nan_to_num)
    _reg("triu", triu)
    _reg("constant_pad_nd", constant_pad_nd, inplace=False)
    _reg("scatter_add", _zero_d(scatter_add))
    _reg("scatter", _zero_d(scatter))
    _reg("index_add", _zero_d(index_add))
    _reg("addcmul", addcmul)
    _reg("addcdiv", addcdiv)
    _reg("lerp", lerp)
    _reg1(aten.all.default, lambda self: torch.all(_nz(self)))
    _reg1(aten.any.default, lambda self: torch.any(_nz(self)))
    for ov in ("dim", "dims"):
        _reg1(getattr(aten.all, ov), lambda self, dim=None, keepdim=False: torch.all(_nz(self), dim, keepdim))
        _reg1(getattr(aten.any, ov), lambda self, dim=None, keepdim=False: torch.any(_nz(self), dim, keepdim))
    _reg1(aten.logsumexp.default, logsumexp)
    _reg("sigmoid_backward", sigmoid_backward, inplace=False)
    HANDLERS[aten.normal_.default] = _normal_
    _reg1(aten.logcumsumexp.default, logcumsumexp)
    _reg1(aten.rand_like.default, _rand_like(lambda r, g: _uniform_(None, (r,), {"generator": g})))
    _reg1(aten.randn_like.default, _rand_like(lambda r, g: _normal_(None, (r,), {"generator": g})))
    HANDLERS[aten.uniform_.default] = _uniform_
    _reg("tanh_backward", tanh_backward, inplace=False)
    _reg("index_put", index_put, inplace=False)
    HANDLERS[aten.index_put_.default] = _index_put_
    HANDLERS[aten.fill_.Scalar] = _fill_
    HANDLERS[aten.fill_.Tensor] = _fill_
    _reg("fill", fill, inplace=False)
    HANDLERS[aten.zero_.default] = _zero_
    _reg1(aten.full.default, _full)
    _reg1(aten.full_like.default, _full_like)
    _reg1(aten.new_full.default, _new_full)
    _reg1(aten.scalar_tensor.default, _scalar_tensor)
    _reg1(aten.sum.dim_IntList, sum_)
    _reg1(aten.sum.default, _sum_default)
    _reg1(aten.mean.dim, mean)
    _reg1(aten.mean.default, lambda self, *, dtype=None: mean(self, None, False, dtype=dtype))
    _reg1(aten.prod.default, lambda self, *, dtype=None: prod(self, None, False, dtype=dtype))
    _reg1(aten.prod.dim_int, prod)
    _reg1(aten.var.correction, _var)
    _reg1(aten.std.correction, _std)
    _reg1(aten.linalg_vector_norm.default, _vector_norm)
    _reg1(aten.cumsum.default, _cumsum)
    _reg1(aten.cumprod.default, _cumprod)
    _reg1(aten.nonzero.default, _nonzero)
    _reg1(aten.count_nonzero.dim_IntList, _count_nonzero)
    _reg1(aten.count_nonzero.default, _count_nonzero)
    _reg1(aten.dot.default, _dot)
    _reg1(aten.vdot.default, _vdot)


_register_all()

# Overloads that torch's Conjugate/Negative fallbacks let through with their
# inputs' bits set (ATen's kernels of these read the bits themselves): their
# handlers get the inputs resolved first (resolving()).
_PASS_BITS = set()
for _name in ("mm", "addmm", "addmm_", "bmm", "baddbmm", "baddbmm_", "dot", "vdot", "linalg_solve_triangular",
              "linalg_vector_norm"):
    _pk = getattr(aten, _name, None)
    if _pk is not None:
        _PASS_BITS.update(getattr(_pk, _ov) for _ov in _pk.overloads())


def _has_bits(a):
    return isinstance(a, torch.Tensor) and (a.is_conj() or a.is_neg())


def _resolved(a):
    if type(a) is RemoteTensor:
        return resolve(a)
    return a.resolve_conj().resolve_neg()


def resolving(h):
    """h with conj/neg-bit inputs resolved first (for _PASS_BITS overloads;
    an in-place/out= target with a bit set is not: ATen refuses those too)."""
    def handler(func, args, kwargs):
        if any(_has_bits(a) for a in args[1:]) or (args and _has_bits(args[0]) and not func._schema.is_mutable) \
                or any(_has_bits(v) for k, v in kwargs.items() if k != "out"):
            args = tuple(_resolved(a) if _has_bits(a) and (i or not func._schema.is_mutable) else a
                         for i, a in enumerate(args))
            kwargs = {k: (_resolved(v) if k != "out" and _has_bits(v) else v) for k, v in kwargs.items()}
        return h(func, args, kwargs)
    # decomp's kept foreach lists call the table handler past this wrapper, for
    # tensors without bits only (.resolves: they check)
    handler.table = getattr(h, "table", None)
    handler.resolves = True
    return handler


# Always handled here (complex or not: they only exist for the bits)
ALWAYS = {
    aten._conj.default: _fn(_conj_view),
    aten._neg_view.default: _fn(_neg_view),
    aten._conj_physical.default: _fn(_conj_physical),
    aten.conj_physical_.default: _fn(_conj_physical_),
}
