"""Client cost per op: rgpu's dispatch -> record path against PyTorch's own
CPU eager dispatch, measured side by side in one run. RGPU_CHECK_WRITES=1
adds the write check (torchhook/rgpu/writes.py) to the plain in-place records
too, as the test suite runs them.

rgpu runs against `rgpu-server --backend null` (decodes and validates every
record, executes nothing), so the numbers are the client alone: Python
__torch_dispatch__, output metadata, encoding in C, and the sender thread.

    python tools/bench/dispatch.py [--n 20000] [--size 16]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def start_null_server():
    d = tempfile.mkdtemp(prefix="rgpu-bench-")
    sock = os.path.join(d, "sock")
    exe = os.environ.get("RGPU_SERVER_BIN", os.path.join(REPO, "build", "bin", "rgpu-server"))
    # no journal (nothing to resume in a benchmark); a private token the clients get via the env
    tok = os.path.join(d, "token")
    os.environ["RGPU_TOKEN_FILE"] = tok
    p = subprocess.Popen([exe, "--unix", sock, "--backend", "null", "--journal", "none",
                          "--token-file", tok, "--quiet"])
    for _ in range(500):
        if os.path.exists(sock):
            break
        time.sleep(0.01)
    return p, d, "unix:" + sock


def per_op_us(fn, n):
    fn(100)                       # warm-up: caches, allocator
    t = time.perf_counter()
    fn(n)
    return (time.perf_counter() - t) / n * 1e6


def _dropped(x, y, n):
    for _ in range(n):
        z = x + y       # noqa: F841  (the previous z dies here)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--size", type=int, default=16, help="elements per tensor")
    a = ap.parse_args()

    proc, tmp, addr = start_null_server()
    os.environ["RGPU_SERVER"] = addr
    import torch
    import rgpu

    cases = {
        "x.add_(1)        (in-place, scalar)": lambda x, y: (lambda n: [x.add_(1) for _ in range(n)]),
        "x + y            (new tensor)": lambda x, y: (lambda n: [x + y for _ in range(n)]),
        # the result dropped at once, as in a loop: one FREE of it queued per op
        "z = x + y        (new, dropped)": lambda x, y: (lambda n: _dropped(x, y, n)),
        "x * 2.5          (scalar)": lambda x, y: (lambda n: [x * 2.5 for _ in range(n)]),
        "x.t()            (view)": lambda x, y: (lambda n: [x.t() for _ in range(n)]),
        "x.sum(0)         (reduction)": lambda x, y: (lambda n: [x.sum(0) for _ in range(n)]),
        # per tensor of a 10-tensor list (torch.optim's foreach step; n/10 calls)
        "_foreach_maximum_ (per tensor)": lambda x, y: (
            lambda n, xs=[x.clone() for _ in range(10)], ys=[y] * 10:
            [torch._foreach_maximum_(xs, ys) for _ in range(n // 10)]),
    }
    side = int(a.size ** 0.5) or 1
    print(f"client cost per op, tensors of {side}x{side} float32, {a.n} ops each; rgpu against --backend null")
    print(f"{'op':40s} {'cpu us':>8s} {'rgpu us':>8s} {'ratio':>6s}")
    try:
        for name, mk in cases.items():
            xc, yc = torch.rand(side, side), torch.rand(side, side)
            xr, yr = xc.to("rgpu"), yc.to("rgpu")
            cpu = per_op_us(mk(xc, yc), a.n)
            r0 = rgpu.stats()["ops"]
            rg = per_op_us(mk(xr, yr), a.n)
            torch.rgpu.synchronize()
            ops = rgpu.stats()["ops"] - r0
            print(f"{name:40s} {cpu:8.2f} {rg:8.2f} {rg / cpu:6.2f}   ({ops} records)")
        s = rgpu.stats()
        print(f"stats: {s}")
        print(f"wire bytes per record: {s['bytes_out'] / max(s['ops'], 1):.2f}")
    finally:
        rgpu.close() if hasattr(rgpu, "close") else None
        proc.terminate()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
