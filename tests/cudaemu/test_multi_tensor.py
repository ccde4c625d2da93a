"""Multi-tensor pointwise launches of the cuda backend (replayer/cuda/pointwise.cu,
common.cuh): consecutive pointwise records over disjoint memory run as one
kernel launch. Run by tests/cudaemu/run-tests.sh on the cuda backend
(cudaemu), in the reverse thread order too, where a launch that wrongly
merges dependent records computes the later record first.

  * a foreach AdamW (amsgrad) step over 30 parameters: at most 12 kernel
    launches (cudaemu's CUDAEMU_STATS counts them), one per record without
    batching (RGPU_CUDA_BATCH=0), parameters bitwise equal either way and equal
    to PyTorch CPU within float32 rounding;
  * records that depend on each other (read after write, write after read,
    the same tensor twice in a foreach list, overlapping views, memory freed
    and reused) give PyTorch CPU's values;
  * casts among float32/float16/bfloat16 are held too, with the cast kernel's
    bits;
  * cat/stack of many inputs is one launch."""
import os
import textwrap

import pytest
import torch

import rgpu  # noqa: F401  (registers the device)
from emu_child import run_counted

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_BACKEND") != "cuda",
                                reason="the multi-tensor launches are the cuda backend's (run-tests.sh)")

CHILD = textwrap.dedent("""
    import sys, torch, rgpu
    out, steps, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    g = torch.Generator().manual_seed(0)
    shapes = [(40, 30), (50,), (20, 20), (7,), (300,)] * 6
    ps = [torch.randn(s, generator=g) for s in shapes]
    gs = [torch.randn(s, generator=g) for s in shapes]

    def run(dev):
        q = [p.clone().to(dev).requires_grad_() for p in ps]
        grads = [x.to(dev) for x in gs]
        opt = torch.optim.AdamW(q, lr=1e-2, weight_decay=0.1, amsgrad=True, **{kind: True})
        for k in range(steps):
            for p, x in zip(q, grads):
                p.grad = x
            opt.step()
        return [p.detach().cpu() for p in q]
    torch.save({"rgpu": run("rgpu"), "cpu": run("cpu")}, out)
""")


def run_child(tmp_path, steps, batch, kind="foreach"):
    stats, res = run_counted(tmp_path, f"{steps}-{batch}-{kind}", CHILD, (steps, kind), {"RGPU_CUDA_BATCH": batch})
    return sum(d["kernel_launches"] for d in stats), res


