"""The client is thread-safe: autograd runs backward for PrivateUse1 on its own
device thread, which records the backward ops, and Python threads may record
ops concurrently on their own tensors; every value must come out right."""
import os
import threading

import torch

import rgpu
import rgpu.dispatch
import rgpu.tensor

DEV = "rgpu"


class Recorded:
    """Context: logs (thread ident, op name) of every op reaching rgpu's dispatch."""

    def __init__(self):
        self.log = []
        self._lock = threading.Lock()

    def _spy(self, func, args, kwargs):
        with self._lock:
            self.log.append((threading.get_ident(), str(func)))
        return rgpu.dispatch.dispatch(func, args, kwargs)

    def __enter__(self):
        rgpu.tensor.set_dispatcher(self._spy)
        return self

    def __exit__(self, *exc):
        rgpu.tensor.set_dispatcher(rgpu.dispatch.dispatch)

    def threads(self):
        return {t for t, _ in self.log}


def run_threads(fns):
    """Run each fn in its own thread, all released at once; re-raise the first error."""
    errors, results = [], [None] * len(fns)
    gate = threading.Barrier(len(fns))

    def body(i, fn):
        try:
            gate.wait()
            results[i] = fn()
        except BaseException as e:      # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
        assert not t.is_alive(), "thread hung"
    if errors:
        raise errors[0]
    return results


# --- backward on autograd's device thread -------------------------------------------

class Twice(torch.autograd.Function):
    """y = 2x, whose backward notes the thread it runs on."""
    seen = []

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        Twice.seen.append(threading.get_ident())
        return g * 2


def test_backward_records_on_autograd_device_thread():
    main = threading.get_ident()
    Twice.seen.clear()
    xc = torch.linspace(-1, 1, 12).reshape(3, 4)
    xr = xc.to(DEV).requires_grad_()
    xc = xc.clone().requires_grad_()
    with Recorded() as rec:
        yr = Twice.apply(xr * 3)
        fwd = len(rec.log)
        ((yr * yr).sum() * 0.5).backward()
    assert rec.log[:fwd] and all(t == main for t, _ in rec.log[:fwd])
    back = rec.log[fwd:]
    assert back, "backward recorded nothing"
    assert {t for t, _ in back} - {main}, "backward ran on the caller's thread"
    assert Twice.seen and Twice.seen[0] != main
    assert any(t == Twice.seen[0] and "mul" in name for t, name in back)
    yc = Twice.apply(xc * 3)
    ((yc * yc).sum() * 0.5).backward()
    torch.testing.assert_close(xr.grad.cpu(), xc.grad)


def test_backward_of_a_small_network_is_right():
    torch.manual_seed(0)
    mc = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    import copy
    mr = copy.deepcopy(mc).to(DEV)
    x = torch.randn(5, 8)
    with Recorded() as rec:
        mr(x.to(DEV)).pow(2).mean().backward()
    assert len(rec.threads()) >= 2
    mc(x).pow(2).mean().backward()
    for pc, pr in zip(mc.parameters(), mr.parameters()):
        torch.testing.assert_close(pr.grad.cpu(), pc.grad)


def test_backward_in_a_thread_while_main_records():
    """A Python thread runs backward (so two threads: its autograd device thread records)
    while another keeps recording forward ops."""
    xc = torch.linspace(0, 1, 64)

    def backward_side():
        xr = xc.to(DEV).requires_grad_()
        for _ in range(20):
            (xr * xr * 1.5).sum().backward()
        return xr.grad.cpu()

    def forward_side():
        y = torch.zeros(64, device=DEV)
        for i in range(1000):
            y = y + (i % 3)
        return y.cpu()

    g, y = run_threads([backward_side, forward_side])
    torch.testing.assert_close(g, 20 * 3.0 * xc)
    assert torch.equal(y, torch.full((64,), float(sum(i % 3 for i in range(1000)))))


# --- Python threads recording concurrently ---------------------------------------------

