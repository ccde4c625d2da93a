"""Complex tensors on rgpu: what a user does with complex64 /
complex128, compared with PyTorch on the CPU. The op-by-op cases (pointwise,
reductions, movement, layouts) are in test_conformance.py (c_*)."""
import math

import pytest
import torch

import rgpu

DEV = "rgpu"


def close(got, want, **kw):
    assert isinstance(got, rgpu.RemoteTensor)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.is_conj() == want.is_conj()
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **kw)


@pytest.mark.parametrize("dt", [torch.complex64, torch.complex128])
def test_round_trip_and_item(dt):
    x = torch.tensor([[1 + 2j, -3.5 + 0.25j], [0j, float("inf") - 1j]], dtype=dt)
    r = x.to(DEV)
    assert r.dtype == dt and r.device.type == "rgpu"
    assert torch.equal(r.cpu(), x)
    assert r[0, 1].item() == x[0, 1].item()
    assert isinstance(r[0, 0].item(), complex)
    assert r.tolist() == x.tolist()
    assert repr(r) == repr(x)[:-1] + ", device='rgpu:0'" + repr(x)[-1:] if dt is torch.complex64 else \
        repr(r) == repr(x)[:-1].replace("dtype", "device='rgpu:0', dtype") + ")"


def test_complex32_storage():
    x = torch.tensor([1 + 2j, 0.5 - 0.25j], dtype=torch.complex32)
    r = x.to(DEV)
    assert r.dtype == torch.complex32
    assert torch.equal(r.cpu().view(torch.float32), x.view(torch.float32))
    assert torch.equal(r.to(torch.complex64).cpu(), x.to(torch.complex64))


def test_casts():
    x = torch.tensor([1.5, -2.25, 3.0])
    c = x.to(DEV).to(torch.complex64)
    close(c, x.to(torch.complex64))
    z = torch.tensor([1 + 2j, -3 - 4j])
    with pytest.warns(UserWarning):                      # "Casting complex values to real discards ..."
        r = z.to(DEV).to(torch.float32)
    assert torch.equal(r.cpu(), z.real)
    assert torch.equal(z.to(DEV).to(torch.complex128).cpu(), z.to(torch.complex128))


def test_views_share_storage():
    z = torch.tensor([1 + 2j, 3 + 4j, 5 + 6j])
    r = z.to(DEV)
    v = torch.view_as_real(r)
    v[1, 1] = 40.0                                       # writes through the view
    r.real.mul_(10)
    r.imag[0] = -1
    z2 = z.clone()
    torch.view_as_real(z2)[1, 1] = 40.0
    z2.real.mul_(10)
    z2.imag[0] = -1
    close(r, z2)
    close(torch.view_as_complex(v[1:]), torch.view_as_complex(torch.view_as_real(z2)[1:]))


def test_conj_bit_is_lazy_and_resolved():
    z = torch.tensor([[1 + 2j, 3 - 4j], [5j, -6 + 0j]])
    r = z.to(DEV)
    c = r.conj()
    assert c.is_conj() and not r.is_conj()
    close(c, z.conj())
    close(c.T, z.conj().T)
    close(c.imag, z.conj().imag)                          # a neg view of the imaginary part
    assert c.imag.is_neg()
    close(c.resolve_conj(), z.conj().resolve_conj())
    assert repr(c) == repr(z.conj())[:-1] + ", device='rgpu:0')"      # printing shows conjugated values
    assert c.tolist() == z.conj().tolist() and c.imag.tolist() == z.conj().imag.tolist()
    close(r.mH.contiguous(), z.mH.contiguous())
    d = torch.empty_like(r)
    d.copy_(c)
    close(d, z.conj().resolve_conj())
    e = torch.zeros_like(r).conj()                        # copy into a conj view
    e.copy_(r)
    close(e, torch.zeros_like(z).conj().copy_(z))
    close(torch.view_as_real(r.conj().resolve_conj()), torch.view_as_real(z.conj().resolve_conj()))
    with pytest.raises(RuntimeError, match="view_as_real doesn't work on unresolved conjugated tensors"):
        torch.view_as_real(r.conj())
    close(r.conj().conj(), z)                              # conj of conj: the bit goes
    assert not r.conj().conj().is_conj()


