"""Client cost per op: python3 tests/py/bench_ops.py [N]. Times N small ops on rgpu
(recording only: the clock stops before the final wait) against plain CPU torch."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torchhook"))
import torch  # noqa: E402

import rgpu  # noqa: E402


def per_op_us(fn, n, repeats=5):
    """Best of `repeats` runs of n calls (the machine may be busy)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    torch.set_num_threads(1)
    x = torch.zeros(16, device="rgpu")
    c = torch.zeros(16)
    y = torch.ones(16, device="rgpu")
    rows = [
        ("x.add_(1)", lambda: x.add_(1), lambda: c.add_(1)),
        ("x.add_(y)", lambda: x.add_(y), lambda: c.add_(c)),
        ("x * 2 (new tensor)", lambda: x * 2, lambda: c * 2),
        ("x + y (new tensor)", lambda: x + y, lambda: c + c),
        ("x[1:] (view)", lambda: x[1:], lambda: c[1:]),
        ("x.sum()", lambda: x.sum(), lambda: c.sum()),
    ]
    print(f"{'op':24} {'rgpu us':>9} {'cpu us':>9}")
    for name, fr, fc in rows:
        r = per_op_us(fr, n)
        k = per_op_us(fc, n)
        print(f"{name:24} {r:9.2f} {k:9.2f}")
    t0 = time.perf_counter()
    v = x.sum().item()
    print(f"final wait: {(time.perf_counter() - t0) * 1e3:.1f} ms (value {v}); stats {rgpu.stats()}")


if __name__ == "__main__":
    main()
