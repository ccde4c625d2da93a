"""make demo: train a small model on device="rgpu" and show what it cost.

Until the training op table lands (matmul, autograd kernels), the model is a
linear regression fitted by gradient descent with hand-written gradients:
every op below runs in rgpu-server's C replayer (the embedded local server
unless RGPU_SERVER is set). The same loop runs on PyTorch CPU alongside and
the two loss curves are compared.
"""
import sys
import time

import torch

import rgpu


def train(device, steps, x_cpu, y_cpu, log):
    x, y = x_cpu.to(device), y_cpu.to(device)
    w = torch.zeros(1, device=device)
    b = torch.zeros(1, device=device)
    lr = 0.1
    losses = []
    for step in range(steps):
        err = x * w + b - y
        loss = (err * err).mean()
        gw = (err * x).mean() * 2
        gb = err.mean() * 2
        w.sub_(gw * lr)
        b.sub_(gb * lr)
        losses.append(loss.item())          # the one wait of each step
        if log:
            print(f"step {step:3d}  loss {losses[-1]:.6f}")
    return losses, w.item(), b.item()


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    g = torch.Generator().manual_seed(0)
    x_cpu = torch.rand(4096, generator=g) * 4 - 2
    y_cpu = 3 * x_cpu + 0.5 + 0.1 * torch.randn(4096, generator=g)

    t0 = time.perf_counter()
    losses, w, b = train("rgpu", steps, x_cpu, y_cpu, log=True)
    dt = time.perf_counter() - t0
    ref, wr, br = train("cpu", steps, x_cpu, y_cpu, log=False)
    worst = max(abs(a - r) / max(abs(r), 1e-12) for a, r in zip(losses, ref))
    print(f"fitted y = {w:.4f} x + {b:.4f}   (data: y = 3 x + 0.5 + noise)")
    print(f"rgpu vs PyTorch CPU: worst relative loss difference {worst:.2e}")
    print(f"{steps} steps in {dt:.3f} s on backend {rgpu.connect().get('backend')}")
    print("rgpu.stats():", rgpu.stats())
    if worst > 1e-5:
        print("rgpu: losses differ from CPU beyond 1e-5", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