def test_arithmetic_with_scalars_and_reals():
    z = torch.tensor([1 + 2j, -3 + 0.5j, 0.25 - 4j], dtype=torch.complex128)
    x = torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)
    r, xr = z.to(DEV), x.to(DEV)
    for f in (lambda a, b: a + b * 1j, lambda a, b: a * b, lambda a, b: a / (b + 1j), lambda a, b: b - a,
              lambda a, b: (a ** 2 + 3) / a, lambda a, b: a.abs() + b, lambda a, b: a.angle() * b,
              lambda a, b: torch.exp(a) - torch.log(a) * torch.sqrt(a), lambda a, b: torch.polar(b.abs(), b)):
        close(f(r, xr), f(z, x), rtol=1e-12, atol=1e-12)


def test_inplace_complex_into_real_raises():
    x = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        x.add_(1j)
    assert torch.equal(x.cpu(), torch.ones(3))           # nothing lost


def test_unsupported_op_is_a_clear_error():
    z = torch.tensor([1 + 2j, 3 - 4j], device=DEV)
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.sort(z)                                    # CPU refuses complex sort too
    with pytest.raises(NotImplementedError, match="complex"):
        torch.ops.aten.softplus.default(z)               # no complex kernel on rgpu
    assert torch.equal(z.cpu(), torch.tensor([1 + 2j, 3 - 4j]))  # the session goes on


def test_random_complex():
    torch.manual_seed(3)
    a = torch.randn(4000, dtype=torch.complex64, device=DEV).cpu()
    # each part has variance 1/2, as ATen's complex normal
    assert abs(a.real.var().item() - 0.5) < 0.05 and abs(a.imag.var().item() - 0.5) < 0.05
    u = torch.rand(1000, dtype=torch.complex128, device=DEV).cpu()
    assert 0 <= u.real.min() and u.real.max() < 1 and 0 <= u.imag.min() and u.imag.max() < 1


def test_determinism():
    torch.manual_seed(0)
    z = torch.randn(64, 33, dtype=torch.complex64)
    outs = []
    for _ in range(2):
        r = z.to(DEV)
        y = torch.tanh(r) * torch.log(r + 2) / (r.conj() + 1j)
        outs.append(torch.cat([y.sum(0), y.prod(1)[:5], torch.atan(y).mean(1)]).cpu())
    assert torch.equal(torch.view_as_real(outs[0]), torch.view_as_real(outs[1]))


def _grads(dev):
    torch.manual_seed(0)
    z = torch.randn(5, 4, dtype=torch.complex64).to(dev).requires_grad_()
    w = torch.randn(4, dtype=torch.complex64).to(dev).requires_grad_()
    y = torch.sigmoid(z * w) + torch.exp(z.conj() / (w + 2)) - torch.tanh(z).pow(2) * z.abs()
    loss = (y.real ** 2).sum() + y.imag.mean() + torch.view_as_real(z.sqrt()).sum() + y.angle().sum()
    loss.backward()
    return loss.detach().cpu(), z.grad.cpu(), w.grad.cpu()


def test_wirtinger_gradients_match_cpu():
    a, b = _grads("cpu"), _grads(DEV)
    for x, y in zip(a, b):
        torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-5)


class ComplexLinear(torch.nn.Module):
    def __init__(self, n, m):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n, m, dtype=torch.complex64) / n ** 0.5)
        self.b = torch.nn.Parameter(torch.zeros(m, dtype=torch.complex64))

    def forward(self, x):
        return (x[..., :, None] * self.w).sum(-2) + self.b


def _train(dev, steps=20):
    torch.manual_seed(0)
    net = torch.nn.Sequential(ComplexLinear(6, 8), ComplexLinear(8, 3)).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=0.02)
    x = torch.randn(16, 6, dtype=torch.complex64).to(dev)
    t = torch.randn(16, 3, dtype=torch.complex64).to(dev)
    losses = []
    for _ in range(steps):
        y = net(x)
        y = y * torch.sigmoid(y.abs())                  # a complex "activation"
        loss = (y - t).abs().pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in net.parameters()]


