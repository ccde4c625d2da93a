"""The CUDA backend against PyTorch CUDA on the same GPU, family by family.

One run, side by side: every family below runs in a PyTorch process on
`--torch-device` (default cuda) and in an rgpu process whose rgpu-server (this
script starts it on a Unix socket, `--backend`, default cuda) runs on the same
host. Per family it prints the time per call on each side, the achieved GB/s
(memory-bound families: the ideal bytes, every input read once and every output
written once) or TFLOP/s (matmul, conv, attention), rgpu's throughput as a
fraction of PyTorch's, and whether the two results agree (a checksum of the
result, compared with a per-dtype tolerance; the dropout family compares the
dropped fraction, the two sides' random streams being different). Then the
training steps: GPT-2-small (124 M parameters, T=1024) and nanoGPT
(shakespeare-char's 6x384, T=256) s/iter, eager and compiled (PyTorch:
torch.compile of the model, inductor; rgpu: torch.compile(backend="rgpu") of
the model and of the clip+AdamW step). One table and a JSON file.

    python tools/bench/gpu.py                       # a GPU host: cuda server vs PyTorch CUDA, < 5 min
    python tools/bench/gpu.py --families add,softmax --no-models
    python tools/bench/gpu.py --torch-device cpu --backend cpu --scale 0.001 --models tiny
                                                    # the same code paths on a CPU (tests/py/test_gpu_bench.py)

Each side's time is the wall time of a loop of calls ended by one
synchronize (torch.cuda.synchronize / torch.rgpu.synchronize), so rgpu's is
what its user sees: the client's recording and the socket included. The
families: add and gelu in f32/bf16, contiguous and broadcast (add) or strided
(gelu on a transposed view); casts f32<->bf16; softmax over rows of 1,024 and
50,257; layer_norm and rms_norm forward+backward; cross-entropy forward+backward over 50,257
classes; sum (all, and over the last dim); dropout; scaled-dot-product
attention forward+backward (causal, T=1024 and 4096, bf16/f32); AdamW (foreach and
fused=True) over GPT-2-small's 124 M parameters; conv2d forward+backward
over ResNet-50's shapes, f32/bf16; matmul f32/bf16 4096^3.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, HERE)

# agreement of the two sides' checksums: |sum_a - sum_b| <= tol * sum(|x|)
TOL = {"float32": 1e-4, "bfloat16": 2e-2, "loss": 2e-2}


# --- the families (run in a child) -------------------------------------------------------

class Fam:
    """One benchmark line: setup(dev) -> fn, where fn() runs one call and returns
    the tensor(s) to check; work is ("bytes", n) or ("flops", n)."""
    def __init__(self, name, group, dtype, setup, work, check="sum"):
        self.name, self.group, self.dtype, self.setup, self.work, self.check = \
            name, group, dtype, setup, work, check


def families(scale):
    import torch
    import torch.nn.functional as F
    f32, bf16 = torch.float32, torch.bfloat16
    esz = {f32: 4, bf16: 2}

    def n(x):                      # an element count, scaled
        return max(64, int(x * scale))

    def d(x, lo=8):                # a matrix dimension, scaled so that d*d scales with `scale`
        return max(lo, int(x * math.sqrt(scale)))

    def rnd(shape, dtype, dev, seed, requires_grad=False, lo=None):
        g = torch.Generator().manual_seed(seed)
        t = torch.randn(shape, generator=g) if lo is None else torch.rand(shape, generator=g) + lo
        t = t.to(dtype).to(dev)
        return t.requires_grad_() if requires_grad else t

    out = []
    N = n(1 << 26)
    R, C = d(8192), d(8192)
    for dt in (f32, bf16):
        s = "f32" if dt is f32 else "bf16"

        def add(dev, dt=dt):
            a, b = rnd(N, dt, dev, 1), rnd(N, dt, dev, 2)
            return lambda: a + b
        out.append(Fam(f"add {s} contiguous", "add", dt, add, ("bytes", 3 * N * esz[dt])))

        def addb(dev, dt=dt):
            a, b = rnd((R, C), dt, dev, 1), rnd(C, dt, dev, 2)
            return lambda: a + b
        out.append(Fam(f"add {s} broadcast [R,C]+[C]", "add", dt, addb, ("bytes", (2 * R * C + C) * esz[dt])))

        def gelu(dev, dt=dt):
            a = rnd(N, dt, dev, 3)
            return lambda: F.gelu(a)
        out.append(Fam(f"gelu {s} contiguous", "gelu", dt, gelu, ("bytes", 2 * N * esz[dt])))

        def gelut(dev, dt=dt):
            a = rnd((R, C), dt, dev, 3).t()
            return lambda: F.gelu(a)
        out.append(Fam(f"gelu {s} transposed view", "gelu", dt, gelut, ("bytes", 2 * R * C * esz[dt])))

    def cast(src, dst):
        def setup(dev):
            a = rnd(N, src, dev, 4)
            return lambda: a.to(dst)
        return setup
    out.append(Fam("cast f32 -> bf16", "cast", bf16, cast(f32, bf16), ("bytes", N * 6)))
    out.append(Fam("cast bf16 -> f32", "cast", bf16, cast(bf16, f32), ("bytes", N * 6)))

    for cols, rows in ((1024, max(4, int(65536 * scale))), (50257, max(4, int(1024 * scale)))):
        def sm(dev, rows=rows, cols=cols):
            a = rnd((rows, cols), f32, dev, 5)
            return lambda: torch.softmax(a, -1)
        out.append(Fam(f"softmax f32 rows of {cols}", "softmax", f32, sm, ("bytes", 2 * rows * cols * 4)))

    LR, LC = max(4, int(16384 * scale)), 768
    for dt in (f32, bf16):
        s = "f32" if dt is f32 else "bf16"

        def ln(dev, dt=dt):
            x = rnd((LR, LC), dt, dev, 6, requires_grad=True)
            w, b = rnd(LC, dt, dev, 7, True), rnd(LC, dt, dev, 8, True)
            gy = rnd((LR, LC), dt, dev, 9)

            def f():
                y = F.layer_norm(x, (LC,), w, b)
                return (y,) + torch.autograd.grad(y, (x, w, b), gy)
            return f
        # forward reads x, writes y; backward reads x, dy, writes dx
        out.append(Fam(f"layer_norm {s} fwd+bwd [{LR},{LC}]", "layer_norm", dt, ln, ("bytes", 5 * LR * LC * esz[dt])))

        def rms(dev, dt=dt):
            x = rnd((LR, LC), dt, dev, 6, requires_grad=True)
            w = rnd(LC, dt, dev, 7, True)
            gy = rnd((LR, LC), dt, dev, 9)

            def f():
                y = F.rms_norm(x, (LC,), w, 1e-6)
                return (y,) + torch.autograd.grad(y, (x, w), gy)
            return f
        out.append(Fam(f"rms_norm {s} fwd+bwd [{LR},{LC}]", "rms_norm", dt, rms, ("bytes", 5 * LR * LC * esz[dt])))

    CR, V = max(4, int(4096 * scale)), 50257
    for dt in (f32, bf16):
        s = "f32" if dt is f32 else "bf16"

        def ce(dev, dt=dt):
            x = rnd((CR, V), dt, dev, 10, requires_grad=True)
            g = torch.Generator().manual_seed(11)
            t = torch.randint(0, V, (CR,), generator=g).to(dev)

            def f():
                loss = F.cross_entropy(x, t)
                return (loss,) + torch.autograd.grad(loss, (x,))
            return f
        out.append(Fam(f"cross_entropy {s} fwd+bwd over {V}", "cross_entropy", dt, ce,
                       ("bytes", 3 * CR * V * esz[dt])))

    def sum_all(dev):
        a = rnd(N, f32, dev, 12)
        return lambda: a.sum()
    out.append(Fam("sum f32 all", "sum", f32, sum_all, ("bytes", N * 4)))

    def sum_last(dev):
        a = rnd((R, C), f32, dev, 12)
        return lambda: a.sum(-1)
    out.append(Fam("sum f32 over last dim", "sum", f32, sum_last, ("bytes", R * C * 4)))

    def dropout(dev):
        a = rnd(N, f32, dev, 13, lo=1.0)     # > 0: a zero of the result is a dropped element
        return lambda: F.dropout(a, 0.1, training=True)
    out.append(Fam("dropout f32 p=0.1", "dropout", f32, dropout, ("bytes", 2 * N * 4), check="dropped"))

    # T = 1024 (GPT-2) and 4096 at the same tokens per batch (B x T)
    for B, H, T, D in ((8, 12, max(16, int(1024 * math.sqrt(scale))), 64),
                       (2, 12, max(32, int(4096 * math.sqrt(scale))), 64)):
        for dt in (bf16, f32):
            s = "f32" if dt is f32 else "bf16"

            def sdpa(dev, dt=dt, B=B, H=H, T=T, D=D):
                q, k, v = (rnd((B, H, T, D), dt, dev, 14 + i, True) for i in range(3))
                go = rnd((B, H, T, D), dt, dev, 17)

                def f():
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    return (o,) + torch.autograd.grad(o, (q, k, v), go)
                return f
            # causal: half of QK^T and PV forward (4BHT^2D/2), backward 2.5x that
            out.append(Fam(f"sdpa {s} causal fwd+bwd B{B} H{H} T{T} D{D}", "sdpa", dt, sdpa,
                           ("flops", 3.5 * 2 * B * H * T * T * D)))

    shapes = gpt2_param_shapes(scale)
    numel = sum(math.prod(s) for s in shapes)
    for kind in ("foreach", "fused"):
        def adamw(dev, kind=kind):
            ps = [rnd(s, f32, dev, 20 + i) for i, s in enumerate(shapes)]
            for i, p in enumerate(ps):
                p.requires_grad_()
                p.grad = rnd(p.shape, f32, dev, 1000 + i) * 0.01
            opt = torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.1, **{kind: True})

            def f():
                opt.step()
                return ps
            return f
        # reads p, g, m, v; writes p, m, v
        out.append(Fam(f"AdamW {kind} {numel / 1e6:.1f} M params ({len(shapes)} tensors)", "adamw", f32, adamw,
                       ("bytes", 7 * numel * 4)))

    # ResNet-50's convolutions (batch 32 at scale 1; below 1 the batch scales
    # by sqrt(scale), sides and channels by scale^(1/4)): (Cin, Cout, k, stride, side)
    CN, cs = max(2, int(32 * scale ** 0.5)), min(1.0, scale ** 0.25)
    R50 = ((3, 64, 7, 2, 224), (64, 64, 3, 1, 56), (64, 256, 1, 1, 56), (128, 128, 3, 2, 56), (256, 256, 3, 1, 14),
           (1024, 256, 1, 1, 14), (512, 512, 3, 1, 7))
    for ci0, co0, k, st, side0 in R50:
        ci, co, side = max(4, int(ci0 * cs)), max(4, int(co0 * cs)), max(4, int(side0 * cs))
        so = (side + 2 * (k // 2) - k) // st + 1
        for dt in (f32, bf16):
            s = "f32" if dt is f32 else "bf16"

            def conv(dev, dt=dt, ci=ci, co=co, k=k, st=st, side=side, so=so):
                x = rnd((CN, ci, side, side), dt, dev, 30, True)
                w = rnd((co, ci, k, k), dt, dev, 31, True)
                gy = rnd((CN, co, so, so), dt, dev, 32)

                def f():
                    y = F.conv2d(x, w, stride=st, padding=k // 2)
                    return (y,) + torch.autograd.grad(y, (x, w), gy)
                return f
            out.append(Fam(f"conv2d {s} {k}x{k}/{st} fwd+bwd N{CN} {ci}->{co} {side}x{side}", "conv2d", dt, conv,
                           ("flops", 3 * 2 * CN * ci * co * k * k * so * so)))

    M = d(4096, 16)
    for dt in (f32, bf16):
        s = "f32" if dt is f32 else "bf16"

        def mm(dev, dt=dt):
            a, b = rnd((M, M), dt, dev, 40) / 8, rnd((M, M), dt, dev, 41) / 8
            return lambda: a @ b
        out.append(Fam(f"matmul {s} {M}^3", "matmul", dt, mm, ("flops", 2 * M ** 3)))
    return out


def gpt2_param_shapes(scale):
    """The parameter shapes of GPT-2-small (124 M; nanoGPT's layout), the widths
    scaled by sqrt(scale) and the vocabulary by scale."""
    E = max(8, int(768 * math.sqrt(scale)) // 8 * 8)
    V, P, L = max(16, int(50257 * scale)), max(8, int(1024 * scale)), 12
    sh = [(V, E), (P, E)]
    for _ in range(L):
        sh += [(E,), (E,), (3 * E, E), (3 * E,), (E, E), (E,), (E,), (E,), (4 * E, E), (4 * E,), (E, 4 * E), (E,)]
    return sh + [(E,), (E,)]


def checksum(res, how):
    import torch
    ts = res if isinstance(res, (list, tuple)) else [res]
    ts = [t.detach().to("cpu").double().reshape(-1) for t in ts]
    x = torch.cat(ts)
    if how == "dropped":
        return {"dropped": float((x == 0).double().mean())}
    return {"sum": float(x.sum()), "abs": float(x.abs().sum()), "finite": bool(torch.isfinite(x).all())}


def timed(fn, sync, min_s, max_iters):
    """Seconds per call: one warm-up call, one timed call to size the loop, then a
    loop of calls ended by one synchronize."""
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    one = time.perf_counter() - t0
    iters = max(1, min(max_iters, int(min_s / max(one, 1e-7))))
    t0 = time.perf_counter()
    for _ in range(iters):
        r = fn()
    del r
    sync()
    return (time.perf_counter() - t0) / iters, iters


def model_steps(a, dev, sync, emit):
    """GPT-2-small and nanoGPT training steps, eager and compiled (random tokens)."""
    import contextlib
    import torch
    from models import gpt
    cfgs = {"gpt2": dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, batch=8),
            "nanogpt": dict(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384, batch=64),
            "tiny": dict(vocab_size=65, block_size=32, n_layer=2, n_head=2, n_embd=64, batch=4)}
    dev_type = "cuda" if dev.startswith("cuda") else dev
    amp = a.model_dtype == "bf16"
    for name in [m for m in a.models.split(",") if m]:
        c = dict(cfgs[name])
        batch = c.pop("batch")
        for compiled in ([False, True] if a.compile else [False]):
            label = f"{name} train step{' compiled' if compiled else ''}{' (bf16 autocast)' if amp else ''}"
            t_start = time.perf_counter()
            try:
                torch.manual_seed(0)
                cfg = gpt.GPTConfig(**c)
                model = gpt.GPT(cfg).to(dev)
                if compiled and dev == "rgpu":
                    opt = model.configure_optimizer(lr=1e-4, foreach=True, capturable=True)
                else:
                    opt = model.configure_optimizer(lr=1e-4)
                fwd = model

                def update():
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                if compiled:
                    fwd = torch.compile(model, backend="rgpu") if dev == "rgpu" else torch.compile(model)
                    if dev == "rgpu":
                        update = torch.compile(update, backend="rgpu")
                g = torch.Generator().manual_seed(0)
                xs = [torch.randint(0, cfg.vocab_size, (batch, cfg.block_size + 1), generator=g)
                      for _ in range(a.model_iters + 2)]

                def step(xy):
                    x, y = xy[:, :-1].contiguous().to(dev), xy[:, 1:].contiguous().to(dev)
                    with torch.autocast(dev_type, dtype=torch.bfloat16) if amp else contextlib.nullcontext():
                        _, loss = fwd(x, y)
                    loss.backward()
                    update()
                    opt.zero_grad(set_to_none=True)
                    return loss
                first = float(step(xs[0]))
                step(xs[1])
                sync()
                t0 = time.perf_counter()
                for xy in xs[2:]:
                    loss = step(xy)
                sync()
                dt = (time.perf_counter() - t0) / a.model_iters
                emit({"name": label, "group": "model", "s": dt, "iters": a.model_iters,
                      "check": {"loss": first}, "setup_s": time.perf_counter() - t_start - dt * a.model_iters,
                      "tokens_per_s": batch * cfg.block_size / dt, "params": model.num_params(),
                      "last_loss": float(loss)})
            except Exception as e:          # report it; the other lines still run
                emit({"name": label, "group": "model", "error": f"{type(e).__name__}: {str(e)[:300]}"})
            finally:
                model = opt = fwd = update = None
                if dev_type == "cuda":
                    torch.cuda.empty_cache()


def child(a):
    import torch
    dev = a.torch_device if a.child == "torch" else "rgpu"
    if dev == "rgpu":
        import rgpu
        info = rgpu.connect()
        sync = torch.rgpu.synchronize
        print("INFO " + json.dumps({"backend": info.get("backend")}), flush=True)
    elif dev.startswith("cuda"):
        sync = torch.cuda.synchronize
        print("INFO " + json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
    else:
        def sync():
            pass
        print("INFO " + json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads()}), flush=True)

    def emit(r):
        print("RESULT " + json.dumps(r), flush=True)

    want = set(a.families.split(",")) if a.families else None
    for fam in families(a.scale):
        if want and fam.group not in want:
            continue
        try:
            s, iters = timed(fam.setup(dev), sync, a.min_s, a.max_iters)
            chk = checksum(fam.setup(dev)(), fam.check)     # a fresh state: one call's result
            emit({"name": fam.name, "group": fam.group, "dtype": str(fam.dtype).split(".")[-1], "s": s,
                  "iters": iters, "work": fam.work, "check": chk})
        except Exception as e:
            emit({"name": fam.name, "group": fam.group, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        if dev.startswith("cuda"):
            torch.cuda.empty_cache()
    if a.models:
        model_steps(a, dev, sync, emit)


# --- parent ------------------------------------------------------------------------------

def run_side(a, which, deadline, env_extra=None):
    """Run one side's child until it ends or the deadline; its RESULT lines, in order
    (those printed before a timeout included), and its INFO."""
    env = dict(os.environ)
    env.pop("RGPU_SERVER", None)
    env.update(env_extra or {})
    env["PYTHONPATH"] = os.path.join(REPO, "torchhook") + os.pathsep + env.get("PYTHONPATH", "")
    argv = [sys.executable, os.path.abspath(__file__), "--child", which] + a.passthrough
    res, info, tail = [], {}, []
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                p.kill()
                res.append({"name": "(the rest)", "group": "-", "error": f"{which}: out of time budget"})
                break
            if not sel.select(timeout=min(left, 5)):
                continue
            line = p.stdout.readline()
            if not line:
                break
            if line.startswith("RESULT "):
                res.append(json.loads(line[7:]))
            elif line.startswith("INFO "):
                info = json.loads(line[5:])
            else:
                tail = (tail + [line.rstrip()])[-20:]
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    if p.returncode not in (0, -9) and not res:
        sys.stderr.write("\n".join(tail) + "\n")
        raise SystemExit(f"{which}: child failed ({p.returncode})")
    if p.returncode not in (0, -9):
        res.append({"name": "(the rest)", "group": "-", "error": f"{which} child exited {p.returncode}: "
                    + " | ".join(tail[-3:])})
    return res, info


def agree(ra, rb):
    """(ok, how far): the two sides' checksums within the dtype's tolerance."""
    ca, cb = ra.get("check"), rb.get("check")
    if not ca or not cb:
        return None, None
    if "dropped" in ca:
        d = abs(ca["dropped"] - cb["dropped"])
        return d <= 0.02, d
    if "loss" in ca:
        d = abs(ca["loss"] - cb["loss"]) / max(abs(cb["loss"]), 1e-12)
        return d <= TOL["loss"], d
    if not (ca["finite"] and cb["finite"]):
        return False, float("inf")
    d = abs(ca["sum"] - cb["sum"]) / max(cb["abs"], 1e-30)
    return d <= TOL.get(rb.get("dtype", "float32"), 1e-4), d


def fmt_rate(r):
    w = r.get("work")
    if not w or "s" not in r:
        return "", None
    kind, amount = w
    v = amount / r["s"]
    return (f"{v / 1e9:8.1f} GB/s" if kind == "bytes" else f"{v / 1e12:7.2f} TFLOP/s"), v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torch-device", default="cuda", help="PyTorch's side (default cuda)")
    ap.add_argument("--backend", default="cuda", help="the rgpu-server backend of rgpu's side (default cuda)")
    ap.add_argument("--scale", type=float, default=1.0, help="element counts x SCALE (matrix sides x sqrt)")
    ap.add_argument("--families", default="", help="comma-separated groups (add,gelu,cast,softmax,layer_norm,"
                    "rms_norm,cross_entropy,sum,dropout,sdpa,adamw,conv2d,matmul); default all")
    ap.add_argument("--models", default="gpt2,nanogpt", help="training steps: gpt2, nanogpt, tiny (comma-separated)")
    ap.add_argument("--no-models", action="store_true")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="eager steps only")
    ap.add_argument("--model-dtype", default="bf16", choices=["bf16", "f32"], help="bf16: under autocast")
    ap.add_argument("--model-iters", type=int, default=5)
    ap.add_argument("--min-s", type=float, default=0.2, help="per family and side, the timed loop's length")
    ap.add_argument("--max-iters", type=int, default=200)
    ap.add_argument("--budget", type=float, default=280, help="seconds for the whole run; later lines are skipped")
    ap.add_argument("--json", default="gpu-bench.json")
    ap.add_argument("--child", choices=["torch", "rgpu"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.no_models:
        a.models = ""
    if a.child:
        return child(a)
    a.passthrough = [f"--torch-device={a.torch_device}", f"--scale={a.scale}", f"--families={a.families}",
                     f"--models={a.models}", f"--model-dtype={a.model_dtype}", f"--model-iters={a.model_iters}",
                     f"--min-s={a.min_s}", f"--max-iters={a.max_iters}"] + ([] if a.compile else ["--no-compile"])
    t_end = time.monotonic() + a.budget
    # PyTorch first, then rgpu, each with up to half of what is left: one process
    # on the GPU at a time
    tres, tinfo = run_side(a, "torch", time.monotonic() + a.budget * 0.45)
    from benchsrv import start_unix_server, stop_unix_server
    exe = os.environ.get("RGPU_SERVER_BIN", os.path.join(REPO, "build", "bin", "rgpu-server"))
    proc, tmp, env = start_unix_server(exe, a.backend)
    try:
        rres, rinfo = run_side(a, "rgpu", t_end, env)
    finally:
        stop_unix_server(proc, tmp)

    by_name = {r["name"]: r for r in tres}
    rows = []
    hdr = (f"{'family':46s} {'PyTorch ' + a.torch_device:>14s} {'':>15s}   {'rgpu ' + str(rinfo.get('backend')):>14s}"
           f" {'':>15s}   {'rgpu/PyTorch':>12s}  agree")
    print(f"PyTorch: {tinfo}   rgpu server: --backend {a.backend} ({rinfo.get('backend')})   scale {a.scale}")
    print(hdr)
    print("-" * len(hdr))
    names = [r["name"] for r in tres] + [r["name"] for r in rres if r["name"] not in by_name]
    rby = {r["name"]: r for r in rres}
    for nm in names:
        t, r = by_name.get(nm, {}), rby.get(nm, {})
        row = {"name": nm, "group": t.get("group") or r.get("group"), "torch": t, "rgpu": r}
        ts, (trate, tv) = (f"{t['s'] * 1e3:10.3f} ms" if "s" in t else f"{'-':>13s}"), fmt_rate(t)
        rs, (rrate, rv) = (f"{r['s'] * 1e3:10.3f} ms" if "s" in r else f"{'-':>13s}"), fmt_rate(r)
        if t.get("group") == "model" and "s" in t:
            ts, trate = f"{t['s']:10.4f} s ", f"{t['tokens_per_s'] / 1e3:8.1f} ktok/s"
        if r.get("group") == "model" and "s" in r:
            rs, rrate = f"{r['s']:10.4f} s ", f"{r['tokens_per_s'] / 1e3:8.1f} ktok/s"
        ratio = t["s"] / r["s"] if "s" in t and "s" in r else None   # rgpu's throughput / PyTorch's
        ok, dist = agree(r, t) if t and r else (None, None)
        row.update(ratio=ratio, agree=ok, distance=dist)
        rows.append(row)
        err = t.get("error") or r.get("error")
        print(f"{nm[:46]:46s} {ts:>14s} {trate:>15s}   {rs:>14s} {rrate:>15s}   "
              + (f"{ratio:11.2f}x" if ratio else f"{'-':>12s}")
              + ("  yes" if ok else "  NO " if ok is False else "  -  ")
              + (f" ({dist:.1e})" if dist is not None else "")
              + (f"   error: {err}" if err else ""))
    ratios = [x["ratio"] for x in rows if x["ratio"] and x["group"] != "model"]
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"families: geometric mean of rgpu/PyTorch throughput {geo:.2f}x over {len(ratios)} lines; "
              f"lowest {min(ratios):.2f}x ({min(rows, key=lambda x: x['ratio'] or 1e9)['name']}); "
              f"{sum(1 for x in ratios if x >= 0.8)} of {len(ratios)} at >= 0.8x")
    bad = [x["name"] for x in rows if x["agree"] is False]
    errs = [x["name"] for x in rows if x["torch"].get("error") or x["rgpu"].get("error")]
    if bad:
        print(f"DISAGREE: {', '.join(bad)}")
    if errs:
        print(f"ERRORS: {', '.join(errs)}")
    with open(a.json, "w") as f:
        json.dump({"torch": tinfo, "rgpu": rinfo, "args": vars(a), "rows": rows}, f, indent=1)
    print(f"wrote {a.json}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
