"""Convolution and batch norm on cuDNN (issue 26 item 2): replayer/cuda/conv.cu's
and batchnorm.cu's cuDNN paths on cudaemu's cuDNN reference
(tests/cudaemu/cudnn_emu.cpp, libcudnn.so.9, found by the backend's own
loader). Run by tests/cudaemu/run-tests.sh on the cuda backend, random thread
order.

Each case (1-d, 2-d, 3-d, groups, depthwise, stride, dilation, transposed,
channels_last tensors and NHWC filters, a weight and an input cuDNN cannot
take as they are, float32/float64/float16/bfloat16) runs forward with bias
and backward, and is compared with:
  * PyTorch CPU (float32 to 1e-5: a float32 convolution on TF32 fails it);
  * the im2col path (RGPU_CUDNN=0), which makes no cuDNN call;
  * itself, run again in the same session: bitwise.
Batch norm (training and eval; 2-d, 4-d, 5-d; float32, float64, float16
and bfloat16 with float32 parameters, channels_last) likewise, its running
statistics too; float16 parameters stay on rgpu's kernels, as with ATen.
The cuDNN calls are counted (CUDAEMU_STATS): one per convolution core and per
batch norm, so nothing fell back; the server says where they run, once. A
cuDNN that refuses the calls (NOT_SUPPORTED) leaves rgpu's own kernels to run
them, with the same values as RGPU_CUDNN=0.
A ResNet-style CNN trains 3 steps with cuDNN to the losses of PyTorch CPU.
cudnn_emu faults when a nondeterministic algorithm (the first of cuDNN's
backward heuristics) runs, and rounds float32 to TF32 unless FMA math is
set, so choosing either fails here."""
import os
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import rgpu  # noqa: F401  (registers the device)
from emu_child import run_counted

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_BACKEND") != "cuda",
                                reason="cuDNN is the cuda backend's (run-tests.sh)")

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = textwrap.dedent("""
    import torch, torch.nn.functional as F
    f32, f64, f16, bf16 = torch.float32, torch.float64, torch.float16, torch.bfloat16

    def cases():
        # name, transposed, dtype, x shape, w shape, kwargs, layout ("", "cl": channels_last x and w,
        # "wt": a weight view cuDNN cannot take, "xb": a broadcast input)
        yield "2d_pad", False, f32, (2, 4, 9, 9), (6, 4, 3, 3), dict(padding=1), ""
        yield "2d_groups_stride_dil", False, f32, (2, 4, 9, 9), (6, 2, 3, 3), dict(stride=2, groups=2, dilation=2), ""
        yield "depthwise", False, f32, (2, 4, 8, 8), (4, 1, 3, 3), dict(padding=1, groups=4), ""
        yield "1d", False, f32, (2, 4, 11), (6, 4, 3), dict(padding=2), ""
        yield "3d", False, f32, (1, 2, 5, 6, 7), (3, 2, 2, 3, 2), dict(stride=(1, 2, 1), padding=1), ""
        yield "1x1", False, f32, (2, 8, 5, 5), (4, 8, 1, 1), {}, ""
        yield "transposed", True, f32, (2, 4, 5, 5), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=2), ""
        yield "channels_last", False, f32, (2, 4, 7, 7), (6, 4, 3, 3), dict(padding=1), "cl"
        yield "weight_view", False, f32, (2, 4, 7, 7), (6, 4, 3, 3), dict(padding=1), "wt"
        yield "broadcast_input", False, f32, (2, 4, 7, 7), (6, 4, 3, 3), dict(padding=1), "xb"
        yield "f64", False, f64, (2, 3, 6, 6), (5, 3, 3, 3), dict(padding=1, stride=2), ""
        yield "f16", False, f16, (2, 4, 6, 6), (6, 4, 3, 3), dict(padding=1), ""
        yield "bf16", False, bf16, (2, 4, 6, 6), (6, 4, 3, 3), dict(padding=1), "cl"

    FN = {(False, 3): F.conv1d, (False, 4): F.conv2d, (False, 5): F.conv3d,
          (True, 3): F.conv_transpose1d, (True, 4): F.conv_transpose2d, (True, 5): F.conv_transpose3d}

    def inputs(tr, dt, xs, ws, layout):
        g = torch.Generator().manual_seed(7)
        x = torch.randn(xs, generator=g).to(dt)
        w = torch.randn(ws, generator=g).to(dt)
        nb = ws[1] * 2 if tr else ws[0]   # transposed: out channels = w.shape[1] * groups (2 where used)
        b = torch.randn(nb if tr else ws[0], generator=g).to(dt)
        return x, w, b

    def run(dev, name, tr, dt, xs, ws, kw, layout):
        x, w, b = inputs(tr, dt, xs, ws, layout)
        if tr:
            b = b[:ws[1] * kw.get("groups", 1)]
        x, w, b = x.to(dev), w.to(dev), b.to(dev)
        if layout == "cl":
            x, w = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        if layout == "wt":
            w = w.transpose(2, 3).contiguous().transpose(2, 3)
        if layout == "xb":
            x = x[:1].expand(xs)
        x, w, b = x.requires_grad_(), w.requires_grad_(), b.requires_grad_()
        y = FN[(tr, len(xs))](x, w, b, **kw)
        gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(dt).to(dev)
        y.backward(gy)
        return [t.detach().cpu() for t in (y, x.grad, w.grad, b.grad)]
""")

