"""make demo: train a small character-level GPT on device="rgpu" and show what it cost.

The model (tools/models/gpt.py: 4 layers, 4 heads, 128 wide, 64 characters of
context, 0.8 M parameters) learns the generated play script of
tools/models/data.py. Every op of the forward pass, backward pass, gradient
clipping and AdamW runs in rgpu-server's C replayer (the embedded local server
unless RGPU_SERVER is set); the client only records. The same steps then run
on PyTorch CPU from the same initial weights and the loss curves are compared;
last, the model writes a few characters (one forward pass and one wait each).

    python tools/demo.py [steps]        # default 40
"""
import copy
import os
import sys
import time

import torch

import rgpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import data, gpt  # noqa: E402

BATCH = 16
# f32 rounding differences (summation order) grow over training: PyTorch CPU in f32
# and in f64 drift apart by ~1e-3 relative within 40 steps of this run, so the
# curves are held to 1e-2 here; tests/py/test_train.py holds 20 steps to 1e-4.
TOLERANCE = 1e-2


def train(model, batches, device, log):
    """losses of every step, and seconds per step of steps 1.. (the clock
    starts after step 0, on both sides: PyTorch's one-time costs, e.g. the
    import of torch._dynamo that the first optimizer triggers, and the
    server's first allocations are not training speed)"""
    opt = model.configure_optimizer(lr=3e-3)
    losses = []
    t0 = None
    for step, (x, y) in enumerate(batches):
        if step == 1:
            t0 = time.perf_counter()
        _, loss = model(x.to(device), y.to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())              # the one wait of each step
        if log:
            print(f"step {step:3d}  loss {losses[-1]:.4f}", flush=True)
    per_step = (time.perf_counter() - t0) / (len(batches) - 1) if t0 is not None else float("nan")
    return losses, per_step


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    cfg = gpt.GPTConfig.small()
    torch.manual_seed(0)
    cpu_model = gpt.GPT(cfg)
    model = copy.deepcopy(cpu_model).to("rgpu")
    text, _ = data.train_val(300_000)
    g = torch.Generator().manual_seed(0)
    batches = [data.get_batch(text, BATCH, cfg.block_size, g) for _ in range(steps)]
    print(f"GPT: {cfg.n_layer} layers, {cfg.n_head} heads, {cfg.n_embd} wide, context "
          f"{cfg.block_size}, {model.num_params() / 1e6:.2f} M parameters; batch {BATCH}; "
          f"rgpu-server backend {rgpu.connect().get('backend')}")

    s0 = rgpu.stats()
    losses, dt = train(model, batches, "rgpu", log=True)
    s1 = rgpu.stats()
    ref, dt_cpu = train(cpu_model, batches, "cpu", log=False)
    worst = max(abs(a - r) / abs(r) for a, r in zip(losses, ref))

    model.eval()
    start = data.encode("ROMEO:\n").view(1, -1).to("rgpu")
    sample = model.generate(start, 80, generator=torch.Generator().manual_seed(1))
    print("sample:\n" + data.decode(sample[0].tolist()))
    print(f"\n{steps} steps on rgpu: {dt:.3f} s/step; PyTorch CPU {dt_cpu:.3f} s/step; "
          f"rgpu/cpu {dt / dt_cpu:.2f}x (steps 1-{steps - 1}, {torch.get_num_threads()} threads)")
    per = {k: (s1[k] - s0[k]) / steps for k in ("ops", "chunks", "waits", "bytes_out")}
    print(f"per step: {per['ops']:.0f} ops, {per['chunks']:.1f} chunks, {per['waits']:.0f} wait, "
          f"{per['bytes_out'] / 1e3:.1f} kB sent")
    print(f"rgpu vs PyTorch CPU: loss {losses[0]:.4f} -> {losses[-1]:.4f} vs {ref[0]:.4f} -> "
          f"{ref[-1]:.4f}, worst relative loss difference {worst:.2e}")
    print("rgpu.stats():", rgpu.stats())
    if worst > TOLERANCE:
        print(f"rgpu: losses differ from CPU beyond {TOLERANCE:g}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
