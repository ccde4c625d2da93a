"""torch.nn's parameter-free layers on rgpu against CPU: output and input gradient.
Some backwards run through rgpu's own decompositions (decomp.py: hardshrink,
softshrink, replication_pad{1,2,3}d), which PyTorch has no decomposition for."""
import pytest
import torch
import torch.nn as nn

import rgpu  # noqa: F401

X1, X2, X3 = (2, 3, 7), (2, 4, 6, 5), (1, 2, 3, 4, 4)
LAYERS = {
    "selu": (nn.SELU(), X2), "celu": (nn.CELU(0.7), X2), "mish": (nn.Mish(), X2),
    "hardswish": (nn.Hardswish(), X2), "hardsigmoid": (nn.Hardsigmoid(), X2), "relu6": (nn.ReLU6(), X2),
    "softplus": (nn.Softplus(2, 3), X2), "logsigmoid": (nn.LogSigmoid(), X2), "softsign": (nn.Softsign(), X2),
    "tanhshrink": (nn.Tanhshrink(), X2), "softshrink": (nn.Softshrink(0.3), X2),
    "hardshrink": (nn.Hardshrink(0.3), X2), "hardtanh": (nn.Hardtanh(-0.5, 0.7), X2), "elu": (nn.ELU(0.5), X2),
    "leaky_relu": (nn.LeakyReLU(0.2), X2), "gelu_tanh": (nn.GELU("tanh"), X2), "softmin": (nn.Softmin(-1), X2),
    "glu": (nn.GLU(1), X2), "threshold": (nn.Threshold(0.1, 2.0), X2), "softmax2d": (nn.Softmax2d(), X2),
    "replication_pad1d": (nn.ReplicationPad1d((2, 3)), X1), "replication_pad2d": (nn.ReplicationPad2d((2, 1, 0, 3)), X2),
    "replication_pad3d": (nn.ReplicationPad3d(1), X3), "reflection_pad1d": (nn.ReflectionPad1d(2), X1),
    "reflection_pad2d": (nn.ReflectionPad2d((2, 1, 3, 0)), X2), "reflection_pad3d": (nn.ReflectionPad3d(1), X3),
    "circular_pad2d": (nn.CircularPad2d(1), X2), "constant_pad3d": (nn.ConstantPad3d(1, 0.5), X3),
    "max_pool_ceil": (nn.MaxPool2d(2, ceil_mode=True), X2),
    "avg_pool_divisor": (nn.AvgPool2d(3, 1, 1, ceil_mode=True, divisor_override=2), X2),
    "lp_pool1d": (nn.LPPool1d(2, 2), X1), "adaptive_avg_pool2d": (nn.AdaptiveAvgPool2d((3, 2)), X2),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_and_grad_equal_cpu(name):
    m, shape = LAYERS[name]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    xc, xr = x.clone().requires_grad_(), x.to("rgpu").requires_grad_()
    a, b = m(xc), m.to("rgpu")(xr)
    w = torch.randn(a.shape, generator=g)
    (a * w).sum().backward()
    (b * w.to("rgpu")).sum().backward()
    torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xr.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
