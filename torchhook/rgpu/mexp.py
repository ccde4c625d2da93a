"""linalg.matrix_exp as matmuls: ATen's method, degree-18 Taylor-type
polynomial with scaling and squaring (Bader, Blanes, Casas 2019; ATen's
LinearAlgebra.cpp mexp / compute_T18_scale_square).

Per matrix A of a batch: s = max(0, ceil(log2(|A|_1 / theta18))) with
|A|_1 the largest column sum of |a_ij|; exp(A) = T18(A / 2^s)^(2^s). The 1-norms
come to the client once (the one wait, as ATen's CUDA path); s is computed
there from the downloaded values exactly as ATen computes it, the matrices
are sorted by s, and each level of s squares only the matrices still needing
it (no masked work). T18 is 5 matmuls: the powers I, A, A^2, A^3, A^6, their
linear combinations B_i (all five at once, a broadcast mul and add per
power), then B3 += B0 @ B4, B2 += B3 and B1 + B2 @ B3 (baddbmm), in ATen's
order of roundings (the values match CPU's closely on ill-conditioned
entries only then).
Unlike ATen's CPU path, small norms use T18 too (ATen picks lower degrees
below theta12; both are accurate to a unit roundoff there).

Complex matrices run the same way: matmuls on complex operands (MM/BMM/
BADDBMM take complex64/complex128), the real-coefficient combinations and
scalings on view_as_real views, the norm from |z| = sqrt(re^2 + im^2).

The backward is ATen's (derivatives.yaml: linalg_matrix_exp_differential,
itself a matrix_exp of a 2n x 2n block matrix), which reaches this again.
TABLE maps each aten overload to its function; decomp.py merges it."""
import torch

aten = torch.ops.aten

# theta18 of ATen's mexp: float/cfloat, and double/cdouble (any other dtype)
_THETA18 = {torch.float32: 3.010066362817634e+00, torch.complex64: 3.010066362817634e+00}
_THETA18_DOUBLE = 1.090863719290036e+00

# B_i = sum_j _B18[i][j] * {I, A, A^2, A^3, A^6}_j (ATen's compute_T18 table)
_B18 = (
    (0., -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045729985177e-04, 0.),
    (0., 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
     -6.37898194594723280150e-04),
    (-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
     -6.98210122488052056106e-03, 3.34975017086070470649e-05),
    (-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
     2.95552570429315521194e-02, -1.39180257516060693404e-05),
    (0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02, -1.40086798182036094347e-05),
)


def _real_dtype(dt):
    return {torch.complex64: torch.float32, torch.complex128: torch.float64,
            torch.complex32: torch.float16}.get(dt, dt)


def _rv(x):
    """x's real view: (..., 2) for complex, x itself otherwise."""
    return aten.view_as_real.default(x) if x.dtype.is_complex else x


def _cv(x, cplx):
    return aten.view_as_complex.default(x) if cplx else x


def _one_norms(a):
    """(B,) largest column sums of |a_ij| (ATen's operator_1_norm), real dtype."""
    if a.dtype.is_complex:
        r = _rv(a)
        m = aten.sqrt.default(aten.sum.dim_IntList(aten.mul.Tensor(r, r), [-1]))
    else:
        m = aten.abs.default(a)
    return aten.amax.default(aten.sum.dim_IntList(m, [-2]), [-1])


def _coefs(dtype, device, ndim):
    """_B18 in a's real dtype (as ATen rounds it), (5, 5) then ndim unit dims."""
    c = torch.tensor(_B18, dtype=torch.float64).to(dtype=_real_dtype(dtype))
    return c.view([5, 5] + [1] * ndim).to(device)


