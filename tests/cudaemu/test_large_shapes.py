"""Shapes the conformance suite (3x4x5 and the like) does not reach: rows and
reductions longer than one block, grids of many blocks, sizes one past a
block or warp boundary, where launch geometry, grid-stride loops, multi-pass
reductions and scans have their own code paths. Each op on rgpu against
PyTorch CPU. Run by tests/cudaemu/run-tests.sh on the cuda backend (cudaemu);
any backend works."""
import pytest
import torch
import torch.nn.functional as F

import rgpu  # noqa: F401  (registers the device)

DEV = "rgpu"
SHAPES_2D = [(3, 257), (2, 1025), (5, 4097), (1, 70001), (300, 33)]


def close(got, want, rtol=1e-5, atol=1e-5):
    torch.testing.assert_close(got.cpu(), want, rtol=rtol, atol=atol, equal_nan=True)


def data(shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


@pytest.mark.parametrize("shape", SHAPES_2D)
@pytest.mark.parametrize("dim", [0, 1, None])
def test_sum_mean_var(shape, dim):
    x = data(shape)
    d = x.to(DEV)
    if dim is None:
        close(d.sum(), x.sum(), rtol=1e-4)
        close(d.mean(), x.mean(), rtol=1e-4)
        close(d.var(), x.var(), rtol=1e-4)
    else:
        close(d.sum(dim), x.sum(dim), rtol=1e-4, atol=1e-4)
        close(d.mean(dim, keepdim=True), x.mean(dim, keepdim=True), rtol=1e-4, atol=1e-5)
        close(d.var(dim), x.var(dim), rtol=1e-4, atol=1e-4)
        close(d.amax(dim), x.amax(dim))
        close(d.argmax(dim), x.argmax(dim))


@pytest.mark.parametrize("shape", SHAPES_2D)
def test_softmax_logsoftmax_backward(shape):
    x = data(shape, 1)
    xd = x.to(DEV).requires_grad_()
    xc = x.clone().requires_grad_()
    g = data(shape, 2)
    y, yc = xd.softmax(-1), xc.softmax(-1)
    close(y, yc.detach(), atol=1e-6)
    y.backward(g.to(DEV))
    yc.backward(g)
    close(xd.grad, xc.grad, atol=1e-5)
    close(x.to(DEV).log_softmax(0), x.log_softmax(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(7, 1025), (2, 4097), (1000, 65)])
def test_layer_norm_forward_backward(shape):
    n = shape[-1]
    x, w, b, g = data(shape, 3), data((n,), 4), data((n,), 5), data(shape, 6)
    ts = [t.clone().requires_grad_() for t in (x, w, b)]
    td = [t.to(DEV).requires_grad_() for t in (x, w, b)]
    yc = F.layer_norm(ts[0], (n,), ts[1], ts[2])
    yd = F.layer_norm(td[0], (n,), td[1], td[2])
    close(yd, yc.detach(), rtol=1e-4, atol=1e-4)
    yc.backward(g)
    yd.backward(g.to(DEV))
    for a, c in zip(td, ts):
        close(a.grad, c.grad, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("n", [257, 4097, 70001])
def test_cumsum_nonzero_masked(n):
    x = data((3, n), 7)
    close(x.to(DEV).cumsum(1), x.cumsum(1), rtol=1e-4, atol=1e-3)
    m = x > 0.3
    close(torch.nonzero(m.to(DEV)), torch.nonzero(m))
    close(x.to(DEV)[m.to(DEV)], x[m])
    close(torch.count_nonzero(m.to(DEV)), torch.count_nonzero(m))


@pytest.mark.parametrize("shape", [(4097, 3), (300, 129)])
def test_index_and_embedding_backward(shape):
    w = data(shape, 8)
    idx = torch.randint(0, shape[0], (5000,), generator=torch.Generator().manual_seed(9))
    close(w.to(DEV).index_select(0, idx.to(DEV)), w.index_select(0, idx))
    wc = w.clone().requires_grad_()
    wd = w.to(DEV).requires_grad_()
    g = data((5000, shape[1]), 10)
    F.embedding(idx, wc).backward(g)
    F.embedding(idx.to(DEV), wd).backward(g.to(DEV))
    close(wd.grad, wc.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,classes", [(1025, 7), (33, 5000)])
def test_cross_entropy_forward_backward(rows, classes):
    x = data((rows, classes), 11)
    t = torch.randint(0, classes, (rows,), generator=torch.Generator().manual_seed(12))
    xc = x.clone().requires_grad_()
    xd = x.to(DEV).requires_grad_()
    lc = F.cross_entropy(xc, t)
    ld = F.cross_entropy(xd, t.to(DEV))
    close(ld, lc.detach(), rtol=1e-5, atol=1e-5)
    lc.backward()
    ld.backward()
    close(xd.grad, xc.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matmul_and_pointwise_many_blocks(dtype):
    a, b = data((130, 257), 13, dtype), data((257, 65), 14, dtype)
    tol = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2)}[dtype]
    want = (a.float() @ b.float()).to(dtype)
    close((a.to(DEV) @ b.to(DEV)), want, *tol)
    x = data((70001,), 15, dtype)
    close(F.gelu(x.to(DEV)), F.gelu(x), *tol)
    close((x.to(DEV) * 3 + 1).exp_().sqrt_(), (x * 3 + 1).exp_().sqrt_(), *tol)


def test_conv_pool_batchnorm_larger():
    x, w = data((2, 3, 33, 35), 16), data((8, 3, 3, 3), 17)
    close(F.conv2d(x.to(DEV), w.to(DEV), padding=1), F.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)
    close(F.max_pool2d(x.to(DEV), 3, 2), F.max_pool2d(x, 3, 2))
    close(F.avg_pool2d(x.to(DEV), 2), F.avg_pool2d(x, 2))
    y = data((4, 300, 17), 18)
    close(F.batch_norm(y.to(DEV), None, None, training=True), F.batch_norm(y, None, None, training=True),
          rtol=1e-4, atol=1e-4)
