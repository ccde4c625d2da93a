"""Complex matmul (MM, BMM, ADDMM, BADDBMM on complex64/complex128) and
linalg.matrix_exp (torchhook/rgpu/mexp.py) against PyTorch CPU, on whichever
backend the session runs (RGPU_BACKEND=cuda with the cudaemu env vars runs
the cuBLAS C/Z GEMM path; tests/cudaemu/run-tests.sh does)."""
import pytest
import torch

import rgpu

DEV = "rgpu"
C64, C128 = torch.complex64, torch.complex128
TOL = {C64: dict(rtol=1e-5, atol=1e-4), C128: dict(rtol=1e-10, atol=1e-10),
       torch.float32: dict(rtol=1e-5, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def rand(shape, dt, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dt)


def same(got, want, dt=None):
    assert isinstance(got, rgpu.RemoteTensor)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **TOL[dt or want.dtype])


@pytest.mark.parametrize("dt", [C64, C128])
def test_mm_layouts(dt):
    a, b = rand((5, 6), dt, 1), rand((6, 7), dt, 2)
    ra, rb = a.to(DEV), b.to(DEV)
    same(torch.mm(ra, rb), a @ b)
    same(torch.mm(rb.mT, ra.mT), b.mT @ a.mT)                       # both column-major
    same(torch.mm(ra[::2, ::2], rb[::2, 1::2]), a[::2, ::2] @ b[::2, 1::2])   # neither stride 1: copies
    out = torch.empty(7, 5, dtype=dt).to(DEV).mT                      # column-major out
    torch.mm(ra, rb, out=out)
    same(out, a @ b)


@pytest.mark.parametrize("dt", [C64, C128])
def test_bmm_matmul_einsum(dt):
    a, b = rand((3, 4, 5), dt, 3), rand((3, 5, 2), dt, 4)
    ra, rb = a.to(DEV), b.to(DEV)
    same(torch.bmm(ra, rb), a @ b)
    same(torch.bmm(ra.mT.contiguous().mT, rb[:, :, ::1]), a @ b)
    same(torch.matmul(ra, rb), a @ b)
    same(torch.matmul(ra, rb[0]), a @ b[0])
    same(torch.matmul(ra[0], rb[0]), a[0] @ b[0])
    same(torch.einsum("bij,bjk->bik", ra, rb), torch.einsum("bij,bjk->bik", a, b))
    same(torch.einsum("ij,jk->ik", ra[0], rb[0]), a[0] @ b[0])
    x = rand((1, 4, 5), dt, 5).expand(3, 4, 5)                         # batch stride 0
    same(torch.bmm(x.to(DEV), rb), torch.bmm(x, b))


@pytest.mark.parametrize("dt", [C64, C128])
def test_addmm_baddbmm(dt):
    s, a, b = rand((4, 3), dt, 6), rand((4, 5), dt, 7), rand((5, 3), dt, 8)
    rs, ra, rb = s.to(DEV), a.to(DEV), b.to(DEV)
    same(torch.addmm(rs, ra, rb), torch.addmm(s, a, b))
    same(torch.addmm(rs[0], ra, rb, beta=0.5, alpha=-3), torch.addmm(s[0], a, b, beta=0.5, alpha=-3))
    nan = torch.full((4, 3), complex(float("nan"), float("nan")), dtype=dt)
    same(torch.addmm(nan.to(DEV), ra, rb, beta=0), a @ b)            # beta == 0 ignores self
    same(torch.addmm(rs, ra, rb, beta=1 + 0j, alpha=2 + 0j), torch.addmm(s, a, b, alpha=2))
    t = rs.clone()
    t.addmm_(ra, rb, alpha=0.5)
    same(t, torch.addmm(s, a, b, alpha=0.5))
    S, A, B = rand((2, 4, 3), dt, 9), rand((2, 4, 5), dt, 10), rand((2, 5, 3), dt, 11)
    same(torch.baddbmm(S.to(DEV), A.to(DEV), B.to(DEV), beta=2, alpha=0.25),
         torch.baddbmm(S, A, B, beta=2, alpha=0.25))
    same(torch.baddbmm(S[0].to(DEV), A.to(DEV), B.to(DEV)), torch.baddbmm(S[0], A, B))
    k0 = torch.addmm(rs, ra[:, :0], rb[:0], beta=2)                   # k == 0: beta * self
    same(k0, 2 * s)


def test_complex_alpha_beta():
    a, b, s = rand((3, 4), C64, 12), rand((4, 2), C64, 13), rand((3, 2), C64, 14)
    want = torch.addmm(s, a, b, beta=1 + 2j, alpha=2 - 1j)
    got = torch.addmm(s.to(DEV), a.to(DEV), b.to(DEV), beta=1 + 2j, alpha=2 - 1j)
    same(got, want)
    S, A, B = rand((2, 3, 2), C64, 15), rand((2, 3, 4), C64, 16), rand((2, 4, 2), C64, 17)
    same(torch.baddbmm(S.to(DEV), A.to(DEV), B.to(DEV), beta=0.5j, alpha=1j), torch.baddbmm(S, A, B, beta=0.5j, alpha=1j))
    same(torch.mm(a.to(DEV).conj(), b.to(DEV)), torch.mm(a.conj(), b))          # conj bits resolved first
    same(a.to(DEV).mH @ s.to(DEV), a.mH @ s)


def test_complex32_refused():
    a = torch.zeros(2, 2, dtype=torch.complex32)
    with pytest.raises(Exception):
        torch.mm(a.to(DEV), a.to(DEV)).cpu()


# --- matrix_exp -----------------------------------------------------------------------------
# Squaring amplifies GEMM rounding (BLAS to BLAS) on ill-conditioned entries:
# errors are judged against each matrix's largest entry.

def mexp_close(got, want):
    assert isinstance(got, rgpu.RemoteTensor)
    assert got.dtype == want.dtype and got.shape == want.shape
    g = got.cpu()
    eps = 1e-5 if want.dtype in (torch.float32, C64) else 1e-12
    scale = want.abs().amax(dim=(-2, -1), keepdim=True).clamp(min=1)
    err = ((g - want).abs() / scale).nan_to_num(0.0)
    assert err.max().item() <= eps, f"relative error {err.max().item()}"
    assert torch.equal(torch.isnan(g), torch.isnan(want))

@pytest.mark.parametrize("dt", [torch.float32, torch.float64, C64, C128])
def test_matrix_exp(dt):
    a = rand((3, 4, 4), dt, 15)
    # one scaling level per matrix: tiny, moderate and large norms in one batch
    scale = torch.tensor([1e-3, 1.0, 8.0], dtype=a.real.dtype).view(3, 1, 1)
    a = a * scale
    mexp_close(torch.linalg.matrix_exp(a.to(DEV)), torch.linalg.matrix_exp(a))
    mexp_close(torch.matrix_exp(a[1].to(DEV)), torch.matrix_exp(a[1]))
    mexp_close(torch.linalg.matrix_exp(a.to(DEV).mT), torch.linalg.matrix_exp(a.mT))   # non-contiguous
    x = rand((2, 1, 1), dt, 16) if not dt.is_complex else None
    if x is not None:
        mexp_close(torch.linalg.matrix_exp(x.to(DEV)), torch.linalg.matrix_exp(x))     # n == 1: exp
    e = torch.linalg.matrix_exp(torch.zeros(2, 0, 0, dtype=dt).to(DEV))
    assert e.shape == (2, 0, 0)


def test_matrix_exp_one_wait():
    a = rand((4, 5, 5), torch.float32, 17) * torch.tensor([0.1, 3.0, 8.0, 1.0]).view(4, 1, 1)
    ra = a.to(DEV)
    rgpu.synchronize()
    w = rgpu.stats()["waits"]
    r = torch.linalg.matrix_exp(ra)
    assert rgpu.stats()["waits"] - w == 1
    mexp_close(r, torch.linalg.matrix_exp(a))


def test_matrix_exp_nan():
    a = rand((2, 3, 3), torch.float64, 18)
    a[1, 0, 0] = float("nan")
    got = torch.linalg.matrix_exp(a.to(DEV)).cpu()
    mexp_close(torch.linalg.matrix_exp(a[:1].to(DEV)), torch.linalg.matrix_exp(a[:1]))
    assert torch.isnan(got[1]).any()


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_matrix_exp_grad(dt):
    a = rand((2, 4, 4), dt, 19) * 2
    g = rand((2, 4, 4), dt, 20)
    x = a.clone().requires_grad_()
    torch.linalg.matrix_exp(x).backward(g)
    y = a.to(DEV).requires_grad_()
    torch.linalg.matrix_exp(y).backward(g.to(DEV))
    same(y.grad, x.grad)
