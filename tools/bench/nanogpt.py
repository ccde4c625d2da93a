"""nanoGPT shakespeare-char training steps: PyTorch CPU eager against rgpu.

One run prints
  * s/iter for PyTorch CPU eager and for rgpu on a local rgpu-server with the
    cpu backend (the embedded-server setup: same machine, Unix socket), and
    their ratio;
  * per iteration on rgpu: ops recorded, chunks, waits and bytes sent/received
    (deltas of rgpu.stats());
  * the client's own cost: the same loop against `rgpu-server --backend null`
    (decodes and validates every record, executes nothing, answers zeros, so
    the loss reads 0), wall time per iteration / ops per iteration = µs per op.
Each configuration runs in its own child process (the rgpu client connects
once per process); this script starts the servers.

An iteration: batch to the device, forward, loss, backward, clip_grad_norm_(1.0),
AdamW step (nanoGPT's two groups), zero_grad, loss.item().

    python tools/bench/nanogpt.py                  # full shakespeare-char: long on a CPU server
    python tools/bench/nanogpt.py --batch 8 --block 64 --layers 2 --heads 4 --embd 128
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools"))
from benchsrv import start_unix_server, stop_unix_server  # noqa: E402


# --- child: one configuration ---------------------------------------------------------

def child(a):
    import torch
    from models import data, gpt

    device = "cpu" if a.child == "cpu" else "rgpu"
    if device == "rgpu":
        import rgpu
        info = rgpu.connect()
    cfg = gpt.GPTConfig(n_layer=a.layers, n_head=a.heads, n_embd=a.embd, block_size=a.block,
                        dropout=a.dropout)
    torch.manual_seed(0)
    model = gpt.GPT(cfg).to(device)
    compiled = getattr(a, "compiled", False)
    if a.compile and device == "rgpu":
        # compiled, and eager beside it, with AdamW's step counters on the device
        # (capturable=True) so that they are inputs of the compiled step's graph
        opt = model.configure_optimizer(lr=1e-3, foreach=True, capturable=True)
    else:
        opt = model.configure_optimizer(lr=1e-3, foreach=a.foreach)

    def update():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    fwd = model
    if compiled:        # the whole step: model forward/backward, clip + AdamW
        fwd = torch.compile(model, backend="rgpu")
        update = torch.compile(update, backend="rgpu")
    train, _ = data.train_val(max(200_000, 4 * a.batch * a.block))
    g = torch.Generator().manual_seed(0)
    batches = [data.get_batch(train, a.batch, a.block, g) for _ in range(a.warmup + a.iters)]

    def step(x, y):
        _, loss = fwd(x.to(device), y.to(device))
        loss.backward()
        update()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    losses = [step(*b) for b in batches[:a.warmup]]
    s0 = rgpu.stats() if device == "rgpu" else None
    t0 = time.perf_counter()
    for b in batches[a.warmup:]:
        losses.append(step(*b))
    dt = time.perf_counter() - t0
    out = {"s_per_iter": dt / a.iters, "losses": losses, "params": model.num_params(),
           "threads": torch.get_num_threads()}
    if device == "rgpu":
        s1 = rgpu.stats()
        out["per_iter"] = {k: (s1[k] - s0[k]) / a.iters for k in s1
                           if isinstance(s1[k], (int, float)) and k in s0}
        out["backend"] = info.get("backend")
        out["compile"] = rgpu.stats()["compile"]
    print("RESULT " + json.dumps(out), flush=True)


# --- parent -------------------------------------------------------------------------

def start_server(backend):
    exe = os.environ.get("RGPU_SERVER_BIN", os.path.join(REPO, "build", "bin", "rgpu-server"))
    p, d, env = start_unix_server(exe, backend)
    os.environ["RGPU_TOKEN_FILE"] = env["RGPU_TOKEN_FILE"]
    return p, d, env["RGPU_SERVER"]


def run_child(a, which, server_addr=None, compiled=False):
    env = dict(os.environ)
    env.pop("RGPU_SERVER", None)
    if server_addr:
        env["RGPU_SERVER"] = server_addr
    env["PYTHONPATH"] = os.path.join(REPO, "torchhook") + os.pathsep + env.get("PYTHONPATH", "")
    argv = [sys.executable, os.path.abspath(__file__), "--child", which] + a.passthrough
    if compiled:
        argv.append("--compiled")
    if a.compile:
        argv.append("--compile")
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"{which}: child failed ({p.returncode})")
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"{which}: no result\n{p.stdout}{p.stderr}")


def rgpu_child(a, backend, compiled=False):
    proc, tmp, addr = start_server(backend)
    try:
        return run_child(a, "rgpu", addr, compiled)
    finally:
        stop_unix_server(proc, tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--embd", type=int, default=384)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--foreach", action="store_true", help="AdamW(foreach=True)")
    ap.add_argument("--backend", default="cpu,null",
                    help="rgpu-server backends to run: cpu (timing against PyTorch CPU), "
                         "null (client cost), or both, comma-separated")
    ap.add_argument("--compile", action="store_true",
                    help="also run rgpu with torch.compile(backend=\"rgpu\") (model and optimizer step) "
                         "and compare records, bytes and s/iter with eager rgpu")
    ap.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", choices=["cpu", "rgpu"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    a.passthrough = [f"--batch={a.batch}", f"--block={a.block}", f"--layers={a.layers}",
                     f"--heads={a.heads}", f"--embd={a.embd}", f"--dropout={a.dropout}",
                     f"--iters={a.iters}", f"--warmup={a.warmup}"] + (["--foreach"] if a.foreach else [])
    backends = [b for b in a.backend.split(",") if b]
    for b in backends:
        if b not in ("cpu", "null", "cuda", "auto"):
            ap.error(f"unknown backend {b}")

    print(f"GPT layers={a.layers} heads={a.heads} embd={a.embd} block={a.block}, batch {a.batch}, "
          f"{a.iters} iters after {a.warmup} warm-up, AdamW foreach={a.foreach}"
          + (" (rgpu eager and compiled: foreach=True, capturable=True)" if a.compile else ""))
    cpu = run_child(a, "cpu")
    print(f"  {cpu['params'] / 1e6:.2f} M parameters; PyTorch CPU uses {cpu['threads']} threads")
    print(f"PyTorch CPU eager        {cpu['s_per_iter']:9.4f} s/iter   "
          f"loss {cpu['losses'][0]:.4f} -> {cpu['losses'][-1]:.4f}")
    runs = [(b, False) for b in backends] + ([(b, True) for b in backends] if a.compile else [])
    results = {}
    for b, compiled in runs:
        results[b, compiled] = r = rgpu_child(a, b, compiled)
        pi = r["per_iter"]
        label = f"rgpu{' compiled' if compiled else ''}, {r['backend']} server"
        line = f"{label:33s} {r['s_per_iter']:9.4f} s/iter"
        if b != "null":
            line += f"   loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}" \
                    f"   rgpu/cpu {r['s_per_iter'] / cpu['s_per_iter']:.2f}x"
            worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(r["losses"], cpu["losses"]))
            line += f"   worst loss rel. diff vs CPU {worst:.1e}"
        print(line)
        print(f"  per iter: {pi['ops']:.0f} records, {pi['chunks']:.1f} chunks, {pi['waits']:.1f} waits, "
              f"{pi['bytes_out'] / 1e3:.1f} kB sent, {pi['bytes_in'] / 1e3:.2f} kB received, "
              f"{pi['bytes_out'] / max(pi['ops'], 1):.1f} B/record")
        if compiled:
            c = r["compile"]
            print(f"  compile: {c['templates']} templates sent once, {c['calls']} CALL records, "
                  f"{c['eager_graphs']} graphs run eagerly")
        if b == "null":
            print(f"  client cost: {r['s_per_iter'] / max(pi['ops'], 1) * 1e6:.1f} us/record "
                  f"({r['s_per_iter'] * 1e3:.1f} ms/iter for {pi['ops']:.0f} records; server executes nothing)")
    if a.compile:
        for b in backends:
            e, c = results[b, False], results[b, True]
            print(f"{b} server, compiled vs eager: {e['per_iter']['ops'] / max(c['per_iter']['ops'], 1):.0f}x fewer "
                  f"records, {e['per_iter']['bytes_out'] / max(c['per_iter']['bytes_out'], 1):.0f}x fewer bytes, "
                  f"s/iter {c['s_per_iter'] / e['s_per_iter']:.2f}x of eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())
