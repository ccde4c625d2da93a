"""torch.rgpu memory statistics report the server's bytes for this session
(MEMORY_STATS: one wait per query)."""
import gc
import os
import sys
import warnings

import pytest
import torch

import rgpu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from models.data import get_batch, train_val  # noqa: E402
from models.gpt import GPT, GPTConfig  # noqa: E402

DEV = "rgpu"
MIB = 1 << 20


def waits():
    return rgpu.stats()["waits"]


def settle():
    gc.collect()
    torch.rgpu.synchronize()


def test_each_query_is_one_wait():
    torch.rgpu.synchronize()
    for fn in (torch.rgpu.memory_allocated, torch.rgpu.max_memory_allocated,
               torch.rgpu.memory_stats, torch.rgpu.reset_peak_memory_stats):
        w = waits()
        fn()
        assert waits() - w == 1, fn


def test_allocation_and_free_are_exact():
    settle()
    base = torch.rgpu.memory_allocated()
    x = torch.empty(MIB // 4, dtype=torch.float32, device=DEV)     # 1 MiB
    assert torch.rgpu.memory_allocated() == base + MIB
    v = x.view(512, 512)[:, :10]                                   # views allocate nothing
    assert torch.rgpu.memory_allocated() == base + MIB
    assert torch.rgpu.max_memory_allocated() >= base + MIB
    del x
    settle()
    assert torch.rgpu.memory_allocated() == base + MIB             # the view keeps the storage
    del v
    settle()
    assert torch.rgpu.memory_allocated() == base


def test_frees_reach_the_server_without_synchronize():
    settle()
    base = torch.rgpu.memory_allocated()
    x = torch.ones(1000, 1000, device=DEV)
    del x
    gc.collect()
    assert torch.rgpu.memory_allocated() == base                   # the pending FREE goes first


def test_peak_and_reset():
    settle()
    torch.rgpu.reset_peak_memory_stats()
    base = torch.rgpu.memory_allocated()
    assert torch.rgpu.max_memory_allocated() == base
    a = torch.empty(2 * MIB, dtype=torch.uint8, device=DEV)
    b = torch.empty(3 * MIB, dtype=torch.uint8, device=DEV)
    del a, b
    settle()
    assert torch.rgpu.memory_allocated() == base
    assert torch.rgpu.max_memory_allocated() >= base + 5 * MIB
    s = torch.rgpu.memory_stats()
    assert s["allocated_bytes.all.current"] == base
    assert s["allocated_bytes.all.peak"] >= base + 5 * MIB
    torch.rgpu.reset_peak_memory_stats()
    assert torch.rgpu.max_memory_allocated() == base
    assert torch.rgpu.memory_stats()["allocated_bytes.all.peak"] == base


def test_temporaries_in_a_loop_do_not_grow_server_memory():
    x = torch.ones(256, 256, device=DEV)                           # 256 KiB
    settle()
    base = torch.rgpu.memory_allocated()
    torch.rgpu.reset_peak_memory_stats()
    for _ in range(2000):
        y = x * 2
    del y
    settle()
    assert torch.rgpu.memory_allocated() == base
    # frees are batched, so a few temporaries may be alive at once, not 2000
    assert torch.rgpu.max_memory_allocated() < base + 300 * x.nbytes


# --- frees in stream order: the peak is the live set ---------------------------------

def test_chained_matmuls_peak_at_the_live_set():
    """x = x @ w, 100 times: the old x's FREE goes before the next matmul's
    allocation, so at most w, the old x and the new x are alive (PyTorch's own
    peak); frees held to the end of a chunk made it ~26x that."""
    n = 256
    x = torch.randn(n, n, device=DEV)
    w = torch.randn(n, n, device=DEV) / n ** 0.5
    settle()
    base = torch.rgpu.memory_allocated()            # x and w
    torch.rgpu.reset_peak_memory_stats()
    for _ in range(100):
        x = x @ w
    torch.rgpu.synchronize()
    live = base + n * n * 4
    assert torch.rgpu.max_memory_allocated() <= 1.5 * live
    assert torch.rgpu.memory_allocated() == base


def test_uploads_reuse_what_was_freed():
    """Each upload allocates: the batch dropped before it is freed first."""
    x = torch.zeros(MIB // 4).to(DEV)
    settle()
    base = torch.rgpu.memory_allocated()
    torch.rgpu.reset_peak_memory_stats()
    for i in range(50):
        x = torch.full((MIB // 4,), float(i)).to(DEV)
    assert x[-1].item() == 49.0
    assert torch.rgpu.max_memory_allocated() <= base + MIB


def _gpt_setup(device, compiled):
    torch.manual_seed(0)
    cfg = GPTConfig.tiny()
    model = GPT(cfg).to(device)
    fwd = torch.compile(model, backend="rgpu") if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train, _ = train_val(n_chars=20000)
    g = torch.Generator().manual_seed(0)

    def step():
        x, y = get_batch(train, 4, cfg.block_size, g, device=device)
        _, loss = fwd(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model, opt, step


def _cpu_step_peak():
    """PyTorch CPU's max_memory_allocated for one GPT training step (after
    warm-up): the bytes held at its start (parameters, buffers, AdamW state)
    plus the peak of the CPU allocator's running total during it (the
    profiler's memory events)."""
    from torch.profiler import ProfilerActivity, profile
    model, opt, step = _gpt_setup("cpu", False)
    for _ in range(3):
        step()
    ts = list(model.parameters()) + list(model.buffers())
    ts += [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
    held = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in ts}.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
            step()
    events = sorted((e.start_ns(), e.nbytes()) for e in p.profiler.kineto_results.events() if e.name() == "[memory]")
    run = peak = 0
    for _, n in events:
        run += n
        peak = max(peak, run)
    return held + peak


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gpt_step_peak_near_pytorch(compiled):
    """A GPT training step's server peak within 1.2x of PyTorch CPU's for the
    same step. Compiled, the backward template frees each saved activation
    after its last use (the call was handed them), as PyTorch's backward does."""
    cpu = _cpu_step_peak()
    torch._dynamo.reset()
    try:
        _, _, step = _gpt_setup(DEV, compiled)
        for _ in range(3):
            step()
        settle()
        torch.rgpu.reset_peak_memory_stats()
        step()
        torch.rgpu.synchronize()
        peak = torch.rgpu.max_memory_allocated()
    finally:
        torch._dynamo.reset()
    assert peak <= 1.2 * cpu, (peak, cpu)


def test_compiled_backward_handed_inputs():
    """(h * h).sum() compiled: its backward takes h. When only the call holds h
    the template frees it; when the program still holds it, the call binds a
    fresh alias for the template to free instead. Gradients as on CPU, no
    double free (the server would report it at the sync), nothing leaked."""
    from rgpu import compile as rcompile
    torch._dynamo.reset()
    aliases, made = [], []
    orig_alias, orig_init = rcompile._Template._alias, rcompile._Template.__init__

    def init(self, *a, **k):
        orig_init(self, *a, **k)
        made.append(self)
    rcompile._Template._alias = staticmethod(lambda a: aliases.append(1) or orig_alias(a))
    rcompile._Template.__init__ = init
    try:
        settle()
        wc = torch.randn(64, 64)
        w = wc.to(DEV).requires_grad_()
        cf = torch.compile(lambda h: (h * h).sum(), backend="rgpu")
        settle()
        base = torch.rgpu.memory_allocated()
        kept = []
        for keep in (False, False, True, False, True):
            h = w * 2
            loss = cf(h)
            if keep:
                kept.append(h)
            del h
            loss.backward()
            del loss
        assert len(made) == 2 and not made[0].handed and made[1].handed   # forward, backward
        assert len(aliases) == 2
        torch.rgpu.synchronize()
        assert torch.allclose(w.grad.cpu(), 40 * wc, rtol=1e-6)
        for h in kept:
            assert torch.equal(h.cpu(), 2 * wc)
        del kept, h
        settle()
        assert torch.rgpu.memory_allocated() == base + w.grad.nbytes
    finally:
        rcompile._Template._alias, rcompile._Template.__init__ = orig_alias, orig_init
        torch._dynamo.reset()
