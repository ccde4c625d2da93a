"""torch.fft on rgpu against PyTorch CPU: every torch.fft function,
every norm, real and complex dtypes, sizes that are powers of two, smooth,
prime; n= padding and trimming, dim= choices, 2-d and n-d, batched and
non-contiguous inputs; stft/istft; large sizes for accuracy; errors;
gradients; determinism. The three ATen primitives (_fft_c2c, _fft_r2c,
_fft_c2r) run on the server (replayer/op/fft_plan.c on cpu, cuFFT on cuda); the
rest are composites. Runs against the cuda backend too (RGPU_BACKEND=cuda,
RGPU_SERVER_BIN=build-emu/bin/rgpu-server on cudaemu)."""
import pytest
import torch

import rgpu  # noqa: F401 - registers the device

DEV = "rgpu"
F32, F64, C64, C128 = torch.float32, torch.float64, torch.complex64, torch.complex128
DTYPES = [F32, F64, C64, C128]
NORMS = [None, "backward", "ortho", "forward"]
SIZES = [1, 2, 5, 8, 12, 17, 97, 128, 1000]
# relative to max|want|: what float32 / float64 computations of these sizes reach
RTOL = {F32: 2e-6, C64: 2e-6, F64: 1e-13, C128: 1e-13}


def rand(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g)


def close(got, want, what=""):
    assert got.device.type == DEV, what
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    g = got.cpu()
    if want.numel() == 0:
        return
    scale = max(want.abs().max().item(), 1.0)
    err = (g - want).abs().max().item()
    real = want.dtype.to_real() if want.is_complex() else want.dtype
    tol = RTOL[real] * scale * (4 if real == F32 else 1)
    assert err <= tol, f"{what}: max error {err:.3g} > {tol:.3g} (max|want| {scale:.3g})"


def both(fn, x, what=""):
    """fn on CPU x and on its rgpu copy (same layout), compared; an error on
    CPU must be the same exception type on rgpu."""
    try:
        want = fn(x)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            fn(x.to(DEV)).cpu()
        return
    got = fn(x.to(DEV))
    close(got, want, what)


REAL_IN = {"rfft", "ihfft", "rfft2", "ihfft2", "rfftn", "ihfftn"}
ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]



def cases(names, dtypes):
    """(name, dtype) pairs, leaving out a complex input of a real-input function
    (test_errors has that case)."""
    return [(n, d) for n in names for d in dtypes if not (n in REAL_IN and d.is_complex)]


# --- 1-d: every function x norm x dtype x size, with n= and dim= ------------------------

