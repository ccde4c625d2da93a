"""index_put and bernoulli(p tensor) on the cuda backend without a host wait
(issue 27 items 1 and 2). index_put: the
destinations grouped on the device (replayer/cuda/index.cu index_put_dev: a
stable merge sort of the destination offsets, runs, k_group_starts) rather than
downloaded and grouped on the host. Run by tests/cudaemu/run-tests.sh on the
cuda backend (cudaemu), in the random thread order.

The same cases run with RGPU_CUDA_PUT_DEV=0 (the host grouping, the reference):
  * results bitwise equal (the same groups, added in the same order), and equal
    to PyTorch CPU (bitwise where the CPU adds in the same order: one index
    tensor's accumulate, the last write winning);
  * cudaemu's host waits are the reads alone (the host grouping adds two per
    index_put);
  * an index out of bounds is reported at the next wait with PyTorch's
    message, and the session goes on.
bernoulli with a probability tensor checks p on the device (the session's
device error word): no wait, a bad p reported at the next wait with the cpu
backend's message."""
import os
import textwrap

import pytest
import torch

import rgpu  # noqa: F401  (registers the device)
from emu_child import run_counted

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_BACKEND") != "cuda",
                                reason="the device grouping is the cuda backend's (run-tests.sh)")

CHILD = textwrap.dedent("""
    import sys, torch, rgpu
    out = sys.argv[1]
    g = torch.Generator().manual_seed(0)
    put = torch.ops.aten.index_put_.default

    def cases():
        idx = torch.tensor([1, 3, 1, 9, -1, 3, 3])
        big = torch.randint(0, 100, (5000,), generator=g)
        yield "acc_rows", torch.zeros(10, 4), [idx], torch.randn(7, 4, generator=g), True
        yield "assign_last_wins", torch.zeros(10, 4), [idx], torch.randn(7, 4, generator=g), False
        yield "acc_bf16", torch.randn(10, 4, generator=g).bfloat16(), [idx], torch.randn(7, 4, generator=g).bfloat16(), True
        yield "acc_int64", torch.zeros(10, 2, dtype=torch.int64), [idx], torch.randint(-5, 5, (7, 2), generator=g), True
        yield "assign_bool", torch.zeros(10, dtype=torch.bool), [idx], torch.tensor([True, False, True, True, False, True, False]), False
        yield "acc_two_indices", torch.randn(6, 5, 3, generator=g), [torch.tensor([0, 5, 0, 2, 0]), torch.tensor([1, 1, 1, -2, 1])], \\
            torch.randn(5, 3, generator=g), True
        yield "acc_middle_dim", torch.zeros(3, 10, 2), [None, idx], torch.randn(3, 7, 2, generator=g), True
        yield "acc_broadcast_values", torch.zeros(10, 4), [idx], torch.randn(4, generator=g), True
        yield "acc_many", torch.zeros(100, 8), [big], torch.randn(5000, 8, generator=g), True
        yield "assign_many", torch.zeros(100, 8), [big], torch.randn(5000, 8, generator=g), False
        yield "acc_2d_index", torch.zeros(10, 3), [idx[:6].view(2, 3)], torch.randn(2, 3, 3, generator=g), True

    res, n_put = {}, 0
    dev = []
    for name, x, ix, v, acc in cases():
        d = x.to("rgpu")
        put(d, [None if i is None else i.to("rgpu") for i in ix], v.to("rgpu"), acc)
        n_put += 1
        dev.append((name, d, put(x.clone(), ix, v, acc)))
    # the gradient of advanced indexing (index_put accumulate in its backward)
    a = torch.randn(8, 3, generator=g)
    w = torch.randn(6, 3, generator=g)
    i = torch.tensor([0, 7, 0, 2, 2, 0])
    ad = a.to("rgpu").requires_grad_()
    (ad[i.to("rgpu")] * w.to("rgpu")).sum().backward()
    ac = a.clone().requires_grad_()
    (ac[i] * w).sum().backward()
    dev.append(("grad_of_indexing", ad.grad, ac.grad))
    # bernoulli with a probability tensor: its p check on the device too
    torch.manual_seed(0)
    dev.append(("bernoulli_p_tensor", torch.bernoulli(torch.tensor([0.0, 1.0, 0.5]).expand(64, 3).to("rgpu")), None))
    torch.rgpu.synchronize()
    for name, d, c in dev:           # every index_put above ran before the first read
        res[name] = (d.cpu(), c)
    # a bernoulli p outside [0, 1], an index out of bounds: reported at the next wait, the session goes on
    y = torch.bernoulli(torch.tensor([0.2, 1.5, -0.1], device="rgpu"))
    try:
        y.cpu()
        perr = "no error"
    except Exception as e:
        perr = f"{type(e).__name__}: {e}"
    x = torch.zeros(5, 2, device="rgpu")
    put(x, [torch.tensor([0, 7], device="rgpu")], torch.ones(2, 2, device="rgpu"), True)
    try:
        x.cpu()
        err = "no error"
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    after = (torch.ones(3, device="rgpu") * 2).cpu()
    torch.save({"res": res, "n_put": n_put, "err": err, "perr": perr, "after": after}, out)
""")


def run_child(tmp_path, dev):
    stats, res = run_counted(tmp_path, dev, CHILD, env={"RGPU_CUDA_PUT_DEV": dev})
    assert len(stats) == 1, stats
    return sum(stats[0]["host_waits"].values()), res


def test_index_put_groups_on_the_device(tmp_path):
    wd, rd = run_child(tmp_path, "1")
    wh, rh = run_child(tmp_path, "0")
    n_put = rd["n_put"] + 2          # and the indexing gradient's and the out-of-bounds one
    # on the device: the reads alone (each result, the synchronize, the two failing reads, the read after);
    # on the host: two more per index_put (its offsets down, its pageable groups up)
    assert wd == len(rd["res"]) + 4, (wd, len(rd["res"]))
    assert wh - wd == 2 * n_put, (wh, wd, n_put)
    assert rd["res"].keys() == rh["res"].keys()
    for key, (a, cpu) in rd["res"].items():
        b, _ = rh["res"][key]
        if key == "bernoulli_p_tensor":
            assert torch.equal(a, b) and a[:, 0].eq(0).all() and a[:, 1].eq(1).all(), a
            assert 0.25 < a[:, 2].mean() < 0.75 and a[:, 2].eq(a[:, 2].round()).all(), a[:, 2]
            continue
        assert a.dtype == b.dtype == cpu.dtype and a.shape == b.shape == cpu.shape, key
        assert torch.equal(a, b), key                       # the host grouping's bits
        if key in ("acc_rows", "assign_last_wins", "acc_int64", "assign_bool", "acc_middle_dim",
                   "acc_broadcast_values", "acc_2d_index"):
            assert torch.equal(a, cpu), key                 # one index tensor: PyTorch CPU's order too
        elif key != "assign_many":   # (PyTorch leaves which duplicate wins undefined; its parallel loop picks any)
            torch.testing.assert_close(a, cpu, msg=lambda m, key=key: f"{key}: {m}")
    for r in (rd, rh):
        assert "index 7 is out of bounds for dimension 0 with size 5" in r["err"], r["err"]
        assert "bernoulli: expected p_in >= 0 && p_in <= 1, got 1.5" in r["perr"], r["perr"]
        assert torch.equal(r["after"], torch.full((3,), 2.0))