BN_CASES = textwrap.dedent("""
    import torch, torch.nn.functional as F
    f32, f64, f16, bf16 = torch.float32, torch.float64, torch.float16, torch.bfloat16

    def bn_cases():
        # name, training, x dtype, parameter dtype, x shape, channels_last
        yield "bn_train_4d", True, f32, f32, (4, 6, 5, 5), False
        yield "bn_eval_4d", False, f32, f32, (4, 6, 5, 5), False
        yield "bn_train_2d", True, f32, f32, (8, 6), False
        yield "bn_train_5d", True, f32, f32, (2, 6, 3, 4, 5), False
        yield "bn_train_f64", True, f64, f64, (4, 6, 7), False
        yield "bn_train_f16", True, f16, f32, (4, 6, 5, 5), False
        yield "bn_eval_bf16_cl", False, bf16, f32, (4, 6, 5, 5), True
        yield "bn_train_bf16_cl", True, bf16, f32, (4, 6, 5, 5), True
        yield "bn_train_f16_params", True, f16, f16, (4, 6, 5, 5), False   # rgpu's kernels, as ATen's native

    def bn_run(dev, name, training, dt, pdt, xs, cl):
        g = torch.Generator().manual_seed(11)
        x = (torch.randn(xs, generator=g) * 2 + 1).to(dt)
        w, b, rm = (torch.randn(xs[1], generator=g).to(pdt) for _ in range(3))
        rv = (torch.rand(xs[1], generator=g) + 0.5).to(pdt)
        gy = torch.randn(xs, generator=g).to(dt)
        x, w, b, rm, rv, gy = (t.to(dev) for t in (x, w, b, rm, rv, gy))
        if cl:
            x, gy = x.contiguous(memory_format=torch.channels_last), gy.contiguous(memory_format=torch.channels_last)
        x, w, b = x.requires_grad_(), w.requires_grad_(), b.requires_grad_()
        y = F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.2, eps=1e-4)
        y.backward(gy)
        return [t.detach().cpu() for t in (y, rm, rv, x.grad, w.grad, b.grad)]
""")

CHILD = CASES + BN_CASES + textwrap.dedent("""
    import sys, rgpu
    out = sys.argv[1]
    passes = []
    for _ in range(2):   # the second pass in the same session is the rerun
        res = {c[0]: run("rgpu", *c) for c in cases()}
        res.update({c[0]: bn_run("rgpu", *c) for c in bn_cases()})
        passes.append(res)
    torch.save(passes, out)
""")

CNN = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, sys.argv[2])
    import rgpu
    from models.cnn import ResNetSmall

    def train(dev):
        torch.manual_seed(0)
        model = ResNetSmall(width=8).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(0)
        losses = []
        for i in range(3):
            x, y = torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)
            loss = torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        return losses

    torch.save({"rgpu": train("rgpu"), "cpu": train("cpu")}, sys.argv[1])
