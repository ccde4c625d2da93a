"""Complex linalg where results are unique only up to phases, or
the check needs CPU math: eigh/svd/eig vectors by reconstruction, lu_solve
with left=False, LinAlgError messages as CPU's. Inputs are made on the CPU;
only linalg ops run on rgpu. The conformance cases (test_conformance.py,
"cla_*") compare the unique outputs."""
import pytest
import torch

import rgpu

DEV = "rgpu"
C64, C128 = torch.complex64, torch.complex128
TOL = {C64: 2e-4, C128: 1e-10, torch.float32: 2e-4, torch.float64: 1e-10}


def _cx(shape, dt, seed=0, kind="gen"):
    g = torch.Generator().manual_seed(seed)
    a = torch.complex(torch.randn(shape, generator=g, dtype=torch.float64),
                      torch.randn(shape, generator=g, dtype=torch.float64))
    if kind == "hpd":
        a = a @ a.mH + shape[-1] * torch.eye(shape[-1], dtype=C128)
    elif kind == "wc":
        a = a + 2 * shape[-1] * torch.eye(shape[-1], dtype=C128)
    return a.to(dt)


def _close(got, want, dt):
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=TOL[dt], atol=TOL[dt])


@pytest.mark.parametrize("dt", [C64, C128])
def test_eigh_vectors(dt):
    a = _cx((3, 4, 4), dt, kind="hpd")
    for x, uplo in ((a, "L"), (a.mT, "U")):           # batched, and a transposed (non-contiguous) view
        w, v = torch.linalg.eigh(x.to(DEV), UPLO=uplo)
        w, v = w.cpu(), v.cpu()
        cw = torch.linalg.eigvalsh(x)
        _close(w, cw, w.dtype)
        _close(x @ v, v * w.to(dt).unsqueeze(-2), dt)
        _close(v.mH @ v, torch.eye(4, dtype=dt).expand(3, 4, 4), dt)


@pytest.mark.parametrize("dt", [C64, C128])
@pytest.mark.parametrize("shape", [(2, 5, 3), (2, 3, 5), (4, 4)])
def test_svd_vectors(dt, shape):
    a = _cx(shape, dt)
    for full in (False, True):
        u, s, vh = (t.cpu() for t in torch.linalg.svd(a.to(DEV), full_matrices=full))
        cu, cs, cvh = torch.linalg.svd(a, full_matrices=full)
        assert u.shape == cu.shape and vh.shape == cvh.shape and s.dtype == cs.dtype
        _close(s, cs, s.dtype)
        k = s.shape[-1]
        _close((u[..., :k] * s.to(dt).unsqueeze(-2)) @ vh[..., :k, :], a, dt)
        _close(u.mH @ u, torch.eye(u.shape[-1], dtype=dt).expand_as(u.mH @ u), dt)
        _close(vh @ vh.mH, torch.eye(vh.shape[-2], dtype=dt).expand_as(vh @ vh.mH), dt)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, C64, C128])
def test_eig(dt):
    a = _cx((2, 5, 5), dt) if dt.is_complex else torch.randn(2, 5, 5, dtype=dt)
    for x in (a, a.mT):
        w, v = torch.linalg.eig(x.to(DEV))
        w, v = w.cpu(), v.cpu()
        cw, cv = torch.linalg.eig(x)
        assert w.dtype == cw.dtype and v.dtype == cv.dtype
        # geev's order is LAPACK's (torch's CPU LAPACK may differ): each eigenvalue is one of CPU's
        dist = (w.unsqueeze(-1) - cw.unsqueeze(-2)).abs().amin(-1)
        assert dist.max().item() < 1e-3 * max(1.0, cw.abs().max().item()), dist
        _close(x.to(cv.dtype) @ v, v * w.unsqueeze(-2), cv.dtype)
        _close(torch.linalg.vector_norm(v, dim=-2), torch.ones(2, 5, dtype=w.real.dtype), w.real.dtype)
        _close(torch.linalg.eigvals(x.to(DEV)).cpu(), w, cw.dtype)


@pytest.mark.parametrize("dt", [C64, C128])
def test_lu_solve_right(dt):
    a, b = _cx((2, 4, 4), dt, kind="wc"), _cx((2, 3, 4), dt, seed=1)
    lu, piv = torch.linalg.lu_factor(a.to(DEV))
    clu, cpiv = torch.linalg.lu_factor(a)
    for adj in (False, True):
        got = torch.linalg.lu_solve(lu, piv, b.to(DEV), left=False, adjoint=adj).cpu()
        _close(got, torch.linalg.lu_solve(clu, cpiv, b, left=False, adjoint=adj).resolve_conj(), dt)


def _raises_as_cpu(fn, x):
    with pytest.raises(Exception) as want:
        fn(x)
    with pytest.raises(want.type) as got:
        fn(x.to(DEV))
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("dt", [C64, C128])
def test_errors(dt):
    a = _cx((2, 3, 3), dt, kind="hpd")
    z = torch.zeros(2, 3, 3, dtype=dt)
    _raises_as_cpu(torch.linalg.cholesky, -a)
    _raises_as_cpu(torch.linalg.inv, z)
    _raises_as_cpu(lambda x: torch.linalg.solve(x, x), z)
    _raises_as_cpu(torch.linalg.lu_factor, z)          # a RuntimeError, as CPU's
    # the _ex variants report through info, without raising
    assert torch.linalg.cholesky_ex((-a).to(DEV)).info.cpu().tolist() == [1, 1]
    assert torch.linalg.inv_ex(z.to(DEV)).info.cpu().tolist() == [1, 1]


