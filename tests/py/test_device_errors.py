"""Data-dependent errors (an index or a target out of range) on every backend.

The cpu backend checks on the host when the op runs; the cuda backend checks
on the device and does not wait: the check writes the session's device error
word, and the next wait reports it (issue 27 item 1). Both report
rgpu.RemoteError at the next wait, naming the first failing op with PyTorch's
message; the failing op's outputs and what was computed from them are
poisoned; the session goes on. On cuda the results of later checked ops before
that wait are poisoned too (their kernels skip once the word is set).
Runs on cuda under the CUDA-on-CPU layer in `make test-cuda-emu`."""
import re

import pytest
import torch
import torch.nn.functional as F

import rgpu


def _on_cuda():
    return rgpu.stats().get("backend", "").startswith("cuda")


def _fails_at_wait(t, pattern):
    """t's read raises RemoteError matching pattern; returns the message."""
    with pytest.raises(rgpu.RemoteError) as ei:
        t.cpu()
    msg = str(ei.value)
    assert re.search(pattern, msg), msg
    return msg


def _poisoned(t):
    with pytest.raises(rgpu.RemoteError, match="poison"):
        t.cpu()


W = torch.arange(20.0).reshape(5, 4)

CASES = {
    "embedding": (lambda ix: F.embedding(ix, W.to("rgpu")),
                  r"embedding: index 7 is out of bounds for dimension 0 with size 5"),
    "index_select": (lambda ix: W.to("rgpu").index_select(0, ix),
                     r"index_select: index 7 is out of bounds for dimension 0 with size 5"),
    "gather": (lambda ix: W.to("rgpu").gather(0, ix.reshape(-1, 1).expand(-1, 4)),
               r"gather: index 7 is out of bounds for dimension 0 with size 5"),
    "scatter": (lambda ix: torch.zeros(5, 4, device="rgpu").scatter(0, ix.reshape(-1, 1).expand(-1, 4),
                                                                    torch.ones(3, 4, device="rgpu")),
                r"scatter: index 7 is out of bounds for dimension 0 with size 5"),
    "scatter_add": (lambda ix: torch.zeros(5, 4, device="rgpu").scatter_add(0, ix.reshape(-1, 1).expand(-1, 4),
                                                                            torch.ones(3, 4, device="rgpu")),
                    r"scatter_add: index 7 is out of bounds for dimension 0 with size 5"),
    "index_tensor": (lambda ix: W.to("rgpu")[ix],
                     r"index.*: index 7 is out of bounds for dimension 0 with size 5"),
    "index_tensor_2d": (lambda ix: W.to("rgpu")[torch.tensor([0, 1, 2]).to("rgpu"), ix - 1],
                        r"index.*: index 6 is out of bounds for dimension 1 with size 4"),
    "index_add": (lambda ix: torch.zeros(5, 4, device="rgpu").index_add(0, ix, torch.arange(12.0).reshape(3, 4).to("rgpu")),
                  r"index_add: index 7 is out of bounds for dimension 0 with size 5"),
    "nll_loss": (lambda ix: F.nll_loss(torch.zeros(3, 5, device="rgpu"), ix),
                 r"nll_loss.*: Target 7 is out of bounds\."),
    "cross_entropy": (lambda ix: F.cross_entropy(torch.zeros(3, 5, device="rgpu"), ix),
                      r"Target 7 is out of bounds\."),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_index_fails_at_the_next_wait_and_the_session_goes_on(name):
    fn, pattern = CASES[name]
    before = torch.full((3,), 2.0, device="rgpu") * 3     # written and waited for before the failure
    assert before.cpu().tolist() == [6.0, 6.0, 6.0]
    bad = torch.tensor([1, 7, 2]).to("rgpu")
    out = fn(bad)
    dep = out * 2                                        # depends on the failing op
    later = torch.ones(4, device="rgpu") + 1             # independent, after the failing op
    later_checked = F.embedding(torch.tensor([4]).to("rgpu"), W.to("rgpu"))   # a later check, independent
    msg = _fails_at_wait(out, pattern)
    assert re.match(r"op (\d+) \((\S+)\) failed", msg), msg
    _poisoned(out)                                       # the failing op's output
    _poisoned(dep)
    assert later.cpu().tolist() == [2.0] * 4
    if _on_cuda():
        _poisoned(later_checked)   # its kernels skipped once the word was set: poisoned by the failure
    else:
        assert later_checked.cpu().tolist() == [W[4].tolist()]
    assert before.cpu().tolist() == [6.0, 6.0, 6.0]     # written before: intact
    good = torch.tensor([1, 4, 2])
    got = fn(good.to("rgpu")).cpu()                      # the session goes on
    ref = {"embedding": lambda: F.embedding(good, W),
           "index_select": lambda: W.index_select(0, good),
           "gather": lambda: W.gather(0, good.reshape(-1, 1).expand(-1, 4)),
           "scatter": lambda: torch.zeros(5, 4).scatter(0, good.reshape(-1, 1).expand(-1, 4), torch.ones(3, 4)),
           "scatter_add": lambda: torch.zeros(5, 4).scatter_add(0, good.reshape(-1, 1).expand(-1, 4),
                                                                torch.ones(3, 4)),
           "index_tensor": lambda: W[good],
           "index_tensor_2d": lambda: W[torch.tensor([0, 1, 2]), good - 1],
           "index_add": lambda: torch.zeros(5, 4).index_add(0, good, torch.arange(12.0).reshape(3, 4)),
           "nll_loss": lambda: F.nll_loss(torch.zeros(3, 5), good),
           "cross_entropy": lambda: F.cross_entropy(torch.zeros(3, 5), good)}[name]()
    assert torch.equal(got, ref), (got, ref)


def test_the_first_failing_op_is_reported():
    """Two failures before one wait: the earlier op's message, and its op index."""
    W_r = W.to("rgpu")
    torch.rgpu.synchronize()
    a = F.embedding(torch.tensor([9]).to("rgpu"), W_r)                       # first
    b = F.nll_loss(torch.zeros(2, 5, device="rgpu"), torch.tensor([0, 6]).to("rgpu"))   # second
    msg = _fails_at_wait(b, r"embedding: index 9 is out of bounds for dimension 0 with size 5")
    first = int(re.match(r"op (\d+)", msg).group(1))
    _poisoned(a)
    _poisoned(b)
    # the second failure is not reported again: the next wait is clean
    assert (W_r.sum() * 1).item() == W.sum().item()
    # and the first bad position within one op is reported (all of them bad)
    c = F.embedding(torch.tensor([3, 11, 8, 12]).to("rgpu"), W_r)
    msg2 = _fails_at_wait(c, r"index 11 is out of bounds")
    assert int(re.match(r"op (\d+)", msg2).group(1)) > first


def test_bad_index_in_backward():
    """nll_loss's backward checks its targets too."""
    x = torch.zeros(3, 5, device="rgpu")
    gx = torch.ops.aten.nll_loss_backward(torch.tensor(1.0).to("rgpu"), x, torch.tensor([1, 8, 3]).to("rgpu"), None, 1,
                                          -100, torch.tensor(3.0).to("rgpu"))
    _fails_at_wait(gx, r"nll_loss_backward.*: Target 8 is out of bounds\.")
    _poisoned(gx)
    gx = torch.ops.aten.nll_loss_backward(torch.tensor(1.0).to("rgpu"), x, torch.tensor([1, 4, 3]).to("rgpu"), None, 1,
                                          -100, torch.tensor(3.0).to("rgpu"))
    ref = torch.ops.aten.nll_loss_backward(torch.tensor(1.0), torch.zeros(3, 5), torch.tensor([1, 4, 3]), None, 1,
                                           -100, torch.tensor(3.0))
    assert torch.equal(gx.cpu(), ref)


def test_training_goes_on_after_a_bad_batch():
    """A bad batch's step fails at its loss.item(); the next good steps equal PyTorch CPU's."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Flatten(), torch.nn.Linear(24, 5))
    mod = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Flatten(), torch.nn.Linear(24, 5))
    mod.load_state_dict(ref.state_dict())
    mod = mod.to("rgpu")
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(mod.parameters(), lr=0.1)
    x_bad = torch.tensor([[1, 2, 12]]).to("rgpu")
    with pytest.raises(rgpu.RemoteError, match="index 12 is out of bounds"):
        F.cross_entropy(mod(x_bad), torch.tensor([1]).to("rgpu")).item()
    # the failed step wrote no parameter (its backward never ran)
    for p, q in zip(mod.parameters(), ref.parameters()):
        assert torch.equal(p.cpu(), q.detach())
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randint(0, 10, (4, 3), generator=g)
        y = torch.randint(0, 5, (4,), generator=g)
        opt_r.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        opt_r.step()
        opt.zero_grad()
        F.cross_entropy(mod(x.to("rgpu")), y.to("rgpu")).backward()
        opt.step()
    for p, q in zip(mod.parameters(), ref.parameters()):
        assert torch.allclose(p.cpu(), q.detach(), atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("padding_idx,by_freq", [(None, False), (3, False), (None, True), (0, True)])
def test_embedding_backward_groups(dtype, padding_idx, by_freq):
    """embedding_dense_backward (on cuda: grouped on the device, a stable
    counting sort in slices) against PyTorch CPU: repeated indices, 2-d
    indices, enough positions for several slices, a strided grad."""
    g = torch.Generator().manual_seed(5)
    V, D = 37, 6
    ix = torch.randint(0, V, (24, 40), generator=g)           # 960 positions
    ix[0, :7] = 3                                              # one index many times
    grad = torch.randint(-8, 9, (40, 24, D), generator=g).to(dtype).transpose(0, 1)   # strided, exact sums
    kw = dict(num_weights=V, padding_idx=-1 if padding_idx is None else padding_idx, scale_grad_by_freq=by_freq)
    ref = torch.ops.aten.embedding_dense_backward(grad, ix, **kw)
    got = torch.ops.aten.embedding_dense_backward(grad.to("rgpu"), ix.to("rgpu"), **kw).cpu()
    assert got.dtype == ref.dtype
    if by_freq:
        torch.testing.assert_close(got, ref, rtol=1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-6, atol=0)
    else:
        assert torch.equal(got, ref)


def test_embedding_backward_bad_index():
    grad = torch.ones(4, 3)
    ix = torch.tensor([1, 0, 9, 11])
    gw = torch.ops.aten.embedding_dense_backward(grad.to("rgpu"), ix.to("rgpu"), 5, -1, False)
    _fails_at_wait(gw, r"embedding_dense_backward: index 9 is out of bounds for dimension 0 with size 5")
    _poisoned(gw)


def test_max_pool_backward_indices():
    """max_pool2d's backward reads indices: a bad one fails at the next wait;
    one outside its window (legal: the plane-by-plane path) and the ordinary
    case equal PyTorch CPU."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 4, 4, generator=g)
    y, ind = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2], [0, 0], [1, 1], False)
    gy = torch.randn(y.shape, generator=g)

    def bw(gy_, x_, ind_):
        return torch.ops.aten.max_pool2d_with_indices_backward(gy_, x_, [2, 2], [2, 2], [0, 0], [1, 1], False, ind_)
    ref = bw(gy, x, ind)
    assert torch.equal(bw(gy.to("rgpu"), x.to("rgpu"), ind.to("rgpu")).cpu(), ref)
    far = ind.clone()
    far[1, 2, 0, 0] = 15                                # in the plane, outside its window
    assert torch.equal(bw(gy.to("rgpu"), x.to("rgpu"), far.to("rgpu")).cpu(), bw(gy, x, far))
    bad = ind.clone()
    bad[0, 1, 1, 0] = 99
    gx = bw(gy.to("rgpu"), x.to("rgpu"), bad.to("rgpu"))
    _fails_at_wait(gx, r"max_pool2d_with_indices_backward.*: index 99 is out of bounds for a plane of size 16")
    _poisoned(gx)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64])