def test_complex_training_loop_matches_cpu():
    lc, pc = _train("cpu")
    lr, pr = _train(DEV)
    assert lr[-1] < lr[0]
    torch.testing.assert_close(torch.tensor(lr), torch.tensor(lc), rtol=1e-4, atol=1e-5)
    for a, b in zip(pr, pc):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


COMPLEX_PROGRAM = r"""
import torch, rgpu
torch.manual_seed(0)
z = torch.randn(6, 5, dtype=torch.complex64).to("rgpu")
w = torch.randn(5, dtype=torch.complex128).to("rgpu")
z2 = z.to(torch.complex128)                    # the trace's first copy_: a complex output
y = torch.exp(z2 * w) / (z.conj() + 2j)
print(torch.cat([y.sum(0), y[1:3].flatten()]).cpu().tolist()[:2])
"""


def test_trace_tools_handle_complex(tmp_path):
    import json
    import os
    import subprocess
    import sys
    repo = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    bin_dir = os.environ.get("RGPU_BIN") or os.path.join(repo, "build", "bin")
    trace = tmp_path / "c.rgt"
    env = dict(os.environ, RGPU_RECORD=str(trace), PYTHONPATH=os.path.join(repo, "torchhook"))
    env.pop("RGPU_SERVER", None)
    p = subprocess.run([sys.executable, "-c", COMPLEX_PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    e = dict(os.environ)
    e.pop("RGPU_CPU_FAULT", None)
    r = subprocess.run([os.path.join(bin_dir, "rgpu-replay"), str(trace), "--verify", "--backend", "cpu"],
                       capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([os.path.join(bin_dir, "rgpu-diff"), str(trace), "--a", "cpu", "--b", "cpu", "--json"],
                       capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["outputs_compared"] > 0
    # a one-ulp fault in copy_ (complex outputs: the complex64 -> complex128 casts) is found and named
    e["RGPU_CPU_FAULT"] = "copy_"
    r = subprocess.run([os.path.join(bin_dir, "rgpu-diff"), str(trace), "--a", "cpu", "--b", "cpu", "--json"],
                       capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    first = json.loads(r.stdout)["first"]
    assert first["op"] == "copy_" and first["dtype_a"] == "complex128", first


class SpectralConv1d(torch.nn.Module):
    """A Fourier layer (FNO's): rfft, complex weights on the lowest modes, irfft."""
    def __init__(self, cin, cout, modes):
        super().__init__()
        self.modes = modes
        scale = 1 / (cin * cout)
        self.w = torch.nn.Parameter(scale * torch.randn(cin, cout, modes, dtype=torch.cfloat))

    def forward(self, x):                       # x: (batch, cin, n) real
        xf = torch.fft.rfft(x, norm="ortho")
        out = torch.zeros(x.shape[0], self.w.shape[1], xf.shape[-1], dtype=torch.cfloat, device=x.device)
        out[:, :, :self.modes] = torch.einsum("bix,iox->box", xf[:, :, :self.modes], self.w)
        return torch.fft.irfft(out, n=x.shape[-1], norm="ortho")


def _train_spectral(dev, steps=20):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv1d(1, 4, 1), SpectralConv1d(4, 4, 6), torch.nn.GELU(),
                              SpectralConv1d(4, 4, 6), torch.nn.Conv1d(4, 1, 1)).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    xs = torch.linspace(0, 1, 32)
    x = torch.stack([torch.sin(2 * math.pi * k * xs) for k in range(1, 9)])[:, None].to(dev)
    y = torch.stack([torch.cos(2 * math.pi * k * xs) * k / 8 for k in range(1, 9)])[:, None].to(dev)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in net.parameters()]


def test_spectral_layer_training_matches_cpu():
    """A complex training loop: an FNO-style spectral model, 20 Adam steps, CPU's losses."""
    lc, pc = _train_spectral("cpu")
    lr, pr = _train_spectral(DEV)
    assert lr[-1] < lr[0] * 0.9
    torch.testing.assert_close(torch.tensor(lr), torch.tensor(lc), rtol=1e-4, atol=1e-6)
    for a, b in zip(pr, pc):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)
