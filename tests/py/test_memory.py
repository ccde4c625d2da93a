"""torch.rgpu memory statistics report the server's bytes for this session
(MEMORY_STATS: one wait per query)."""
import gc

import torch

import rgpu

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