@pytest.mark.parametrize("dim", [0, 1])
def test_index_add_groups(dtype, dim):
    """index_add (on cuda: grouped on the device) against PyTorch CPU:
    repeated indices, alpha, both dims, enough positions for several slices."""
    g = torch.Generator().manual_seed(3)
    n = 700
    x = torch.randint(-5, 6, (9, 9), generator=g).to(dtype)
    ix = torch.randint(0, 9, (n,), generator=g)
    src = torch.randint(-4, 5, (n, 9) if dim == 0 else (9, n), generator=g).to(dtype)
    ref = x.index_add(dim, ix, src, alpha=3)
    got = x.to("rgpu").index_add(dim, ix.to("rgpu"), src.to("rgpu"), alpha=3).cpu()
    assert torch.equal(got, ref), (got - ref).abs().max()


@pytest.mark.parametrize("op", ["remainder", "fmod", "floor_divide"])
def test_integer_division_by_zero(op):
    """Integer %, fmod and // by zero fail at the next wait (the CPU backend's
    "ZeroDivisionError"); a nonzero divisor gives PyTorch CPU's values."""
    a = torch.tensor([7, -7, 9, 4])
    fn = getattr(torch, op)
    q = fn(a.to("rgpu"), torch.tensor([2, 0, 4, 3]).to("rgpu"))
    later = fn(a.to("rgpu"), torch.tensor([3, 3, 3, 3]).to("rgpu"))
    _fails_at_wait(q, r"ZeroDivisionError")
    _poisoned(q)
    if _on_cuda():
        _poisoned(later)   # a later check before the wait: unknown once the word is set
    else:
        assert torch.equal(later.cpu(), fn(a, torch.tensor([3, 3, 3, 3])))
    assert torch.equal(fn(a.to("rgpu"), torch.tensor([3, -2, 4, 1]).to("rgpu")).cpu(), fn(a, torch.tensor([3, -2, 4, 1])))