def test_foreach_adamw_step_is_a_few_launches_with_the_same_bits(tmp_path):
    l1, _ = run_child(tmp_path, 1, "1")        # the first step also makes the state (zeros)
    l4, r4 = run_child(tmp_path, 4, "1")
    n1, _ = run_child(tmp_path, 1, "0")
    n4, s4 = run_child(tmp_path, 4, "0")
    per_step, per_step_single = (l4 - l1) / 3, (n4 - n1) / 3
    assert per_step_single == 9 * 30, per_step_single      # 9 foreach ops x 30 tensors, one launch each
    assert per_step <= 12, per_step
    for a, b, c in zip(r4["rgpu"], s4["rgpu"], r4["cpu"]):
        assert torch.equal(a, b)                            # bitwise: the same code per element
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_fused_adamw_step_is_a_few_launches_with_the_same_bits(tmp_path):
    """fused=True (rgpu/fused_optim.py: the update's records interleaved across
    the tensors): one launch per op of the update, not per op and tensor."""
    l1, _ = run_child(tmp_path, 1, "1", "fused")
    l4, r4 = run_child(tmp_path, 4, "1", "fused")
    n1, _ = run_child(tmp_path, 1, "0", "fused")
    n4, s4 = run_child(tmp_path, 4, "0", "fused")
    per_step, per_step_single = (l4 - l1) / 3, (n4 - n1) / 3
    assert per_step_single >= 12 * 30, per_step_single    # about 15 per tensor, one launch per record
    assert per_step <= 30, (per_step, per_step_single)     # 22: constant in the number of tensors
    for a, b, c in zip(r4["rgpu"], s4["rgpu"], r4["cpu"]):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def check(f, *shapes, seed=0):
    """f run on rgpu copies and on CPU copies of fresh tensors; each tensor of
    both afterwards compared (f mutates some)."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(s, generator=g) for s in shapes]
    dev = [x.to("rgpu") for x in xs]
    cpu = [x.clone() for x in xs]
    rd, rc = f(*dev), f(*cpu)
    for a, b in zip(dev + list(rd), cpu + list(rc)):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_read_after_write():
    check(lambda x: (x + 1, (x + 1) * 2, ((x + 1) * 2).abs().sqrt()), (1000,))

    def chain(x):
        a = x * 3
        b = a * 3            # reads what the previous mul writes
        c = b * 3
        return a, b, c
    check(chain, (777,))


def test_write_after_read():
    def f(x, y):
        z = x * 2            # reads x
        x.add_(1)            # then writes x
        w = y.sqrt()         # an independent record between
        y.mul_(0.5)          # writes what sqrt read
        return z, w
    check(lambda x, y: f(x, y.abs()), (513,), (300,))


def test_foreach_with_a_tensor_twice_and_overlapping_views():
    def f(t, base):
        torch._foreach_add_([t, t, t], 1.0)                         # t + 3
        torch._foreach_mul_([base[0:600], base[300:900], base[450:1000]], 2.0)
        torch._foreach_addcmul_([base[:100], base[50:150]], [t[:100], t[:100]], [t[100:200], t[100:200]], value=0.5)
        return ()
    check(f, (1000,), (1000,))


def test_freed_memory_reused_by_a_later_record():
    def f(x):
        outs = []
        for i in range(20):
            t = x * (i + 1)          # a temporary ...
            u = t + 1
            del t                    # ... freed, its block soon reused
            outs.append(u * 2)
        return outs
    check(f, (4096,))


def test_foreach_lists_of_mixed_dtypes_and_shapes():
    def f(a, b, c):
        lst = [a, b.to(torch.float64), c.t()]                       # float64 and a transposed view too
        torch._foreach_mul_(lst, 1.5)
        torch._foreach_add_(lst, 2.0)
        torch._foreach_lerp_(lst, [x * 0 + 1 for x in lst], 0.25)
        return [x.float() for x in lst]
    check(f, (64, 64), (64, 64), (64, 64))


def test_cat_and_stack_of_many_inputs_in_one_launch():
    """cat/stack of >= 4 inputs of out's dtype: one launch over every part
    (index_data.cu cat_many); views, other dims, 0-dim and empty parts."""
    def f(a, b, c):
        parts = [a[i] for i in range(a.shape[0])]                       # 0-dim rows -> stack
        return (torch.stack([p.sum() for p in parts]),
                torch.stack(parts),
                torch.cat([a, b.t(), c[:, ::2], a[:, :0], b[1:3].t()], dim=1),
                torch.cat([x.reshape(-1) for x in (a, b, c, a)]),
                torch.cat([a.double(), b.t(), c.half(), a], dim=1).float())  # casts: part by part
    check(f, (12, 5), (5, 12), (12, 10))


CAST_CHILD = textwrap.dedent("""
    import sys, torch, rgpu
    out = sys.argv[1]
    g = torch.Generator().manual_seed(0)
    edge = torch.tensor([0.0, -0.0, 1.0, -1.5, 65504.0, 65520.0, 1e-40, -1e-45, 3.0e38, float("inf"),
                         float("-inf"), float("nan"), 1.00390625, 1.01171875, 2.0 ** -24, 2.0 ** -25])
    xs = [torch.cat([edge, torch.randn(257, generator=g) * 10 ** k]) for k in range(-3, 5)]
    dev = [x.to("rgpu") for x in xs]
    pairs = [(torch.float32, torch.bfloat16), (torch.float32, torch.float16), (torch.bfloat16, torch.float32),
             (torch.float16, torch.bfloat16), (torch.bfloat16, torch.float16), (torch.float16, torch.float32)]
    torch.rgpu.synchronize()
    res = []
    for s, d in pairs:                    # the sources first (their casts held too), then the targets
        srcs = [x.to(s) for x in dev]
        res.append([t.to(d) for t in srcs] + [t[::2].to(d) for t in srcs])   # strided too
    torch.save([[t.cpu() for t in r] for r in res], out)
""")


def run_casts(tmp_path, batch):
    stats, res = run_counted(tmp_path, f"cast-{batch}", CAST_CHILD, env={"RGPU_CUDA_BATCH": batch})
    return sum(d["kernel_launches"] for d in stats), res


def test_casts_among_float32_float16_bfloat16_are_held_with_the_same_bits(tmp_path):
    """Casts among float32/float16/bfloat16 (AMP's, before each matmul) are held
    like pointwise records: far fewer launches, the cast kernel's very bits (NaN,
    inf, overflow to inf, subnormals, ties), and PyTorch CPU's values."""
    held, a = run_casts(tmp_path, "1")
    single, b = run_casts(tmp_path, "0")
    assert single == 128, single                 # one launch per cast (f32 -> f32 is no cast)
    assert held <= single // 4, (held, single)
    g = torch.Generator().manual_seed(0)
    edge = torch.tensor([0.0, -0.0, 1.0, -1.5, 65504.0, 65520.0, 1e-40, -1e-45, 3.0e38, float("inf"),
                         float("-inf"), float("nan"), 1.00390625, 1.01171875, 2.0 ** -24, 2.0 ** -25])
    xs = [torch.cat([edge, torch.randn(257, generator=g) * 10 ** k]) for k in range(-3, 5)]
    pairs = [(torch.float32, torch.bfloat16), (torch.float32, torch.float16), (torch.bfloat16, torch.float32),
             (torch.float16, torch.bfloat16), (torch.bfloat16, torch.float16), (torch.float16, torch.float32)]
    for (s, d), ra, rb in zip(pairs, a, b):
        want = [x.to(s).to(d) for x in xs] + [x.to(s)[::2].to(d) for x in xs]
        for x, y, w in zip(ra, rb, want):
            bits = torch.int32 if d == torch.float32 else torch.int16
            assert torch.equal(x.view(bits), y.view(bits)), (s, d)          # bitwise: held or not
            assert torch.equal(x.isnan(), w.isnan()), (s, d)
            assert torch.equal(x[~w.isnan()], w[~w.isnan()]), (s, d)       # PyTorch CPU's values
