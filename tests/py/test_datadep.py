"""Ops whose output shape depends on the data, against PyTorch CPU: nonzero,
masked_select, unique, boolean-mask indexing. Each costs exactly one wait
(the count); the tests count waits with rgpu.stats()["waits"]."""
import pytest
import torch

import rgpu

DEV = "rgpu"
RGPU0 = torch.device("rgpu", 0)
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


def waits():
    return rgpu.stats()["waits"]


def sample(shape, dtype, seed=0, zeros=0.5):
    """Values in a small range with about `zeros` of them zero (and repeats, for unique)."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randint(-3, 4, shape, generator=g)
    keep = torch.rand(shape, generator=g) >= zeros
    v = v * keep
    if dtype is torch.bool:
        return v != 0
    if dtype is torch.uint8:
        return v.abs().to(dtype)
    return v.to(dtype)


def same(r, c):
    assert isinstance(r, rgpu.RemoteTensor), type(r)
    assert r.device == RGPU0
    assert r.dtype == c.dtype, (r.dtype, c.dtype)
    assert r.shape == c.shape, (r.shape, c.shape)
    assert r.stride() == c.stride(), (r.stride(), c.stride())
    got = r.cpu()
    assert torch.equal(got, c), (got, c)


def one_wait(fn):
    """fn() costs exactly one wait; returns its result."""
    w = waits()
    r = fn()
    assert waits() - w == 1, waits() - w
    return r


# --- nonzero --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (7,), (3, 4), (2, 3, 4), (0, 5)])
def test_nonzero(dtype, shape):
    c = sample(shape, dtype, seed=1)
    x = c.to(DEV)
    r = one_wait(lambda: torch.nonzero(x))
    same(r, torch.nonzero(c))


def test_nonzero_all_zero_and_all_nonzero():
    for c in (torch.zeros(4, 5), torch.ones(4, 5), torch.tensor(0.0), torch.tensor(2.0)):
        x = c.to(DEV)
        same(one_wait(lambda: torch.nonzero(x)), torch.nonzero(c))


def test_nonzero_nan_counts_and_views():
    c = torch.tensor([[0.0, float("nan"), -0.0], [1.0, 0.0, float("inf")]])
    x = c.to(DEV)
    same(one_wait(lambda: torch.nonzero(x)), torch.nonzero(c))
    same(one_wait(lambda: torch.nonzero(x.t())), torch.nonzero(c.t()))
    big = sample((6, 8), torch.float32, seed=2)
    xb = big.to(DEV)
    same(one_wait(lambda: torch.nonzero(xb[1::2, ::3])), torch.nonzero(big[1::2, ::3]))


def test_nonzero_as_tuple_and_argwhere():
    c = sample((4, 6), torch.float32, seed=3)
    x = c.to(DEV)
    rs = one_wait(lambda: torch.nonzero(x, as_tuple=True))
    cs = torch.nonzero(c, as_tuple=True)
    assert len(rs) == len(cs) == 2
    for r, e in zip(rs, cs):
        assert torch.equal(r.cpu(), e)
    same(one_wait(lambda: torch.argwhere(x)), torch.argwhere(c))


# --- masked_select ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_select(dtype):
    c = sample((5, 6), dtype, seed=4)
    m = sample((5, 6), torch.bool, seed=5)
    x, mm = c.to(DEV), m.to(DEV)
    same(one_wait(lambda: torch.masked_select(x, mm)), torch.masked_select(c, m))


def test_masked_select_broadcasts_both_ways():
    c = sample((3, 4), torch.float32, seed=6)
    m = torch.tensor([True, False, True, True])
    x, mm = c.to(DEV), m.to(DEV)
    same(one_wait(lambda: torch.masked_select(x, mm)), torch.masked_select(c, m))
    c1 = sample((4,), torch.float32, seed=7)
    m2 = sample((3, 4), torch.bool, seed=8)
    same(one_wait(lambda: torch.masked_select(c1.to(DEV), m2.to(DEV))), torch.masked_select(c1, m2))
    same(one_wait(lambda: x.masked_select(torch.zeros(3, 4, dtype=torch.bool, device=DEV))),
         torch.masked_select(c, torch.zeros(3, 4, dtype=torch.bool)))


def test_masked_select_needs_bool():
    x = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError, match="mask"):
        torch.masked_select(x, torch.ones(3, dtype=torch.int64, device=DEV))


# --- unique -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_unique_sorted_inverse_counts(dtype):
    c = sample((6, 7), dtype, seed=9, zeros=0.2)
    x = c.to(DEV)
    for inv in (False, True):
        for cnt in (False, True):
            rs = one_wait(lambda: torch.unique(x, return_inverse=inv, return_counts=cnt))
            cs = torch.unique(c, return_inverse=inv, return_counts=cnt)
            rs = rs if isinstance(rs, tuple) else (rs,)
            cs = cs if isinstance(cs, tuple) else (cs,)
            assert len(rs) == len(cs)
            for r, e in zip(rs, cs):
                same(r, e)


def test_unique_aten_placeholders_and_unsorted():
    c = torch.tensor([3, 1, 3, 2, 1, 7])
    x = c.to(DEV)
    v, i, n = one_wait(lambda: torch.ops.aten._unique2(x))
    assert v.cpu().tolist() == [1, 2, 3, 7]
    assert i.shape == (0,) and n.shape == (0,) and i.dtype == n.dtype == torch.int64
    u = one_wait(lambda: torch.unique(x, sorted=False))
    assert sorted(u.cpu().tolist()) == [1, 2, 3, 7]


def test_unique_floats_nan_and_signed_zero():
    c = torch.tensor([0.0, -0.0, 1.5, float("nan"), 1.5, float("nan"), -2.0])
    x = c.to(DEV)
    v, inv, cnt = one_wait(lambda: torch.unique(x, return_inverse=True, return_counts=True))
    cv, ci, cc = torch.unique(c, return_inverse=True, return_counts=True)
    torch.testing.assert_close(v.cpu(), cv, equal_nan=True)
    assert torch.equal(inv.cpu(), ci) and torch.equal(cnt.cpu(), cc)


def test_unique_empty_and_noncontiguous():
    same(one_wait(lambda: torch.unique(torch.empty(0, device=DEV))), torch.unique(torch.empty(0)))
    c = sample((5, 4), torch.int32, seed=10)
    x = c.to(DEV)
    r = one_wait(lambda: torch.unique(x.t(), return_inverse=True))
    e = torch.unique(c.t(), return_inverse=True)
    same(r[0], e[0])
    same(r[1], e[1])


def test_unique_dim_raises_clearly():
    x = torch.ones(3, 4, device=DEV)
    with pytest.raises(NotImplementedError, match="unique"):
        torch.unique(x, dim=0)
    with pytest.raises(NotImplementedError, match="unique"):
        torch.unique_consecutive(x, dim=1)


# --- boolean-mask indexing -----------------------------------------------------------------

def test_getitem_bool_mask():
    c = sample((4, 5), torch.float32, seed=11)
    m = sample((4, 5), torch.bool, seed=12)
    x, mm = c.to(DEV), m.to(DEV)
    same(one_wait(lambda: x[mm]), c[m])
    m1 = torch.tensor([True, False, True, True])
    same(one_wait(lambda: x[m1.to(DEV)]), c[m1])          # rows
    m2 = torch.tensor([False, True, True, False, True])
    same(one_wait(lambda: x[:, m2.to(DEV)]), c[:, m2])    # columns, after a full slice
    c3 = sample((3, 4, 5), torch.int64, seed=13)
    m3 = sample((4, 5), torch.bool, seed=14)
    same(one_wait(lambda: c3.to(DEV)[:, m3.to(DEV)]), c3[:, m3])


def test_getitem_bool_mask_with_int_index():
    c = sample((4, 5), torch.float32, seed=15)
    x = c.to(DEV)
    i = torch.tensor([3, 0])
    m = torch.tensor([True, False, True, True, False])
    w = waits()
    r = x[i.to(DEV)[:, None], m.to(DEV)]
    e = c[i[:, None], m]
    assert waits() - w == 1
    same(r, e)


def test_getitem_int_and_cpu_index_need_no_wait():
    c = sample((4, 5), torch.float32, seed=16)
    x = c.to(DEV)
    i = torch.tensor([2, 0, 3, 3])
    idx = i.to(DEV)
    w = waits()
    r1 = x[idx]
    r3 = x[i]                       # CPU integer index: uploaded
    assert waits() == w
    same(r1, c[i])
    same(r3, c[i])
    m = torch.tensor([True, False, True, False])
    w = waits()
    r2 = x[m]                       # a CPU mask: at most the count's wait
    assert waits() - w <= 1
    same(r2, c[m])


def test_expand_masks():
    from rgpu import datadep
    c = sample((3, 4, 5), torch.float32, seed=20)
    x = c.to(DEV)
    m = sample((4, 5), torch.bool, seed=21)
    w = waits()
    cols = datadep.expand_masks(x, [None, m])           # CPU mask: no wait
    assert waits() == w
    want = torch.nonzero(m)
    assert cols[0] is None and len(cols) == 3
    assert torch.equal(cols[1], want[:, 0]) and torch.equal(cols[2], want[:, 1])
    rc = one_wait(lambda: datadep.expand_masks(x, [None, m.to(DEV)]))
    assert torch.equal(rc[1].cpu(), want[:, 0]) and torch.equal(rc[2].cpu(), want[:, 1])
    for bad in ([torch.ones(4, dtype=torch.bool)], [None, torch.ones(4, 4, dtype=torch.bool)],
                [None, None, None, torch.ones(1, dtype=torch.bool)]):
        with pytest.raises(IndexError, match="mask"):
            datadep.expand_masks(x, bad)


def test_setitem_bool_mask():
    c = sample((4, 5), torch.float32, seed=17)
    m = sample((4, 5), torch.bool, seed=18)
    x, mm = c.to(DEV), m.to(DEV)
    w = waits()
    x[mm] = 9.0                     # dispatch.py makes this a masked_fill_: no count needed
    assert waits() - w <= 1
    e = c.clone()
    e[m] = 9.0
    same(x, e)
    n = int(m.sum())
    vals = torch.arange(n, dtype=torch.float32)
    one_wait(lambda: x.__setitem__(mm, vals.to(DEV)))
    e[m] = vals
    same(x, e)
    rows = torch.tensor([False, True, False, True])
    one_wait(lambda: x.__setitem__(rows.to(DEV), torch.full((5,), -1.0, device=DEV)))
    e[rows] = torch.full((5,), -1.0)
    same(x, e)


def test_index_put_functional_and_accumulate():
    c = sample((6,), torch.int64, seed=19)
    m = torch.tensor([True, False, True, True, False, False])
    x = c.to(DEV)
    v = torch.tensor([10, 20, 30])
    r = one_wait(lambda: torch.index_put(x, (m.to(DEV),), v.to(DEV)))
    same(r, torch.index_put(c, (m,), v))
    same(x, c)                      # the functional form leaves self alone
    idx = torch.tensor([0, 2, 0])
    w = waits()
    x.index_put_((idx.to(DEV),), v.to(DEV), accumulate=True)
    assert waits() == w
    e = c.clone().index_put_((idx,), v, accumulate=True)
    same(x, e)


def test_mask_shape_mismatch_raises():
    x = torch.ones(3, 4, device=DEV)
    m = torch.tensor([True, True, False, False], device=DEV)     # x has 3 rows
    with pytest.raises(IndexError, match="mask"):
        x[m]                        # ATen: IndexError; nonzero alone would give rows 0 and 1