def _t18(A):
    """T18(A) for a (B, n, n) batch A, in ATen's order of roundings: each B_i
    sums coefficient * power over the powers in order (0 + c0 P0 + c1 P1 ...),
    all five B_i at once; B3 += B0 @ B4; B2 += B3; B1 + B2 @ B3."""
    B, n = A.shape[0], A.shape[-1]
    cplx = A.dtype.is_complex
    eye = aten.eye.default(n, dtype=A.dtype, device=A.device)
    I = aten.expand.default(eye, [B, n, n])
    A2 = aten.bmm.default(A, A)
    A3 = aten.bmm.default(A, A2)
    A6 = aten.bmm.default(A3, A3)
    powers = [_rv(p) for p in (I, A, A2, A3, A6)]
    coef = _coefs(A.dtype, A.device, powers[0].dim())                 # (5, 5, 1, ...)
    Bs = None
    for j, p in enumerate(powers):
        term = aten.mul.Tensor(p, aten.select.int(coef, 1, j))        # (5, B, n, n[, 2])
        Bs = term if Bs is None else aten.add.Tensor(Bs, term)
    B0, B1, B2, B3, B4 = (_cv(aten.select.int(Bs, 0, i), cplx) for i in range(5))
    B3 = aten.baddbmm.default(B3, B0, B4)                              # B3 + A9
    B2 = _cv(aten.add.Tensor(_rv(B2), _rv(B3)), cplx)
    return aten.baddbmm.default(B1, B2, B3)


def _scale(a, c):
    """a * c, c a real number or a real (B,) CPU tensor (per matrix)."""
    cplx = a.dtype.is_complex
    r = _rv(a)
    if isinstance(c, torch.Tensor):
        c = c.to(dtype=r.dtype).view([-1] + [1] * (r.dim() - 1)).to(a.device)
    return _cv(aten.mul.Tensor(r, c), cplx)


def _matrix_exp(a):
    if a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        raise RuntimeError("linalg.matrix_exp: A must be batches of square matrices, "
                           f"but they are {a.shape[-2] if a.dim() >= 2 else 1} by {a.shape[-1]} matrices")
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        raise RuntimeError(f"linalg.matrix_exp: Expected a floating point or complex tensor as input. Got {a.dtype}")
    n = a.shape[-1]
    if n == 0 or a.numel() == 0:
        return aten.clone.default(a)
    if n == 1:
        return aten.exp.default(a)
    A = aten.reshape.default(a, [-1, n, n])
    theta = _THETA18.get(a.dtype, _THETA18_DOUBLE)
    norm = _one_norms(A).cpu()                                         # the one wait
    s = torch.ceil(torch.log2(norm / theta)).clamp(min=0)
    s = torch.where(torch.isfinite(s), s, torch.zeros_like(s)).to(torch.int64)   # NaN/inf: no squaring
    levels = sorted(set(s.tolist()))
    if len(levels) == 1:                                               # one s for all (a single matrix)
        lv = levels[0]
        X = _t18(_scale(A, 2.0 ** -lv) if lv else A)
        for _ in range(lv):
            X = aten.bmm.default(X, X)
        return aten.reshape.default(X, a.shape)
    order = torch.argsort(s, stable=True)
    s_sorted = s[order]
    idx = order.to(A.device)
    X = _t18(_scale(aten.index_select.default(A, 0, idx), torch.pow(2.0, -s_sorted.to(torch.float64))))
    pieces, done, start = [], 0, 0
    for lv in levels:
        count = int((s_sorted == lv).sum())
        tail = aten.slice.Tensor(X, 0, start)
        for _ in range(lv - done):
            tail = aten.bmm.default(tail, tail)
        X, start, done = tail, count, lv
        pieces.append(aten.slice.Tensor(tail, 0, 0, count))
    out = aten.cat.default(pieces)
    inv = torch.argsort(order).to(A.device)
    return aten.reshape.default(aten.index_select.default(out, 0, inv), a.shape)


def _matrix_exp_out(a, *, out):
    r = _matrix_exp(a)
    if out.shape != r.shape:
        aten.resize_.default(out, r.shape)
    return aten.copy_.default(out, r)


TABLE = {aten.linalg_matrix_exp.default: _matrix_exp}
if hasattr(aten.linalg_matrix_exp, "out"):
    TABLE[aten.linalg_matrix_exp.out] = _matrix_exp_out