def test_bernoulli_bad_p():
    """A probability tensor with a p outside [0, 1] fails at the next wait with
    the cpu backend's message (on cuda the check stays on the device); its
    draws and what depends on them are poisoned, the session goes on."""
    y = torch.bernoulli(torch.tensor([0.2, 1.5, -0.1]).to("rgpu"))
    dep = y + 1
    later = torch.ones(2, device="rgpu") * 3
    _fails_at_wait(y, r"bernoulli: expected p_in >= 0 && p_in <= 1, got 1\.5")
    _poisoned(y)
    _poisoned(dep)
    assert later.cpu().tolist() == [3.0, 3.0]
    good = torch.bernoulli(torch.tensor([0.0, 1.0]).expand(8, 2).to("rgpu")).cpu()
    assert torch.equal(good, torch.tensor([[0.0, 1.0]] * 8))


GRAPHED = """
import torch, rgpu, torch.nn.functional as F
W = torch.arange(20.0).reshape(5, 4).to("rgpu")

@torch.compile(backend="rgpu")
def f(ix, x):
    return F.embedding(ix, W) * 2 + F.nll_loss(x, ix.clamp(max=2))

good = torch.tensor([1, 4, 2]).to("rgpu")
x = torch.zeros(3, 3).to("rgpu")
for i in range(4):                       # calls 3 and 4 replay the captured graph
    print("ok", f(good, x).sum().item())
try:
    print("bad", f(torch.tensor([1, 9, 2]).to("rgpu"), x).sum().item())
except rgpu.RemoteError as e:
    print("error", str(e).replace(chr(10), " "))
print("ok", f(good, x).sum().item())
"""