@pytest.mark.parametrize("name,dt", cases(ONE_D, DTYPES))
@pytest.mark.parametrize("norm", NORMS)
def test_1d(name, norm, dt):
    f = getattr(torch.fft, name)
    for n in SIZES:
        x = rand((n,), dt, n)
        both(lambda t: f(t, norm=norm), x, f"{name} n={n}")
        # n= padding (constant_pad_nd of a complex tensor: the complex layer's) and trimming
        for m in (n + 3, max(n // 2, 1)):
            both(lambda t: f(t, n=m, norm=norm), x, f"{name} n={n} -> {m}")
        # batched along either dim
        xb = rand((3, n), dt, n + 1)
        both(lambda t: f(t, dim=-1, norm=norm), xb, f"{name} (3,{n}) dim=-1")
        both(lambda t: f(t, dim=0, norm=norm), xb.T.contiguous(), f"{name} ({n},3) dim=0")


# --- 2-d and n-d ------------------------------------------------------------------------

ND = ["fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2", "fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn"]


@pytest.mark.parametrize("name,dt", cases(ND, DTYPES))
@pytest.mark.parametrize("norm", NORMS)
def test_nd(name, norm, dt):
    f = getattr(torch.fft, name)
    for shape in ((4, 6), (3, 5, 7), (2, 1, 12), (2, 3, 4, 5), (17, 8)):
        x = rand(shape, dt, sum(shape))
        both(lambda t: f(t, norm=norm), x, f"{name} {shape}")
        if len(shape) >= 3:
            dims = (0, 2) if name.endswith("2") else (2, 0, 1)
            both(lambda t: f(t, dim=dims, norm=norm), x, f"{name} {shape} dim={dims}")
            s = (5, 3) if name.endswith("2") else (3, 6, 2)
            both(lambda t: f(t, s=s, dim=dims, norm=norm), x, f"{name} {shape} s={s} dim={dims}")


# --- non-contiguous inputs --------------------------------------------------------------

@pytest.mark.parametrize("name,dt", cases(["fft", "ifft", "rfft", "irfft", "fft2", "rfftn", "irfftn", "ifftn"],
                                           DTYPES))
def test_noncontiguous(name, dt):
    f = getattr(torch.fft, name)
    base = rand((12, 10), dt, 3)
    for lab, view in (("T", lambda b: b.T), ("slice", lambda b: b[1:, ::2]), ("T-slice", lambda b: b.T[::3])):
        want = f(view(base))
        got = f(view(base.to(DEV)))
        close(got, want, f"{name} {lab}")
        if name in ("fft", "rfft", "irfft", "ifft"):
            close(f(view(base.to(DEV)), dim=0), f(view(base), dim=0), f"{name} {lab} dim=0")


def test_out_variant():
    x = rand((4, 8), C64)
    want = torch.fft.fft(x)
    out = torch.empty((4, 8), dtype=C64, device=DEV)
    r = torch.fft.fft(x.to(DEV), out=out)
    close(out, want, "fft out=")
    assert r is out


# --- shift and freq ---------------------------------------------------------------------

@pytest.mark.parametrize("dt", DTYPES)
def test_shift(dt):
    for shape in ((7,), (4, 5), (3, 4, 6)):
        x = rand(shape, dt)
        for fn in (torch.fft.fftshift, torch.fft.ifftshift):
            both(fn, x, f"{fn.__name__} {shape}")
            both(lambda t: fn(t, dim=0), x, f"{fn.__name__} {shape} dim=0")
            if len(shape) > 1:
                both(lambda t: fn(t, dim=(-1, 0)), x, f"{fn.__name__} {shape} dim=(-1,0)")


@pytest.mark.parametrize("dt", [F32, F64])
def test_freq(dt):
    for n in (1, 2, 5, 8, 17):
        for d in (1.0, 0.25):
            close(torch.fft.fftfreq(n, d, dtype=dt, device=DEV), torch.fft.fftfreq(n, d, dtype=dt), f"fftfreq {n}")
            close(torch.fft.rfftfreq(n, d, dtype=dt, device=DEV), torch.fft.rfftfreq(n, d, dtype=dt),
                  f"rfftfreq {n}")


# --- c2r semantics: the imaginary parts of DC and Nyquist are dropped --------------------

@pytest.mark.parametrize("dt", [C64, C128])
def test_irfft_nonhermitian(dt):
    for n in (4, 5, 8, 9):
        x = rand((3, n // 2 + 1), dt, n)
        both(lambda t: torch.fft.irfft(t, n=n), x, f"irfft {n}")
        x2 = rand((3, 4, n // 2 + 1), dt, n + 7)
        both(lambda t: torch.fft.irfftn(t, s=(3, 4, n)), x2, f"irfftn {n}")
        both(lambda t: torch.fft.irfft2(t, s=(4, n)), x2, f"irfft2 {n}")


def test_primitives_direct():
    aten = torch.ops.aten
    x = rand((3, 8), C128)
    for norm in (0, 1, 2):
        for fwd in (True, False):
            both(lambda t: aten._fft_c2c(t, [1, 0], norm, fwd), x, f"c2c {norm} {fwd}")
        both(lambda t: aten._fft_c2r(t, [1], norm, 14), x, f"c2r {norm}")
        both(lambda t: aten._fft_c2r(t, [0, 1], norm, 14), x, f"c2r 2-d {norm}")
        # ATen's CPU kernel asserts the last dim is last_dim_size//2+1 (or all of it)
        both(lambda t: aten._fft_c2r(t, [0, 1], norm, 15), x, f"c2r 2-d odd {norm}")
        for one in (True, False):
            both(lambda t: aten._fft_r2c(t, [0, 1], norm, one), x.real.contiguous(), f"r2c {norm} {one}")


# --- stft / istft -----------------------------------------------------------------------

@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("dt", [F32, F64])
def test_stft(center, dt):
    x = rand((2, 200), dt, 5)
    w = torch.hann_window(32, dtype=dt)
    kw = dict(n_fft=32, hop_length=8, center=center, return_complex=True)
    want = torch.stft(x, window=w, **kw)
    got = torch.stft(x.to(DEV), window=w.to(DEV), **kw)
    close(got, want, "stft")
    # istft: center=False with a hann window fails ATen's overlap-add check (its first
    # sample is 0): the same error on rgpu
    both(lambda s: torch.istft(s, n_fft=32, hop_length=8, window=w.to(s.device), center=center,
                               length=200 if center else None), want, "istft")


# --- accuracy at large sizes ------------------------------------------------------------

@pytest.mark.parametrize("n", [1 << 16, 3 * 5 ** 6, 65537, 10007])
def test_large_accuracy(n):
    x = rand((n,), C128, n)
    want = torch.fft.fft(x)
    got = torch.fft.fft(x.to(DEV)).cpu()
    rel = ((got - want).abs().max() / want.abs().max()).item()
    assert rel < 1e-12, f"fft complex128 n={n}: relative error {rel:.3g}"
    back = torch.fft.ifft(torch.fft.fft(x.to(DEV))).cpu()
    assert ((back - x).abs().max() / x.abs().max()).item() < 1e-12
    xr = rand((n,), F64, n + 1)
    rel = ((torch.fft.rfft(xr.to(DEV)).cpu() - torch.fft.rfft(xr)).abs().max()
           / torch.fft.rfft(xr).abs().max()).item()
    assert rel < 1e-12, f"rfft float64 n={n}: relative error {rel:.3g}"
    x32 = x.to(C64)
    torch.testing.assert_close(torch.fft.fft(x32.to(DEV)).cpu(), torch.fft.fft(x32),
                               atol=1e-5 * n ** 0.5, rtol=1.3e-6)


# --- errors: the same exception type as on CPU -----------------------------------------

ERRORS = [
    ("fft bad dim", lambda t: torch.fft.fft(t, dim=3), lambda: rand((4, 5), C64)),
    ("fft2 repeated dim", lambda t: torch.fft.fft2(t, dim=(0, 0)), lambda: rand((4, 5), C64)),
    ("fft n=0", lambda t: torch.fft.fft(t, n=0), lambda: rand((4, 5), C64)),
    ("rfft of complex", lambda t: torch.fft.rfft(t), lambda: rand((4, 5), C64)),
    ("ihfft of complex", lambda t: torch.fft.ihfft(t), lambda: rand((4, 5), C64)),
    ("irfft n=0", lambda t: torch.fft.irfft(t, n=0), lambda: rand((4, 5), C64)),
    ("c2r of a real tensor", lambda t: torch.ops.aten._fft_c2r(t, [1], 0, 8), lambda: rand((4, 5), F32)),
    ("c2c of a real tensor", lambda t: torch.ops.aten._fft_c2c(t, [1], 0, True), lambda: rand((4, 5), F32)),
    ("r2c of a complex tensor", lambda t: torch.ops.aten._fft_r2c(t, [1], 0, True), lambda: rand((4, 5), C64)),
    ("fft of int", lambda t: torch.fft.fft(t), lambda: torch.arange(6)),
]


@pytest.mark.parametrize("what,fn,mk", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(what, fn, mk):
    both(fn, mk(), what)


# --- gradients --------------------------------------------------------------------------

def _grad(fn, x):
    x = x.clone().requires_grad_(True)
    fn(x).backward()
    return x.grad


@pytest.mark.parametrize("dt", [F32, F64])
def test_grad(dt):
    x = rand((3, 10), dt, 11)
    losses = {
        "rfft": lambda t: torch.view_as_real(torch.fft.rfft(t)).pow(2).sum(),
        "rfft ortho dim0": lambda t: torch.view_as_real(torch.fft.rfft(t, dim=0, norm="ortho")).pow(2).sum(),
        "fft": lambda t: torch.view_as_real(torch.fft.fft(t)).pow(2).sum(),
        "fft2": lambda t: (torch.view_as_real(torch.fft.fft2(t)) * torch.arange(2.0, dtype=dt, device=t.device)).sum(),
        "irfft": lambda t: (torch.fft.irfft(torch.fft.rfft(t), n=10) * t).sum(),
        "rfft->irfft": lambda t: torch.fft.irfft(torch.fft.rfft(t), n=12).pow(2).sum(),
        "fft abs": lambda t: torch.fft.fft(t).abs().sum(),
    }
    for name, fn in losses.items():
        want = _grad(fn, x)
        got = _grad(fn, x.to(DEV))
        close(got, want, f"grad {name}")


# --- determinism ------------------------------------------------------------------------

def test_deterministic():
    x = rand((5, 97), C64, 1).to(DEV)
    xr = rand((5, 1000), F32, 2).to(DEV)
    for fn in (lambda: torch.fft.fft(x), lambda: torch.fft.rfft(xr), lambda: torch.fft.irfft(x, n=50),
               lambda: torch.fft.fftn(x, norm="ortho")):
        a, b = fn().cpu(), fn().cpu()
        assert torch.equal(torch.view_as_real(a) if a.is_complex() else a,
                           torch.view_as_real(b) if b.is_complex() else b)