@pytest.mark.parametrize("dt", [C64, C128])
def test_ldl_hermitian(dt):
    """hermitian=True: hetrf/hetrs on the cpu backend; the cuda backend refuses it (cuSOLVER has no hetrf),
    as torch's cuSOLVER path does."""
    a = _cx((2, 5, 5), dt)
    a = a + a.mH
    b = _cx((2, 5, 2), dt, seed=1)
    if rgpu.server.info()["backend"].startswith("cuda"):
        with pytest.raises(Exception, match="hermitian=True"):
            torch.linalg.ldl_factor(a.to(DEV), hermitian=True)[0].cpu()
        return
    ld, piv = torch.linalg.ldl_factor(a, hermitian=True)
    rld, rpiv = torch.linalg.ldl_factor(a.to(DEV), hermitian=True)
    _close(rld.cpu(), ld, dt)
    assert torch.equal(rpiv.cpu(), piv)
    _close(torch.linalg.ldl_solve(rld, rpiv, b.to(DEV), hermitian=True).cpu(),
           torch.linalg.ldl_solve(ld, piv, b, hermitian=True), dt)


def test_ldl_errors():
    z = torch.zeros(2, 3, 3, dtype=torch.float64)
    _raises_as_cpu(torch.linalg.ldl_factor, z)
    assert torch.linalg.ldl_factor_ex(z.to(DEV)).info.cpu().tolist() == [1, 1]


@pytest.mark.parametrize("dt", [torch.float64, torch.complex128])
def test_eig_eigh_svd_backward(dt):
    """Backward of eig, eigh and svd (complex math in their formulas: mH, complex matmul) vs CPU."""
    torch.manual_seed(0)
    a = torch.randn(4, 4, dtype=dt)
    h = a + a.mH
    def losses(x, y):
        w, v = torch.linalg.eig(x)
        e, u = torch.linalg.eigh(y)
        s = torch.linalg.svdvals(x)
        return w.real.sum() + (w.imag ** 2).sum() + e.pow(2).sum() + (u[:, 0].abs() ** 2 * e).sum() + s.sum()
    ca, ch = a.clone().requires_grad_(True), h.clone().requires_grad_(True)
    losses(ca, ch).backward()
    ra, rh = a.to(DEV).requires_grad_(True), h.to(DEV).requires_grad_(True)
    losses(ra, rh).backward()
    torch.testing.assert_close(ra.grad.cpu(), ca.grad, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(rh.grad.cpu(), ch.grad, rtol=1e-8, atol=1e-8)


_BACKWARD = {
    "cholesky": lambda a, p, b: torch.linalg.cholesky(p).abs().sum(),
    "inv": lambda a, p, b: torch.linalg.inv(a).real.sum(),
    "solve": lambda a, p, b: torch.linalg.solve(a, b).abs().pow(2).sum(),
    "det": lambda a, p, b: torch.linalg.det(a).abs(),
    "slogdet": lambda a, p, b: torch.linalg.slogdet(a)[1] + torch.linalg.slogdet(a)[0].real,
    "qr": lambda a, p, b: torch.linalg.qr(a)[1].abs().sum(),
    "lu": lambda a, p, b: sum(t.abs().sum() for t in torch.linalg.lu(a)[1:]),
    "pinv": lambda a, p, b: torch.linalg.pinv(a).abs().sum(),
    "lstsq": lambda a, p, b: torch.linalg.lstsq(a, b).solution.abs().sum(),
    "svd": lambda a, p, b: (torch.linalg.svd(a)[0][:, 0].abs() * torch.linalg.svd(a)[1]).sum(),
    "matrix_exp": lambda a, p, b: torch.linalg.matrix_exp(a * 0.3).abs().sum(),
    "eigvals": lambda a, p, b: torch.linalg.eigvals(a).abs().sum(),
    "solve_triangular": lambda a, p, b: torch.linalg.solve_triangular(torch.triu(p), b, upper=True).abs().sum(),
    "cholesky_solve": lambda a, p, b: torch.cholesky_solve(b, torch.linalg.cholesky(p)).abs().sum(),
    "fft2": lambda a, p, b: torch.fft.ifft2(torch.fft.fft2(a) * a).abs().sum(),
}


@pytest.mark.parametrize("name", sorted(_BACKWARD))
def test_complex_backward_matches_cpu(name):
    """PyTorch's backward formulas of the linalg and fft ops (Wirtinger, through the
    complex layer) give CPU's gradients for complex128 inputs."""
    torch.manual_seed(0)
    dt = torch.complex128
    A = torch.randn(4, 4, dtype=dt)
    P = A @ A.mH + 4 * torch.eye(4, dtype=dt)
    B = torch.randn(4, 2, dtype=dt)
    grads = []
    for dev in ("cpu", DEV):
        ts = [t.detach().clone().to(dev).requires_grad_() for t in (A, P, B)]
        _BACKWARD[name](*ts).backward()
        grads.append([None if t.grad is None else t.grad.cpu() for t in ts])
    for want, got in zip(*grads):
        assert (want is None) == (got is None)
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-8)