def test_bad_index_in_a_graphed_call(tmp_path):
    """With graphs on (RGPU_GRAPHS=1) a compiled function's calls replay as a
    captured graph; on cuda its checks stay on the device with serials
    relative to each launch (err_call), so a bad index in a replayed call is
    reported at the next wait naming the call and its template record, and
    the calls after it replay correctly."""
    import os
    import subprocess
    import sys
    log = tmp_path / "server.log"
    env = dict(os.environ, RGPU_GRAPHS="1", RGPU_SERVER_LOG=str(log))
    env.pop("RGPU_SERVER", None)
    p = subprocess.run([sys.executable, "-c", GRAPHED], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    want = 2 * (W[1] + W[4] + W[2]).sum().item()
    assert [ln for ln in lines if ln.startswith("ok")] == ["ok %s" % want] * 5, lines
    err = [ln for ln in lines if ln.startswith("error")]
    assert len(err) == 1 and re.search(r"index 9 is out of bounds for dimension 0 with size 5", err[0]), lines
    m = re.search(r"graphs: (\d+) template calls, (\d+) replayed as graphs", log.read_text())
    # cuda: the bad call replays too (its check in the graph); cpu: a capture fails on it
    assert m and int(m.group(2)) >= (3 if _on_cuda() else 2), log.read_text()


RECORDED = """
import torch, rgpu, torch.nn.functional as F
W = torch.arange(20.0).reshape(5, 4).to("rgpu")
o = F.embedding(torch.tensor([1, 7, 2]).to("rgpu"), W)
try:
    o.cpu()
except rgpu.RemoteError as e:
    print("error", e)
print("ok", F.embedding(torch.tensor([1, 4, 2]).to("rgpu"), W).sum().item())
"""


def test_rgpu_diff_fails_a_device_check_at_its_own_op(tmp_path):
    """rgpu-diff runs records one by one on two backends and compares each
    op's status: a check left on the device is taken after every record
    (rgpu_session_check_device), so on cuda the bad embedding fails at its own
    op, as on the cpu backend, and nothing differs; rgpu-replay --verify
    reproduces the recorded error at the same wait."""
    import os
    import subprocess
    import sys
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    bin_dir = os.environ.get("RGPU_BIN") or os.path.join(repo, "build", "bin")
    trace = tmp_path / "bad.rgt"
    env = dict(os.environ, RGPU_RECORD=str(trace))
    env.pop("RGPU_SERVER", None)
    p = subprocess.run([sys.executable, "-c", RECORDED], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "index 7 is out of bounds" in p.stdout and "ok 130.0" in p.stdout, p.stdout + p.stderr
    a = "cuda" if _on_cuda() else "cpu"
    d = subprocess.run([os.path.join(bin_dir, "rgpu-diff"), str(trace), "--a", a, "--b", "cpu", "--resync"],
                       capture_output=True, text=True, timeout=600)
    assert d.returncode == 0, d.stdout + d.stderr
    assert "1 ops failed on both backends" in d.stdout and " 0 over tolerance" in d.stdout, d.stdout
    v = subprocess.run([os.path.join(bin_dir, "rgpu-replay"), str(trace), "--backend", a, "--verify"],
                       capture_output=True, text=True, timeout=600)
    assert v.returncode == 0 and "mismatch" not in (v.stdout + v.stderr).lower(), v.stdout + v.stderr