def test_two_threads_2000_ops_each():
    def work(k):
        def fn():
            x = torch.full((16,), float(k), device=DEV)
            acc = torch.zeros(16, device=DEV)
            for i in range(1000):               # 2 ops per turn: 2000 records
                x = x + 1
                acc.add_(x, alpha=0.5) if i % 2 else acc.sub_(1)
            return x.cpu(), acc.cpu()
        return fn

    ops0 = rgpu.stats()["ops"]
    (x0, a0), (x1, a1) = run_threads([work(0), work(7)])
    assert rgpu.stats()["ops"] - ops0 >= 4000
    for k, x, a in ((0, x0, a0), (7, x1, a1)):
        xs = [k + i + 1 for i in range(1000)]
        want = sum(0.5 * v if i % 2 else -1.0 for i, v in enumerate(xs))
        assert torch.equal(x, torch.full((16,), float(k + 1000)))
        assert torch.equal(a, torch.full((16,), want))


def test_threads_mix_waits_views_and_frees():
    """One thread waits every few ops (item, tolist) while the other records views and
    in-place writes through them, and lets temporaries die (frees)."""
    def waiter():
        x = torch.arange(10.0, device=DEV)
        tot = 0.0
        for i in range(300):
            x = x * 1 + 1
            if i % 10 == 0:
                tot += x.sum().item()
        return tot, x.tolist()

    def viewer():
        m = torch.zeros(6, 8, device=DEV)
        for i in range(500):
            m[i % 6].add_(1)
            m.t()[i % 8].add_(2)
            m[::2, 1::3].mul_(1)
        return m.cpu()

    (tot, xl), m = run_threads([waiter, viewer])
    want_tot = sum(sum(range(10)) + 10.0 * (i + 1) for i in range(300) if i % 10 == 0)
    assert tot == want_tot
    assert xl == [float(v + 300) for v in range(10)]
    ref = torch.zeros(6, 8)
    for i in range(500):
        ref[i % 6].add_(1)
        ref.t()[i % 8].add_(2)
    assert torch.equal(m, ref)


def test_many_threads_training_steps():
    """Four threads each train their own small model on rgpu at once."""
    torch.manual_seed(1)
    import copy
    base = torch.nn.Linear(6, 2)
    x = torch.randn(10, 6)
    y = torch.randn(10, 2)

    def train(device):
        m = copy.deepcopy(base).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        xs, ys = x.to(device), y.to(device)
        for _ in range(10):
            loss = ((m(xs) - ys) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        return [p.detach().cpu() for p in m.parameters()]

    ref = train("cpu")
    for got in run_threads([lambda: train(DEV)] * 4):
        for a, b in zip(got, ref):
            torch.testing.assert_close(a, b)


def test_error_inside_backward_surfaces_after_it(tmp_path):
    """An op failing on autograd's device thread must not abort the process:
    backward returns, and the next rgpu op raises that error, before the
    optimizer changes any parameter. (Child process: it installs a failing op.)"""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import torch, rgpu
        from rgpu import dispatch
        def bad(func, args, kwargs):
            raise NotImplementedError("rgpu: injected failure in " + str(func))
        dispatch.register([torch.ops.aten.cos.default], bad)     # sin's backward uses cos
        w = torch.nn.Parameter(torch.ones(3).to("rgpu"))
        opt = torch.optim.SGD([w], lr=0.5)
        w.sin().sum().backward()
        print("backward returned")
        try:
            opt.step()
            print("step did not raise")
        except NotImplementedError as e:
            print("raised:", e)
        print(w.detach().cpu().tolist())
    """)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.join(here, "..", "..", "torchhook"))
    env.pop("RGPU_SERVER", None)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout.splitlines()
    assert out[0] == "backward returned"
    assert out[1].startswith("raised: rgpu: injected failure in aten.cos.default"), out
    assert out[2] == "[1.0, 1.0, 1.0]"          # the step changed nothing