""")

ns = {}
exec(CASES + BN_CASES, ns)
CASE_LIST = list(ns["cases"]())
BN_LIST = list(ns["bn_cases"]())
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-10, rtol=1e-10),
       torch.float16: dict(atol=2e-2, rtol=1e-2), torch.bfloat16: dict(atol=1.5e-1, rtol=5e-2)}
KINDS = ("cudnn forward", "cudnn backward data", "cudnn backward filter", "cudnn batch norm training",
         "cudnn batch norm inference", "cudnn batch norm backward")


def child(tmp_path, tag, cudnn):
    log = tmp_path / f"server-{tag}.log"
    stats, res = run_counted(tmp_path, tag, CHILD, env={"RGPU_CUDNN": cudnn, "RGPU_SERVER_LOG": str(log)})
    assert len(stats) == 1, stats
    return {k: stats[0]["host_ops"].get(k, 0) for k in KINDS}, res, log.read_text()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    t = tmp_path_factory.mktemp("cudnn")
    (calls, (a, b), log), (calls_off, (off, _), log_off) = child(t, "on", "1"), child(t, "off", "0")
    return (calls, a, log), (calls, b, log), (calls_off, off, log_off)


def test_each_core_one_cudnn_call(runs):
    (calls, _, log), _, (calls_off, _, log_off) = runs
    # every convolution: forward, dx and dw, one call each (a transposed one swaps forward and data);
    # every batch norm with float32/float64 parameters: one forward, and one backward in training; two passes
    n = 2 * len(CASE_LIST)
    bn = [c for c in BN_LIST if c[3] != torch.float16]
    train = 2 * sum(1 for c in bn if c[1])
    assert calls == {KINDS[0]: n, KINDS[1]: n, KINDS[2]: n, KINDS[3]: train, KINDS[4]: 2 * len(bn) - train,
                     KINDS[5]: train}, calls
    assert calls_off == {k: 0 for k in KINDS}, calls_off
    assert log.count("rgpu cuda: convolution and batch norm on cuDNN 9.1.0 from ") == 1, log
    assert log_off.count("RGPU_CUDNN=0: convolution on im2col + cuBLAS, batch norm on rgpu's kernels") == 1, log_off


@pytest.mark.parametrize("case", CASE_LIST, ids=[c[0] for c in CASE_LIST])
def test_equal_to_cpu_and_im2col(runs, case):
    (_, res, _), (_, again, _), (_, off, _) = runs
    name, dt = case[0], case[2]
    want = ns["run"]("cpu", *case)
    for i, what in enumerate(("y", "dx", "dw", "db")):
        got = res[name][i]
        assert got.dtype == dt and got.shape == want[i].shape, (what, got.dtype, got.shape)
        torch.testing.assert_close(got.float(), want[i].float(), **TOL[dt], msg=f"{name} {what} vs CPU")
        torch.testing.assert_close(got.float(), off[name][i].float(), **TOL[dt], msg=f"{name} {what} vs im2col")
        assert torch.equal(got, again[name][i]), f"{name} {what}: a rerun differs"


@pytest.mark.parametrize("case", BN_LIST, ids=[c[0] for c in BN_LIST])
def test_batch_norm_equal_to_cpu_and_kernels(runs, case):
    (_, res, _), (_, again, _), (_, off, _) = runs
    name, dt = case[0], case[2]
    want = ns["bn_run"]("cpu", *case)
    for i, what in enumerate(("y", "running_mean", "running_var", "dx", "dw", "db")):
        got = res[name][i]
        tol = TOL[got.dtype]
        if dt in (torch.float16, torch.bfloat16) and i >= 4:   # sums over low-precision gradients
            tol = dict(atol=0.5, rtol=2e-2)
        assert got.dtype == want[i].dtype and got.shape == want[i].shape, (what, got.dtype, got.shape)
        torch.testing.assert_close(got.float(), want[i].float(), **tol, msg=f"{name} {what} vs CPU")
        torch.testing.assert_close(got.float(), off[name][i].float(), **tol, msg=f"{name} {what} vs the kernels")
        assert torch.equal(got, again[name][i]), f"{name} {what}: a rerun differs"


def test_refused_calls_run_rgpus_kernels(tmp_path):
    """cuDNN answering NOT_SUPPORTED (CUDAEMU_CUDNN_REFUSE): each convolution
    shape is said once and runs on im2col from then on, batch norm on the
    kernels; the values are those of RGPU_CUDNN=0's run, bitwise."""
    log = tmp_path / "server.log"
    stats, res = run_counted(tmp_path, "refuse", CHILD, env={"CUDAEMU_CUDNN_REFUSE": "conv,bn",
                                                             "RGPU_SERVER_LOG": str(log)})
    _, off = run_counted(tmp_path, "off", CHILD, env={"RGPU_CUDNN": "0"})
    text = log.read_text()
    assert sum(stats[0]["host_ops"].get(k, 0) for k in KINDS) == 0, stats[0]["host_ops"]
    # at most one line per convolution core of the first pass: the second pass asks cuDNN
    # nothing (each refused shape is kept on im2col)
    refusals = [ln for ln in text.splitlines() if "im2col for this shape" in ln]
    assert len(CASE_LIST) <= len(refusals) <= 3 * len(CASE_LIST), refusals
    assert "rgpu's kernels run" in text, text
    for name in res[0]:
        for a, b in zip(res[0][name], off[0][name]):
            assert torch.equal(a, b), name


def test_resnet_trains_on_cudnn(tmp_path):
    stats, res = run_counted(tmp_path, "cnn", CNN, args=(os.path.join(HERE, "..", "..", "tools"),))
    calls = {k: stats[0]["host_ops"].get(k, 0) for k in KINDS}
    # 6 convolutions and 6 batch norms a step; the stem's input needs no gradient
    assert calls == {"cudnn forward": 18, "cudnn backward data": 15, "cudnn backward filter": 18,
                     "cudnn batch norm training": 18, "cudnn batch norm inference": 0,
                     "cudnn batch norm backward": 18}, calls
    torch.testing.assert_close(torch.tensor(res["rgpu"]), torch.tensor(res["cpu"]), atol=1e-5, rtol=1e-5)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
