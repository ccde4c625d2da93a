"""Per-family micro-benchmark of the cpu backend: rgpu (its own rgpu-server
--backend cpu --threads T) against PyTorch CPU eager on the same tensors and
the same thread count T (torch.set_num_threads), side by side in one run.

Each family is one op (or one forward+backward, or one optimizer step) on
float32 tensors of training sizes. Timing: the op runs K times (K chosen so a
measurement takes >= 0.2 s), then rgpu synchronises (rgpu.synchronize(): the
server has executed every record); nothing is subtracted, so rgpu's per-op
time includes the client's recording. Three measurements of each side,
alternating torch and rgpu (a noisy neighbour slows both alike), the median.
Throughput is bytes read + written per op (GB/s), or GFLOP/s for the
GEMM-like families. The last column is the largest |rgpu - torch| relative to
max |torch| of the first output (a benchmark that measures a wrong result is
no benchmark).

    python tools/bench/cpu_kernels.py                       # every family, torch's thread count
    python tools/bench/cpu_kernels.py --families add,softmax,mm --threads 2 --json out.json
    python tools/bench/cpu_kernels.py --compare /work/main/build/bin/rgpu-server,build/bin/rgpu-server
                                                            # before/after side by side in one run

The server is --server-bin, else $RGPU_SERVER_BIN, else this checkout's
build/bin/rgpu-server. --compare A,B runs the families against each server in
turn (a child process each) and prints their ms/op side by side with [1]/[0].
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "torchhook"))

import torch                              # noqa: E402
from benchsrv import start_unix_server, stop_unix_server  # noqa: E402
import torch.nn.functional as F           # noqa: E402

MIN_TIME = 0.2
REPS = 3
F32 = 4


# --- families -------------------------------------------------------------------------
# Each builder takes the device and returns (fn, inputs, work): fn(*inputs) runs one op
# and returns its output(s); work is ("GB", bytes) or ("GFLOP", flops) per call. Inputs
# are made on the CPU from a fixed seed and moved to the device, so both sides see the
# same values.

def _rand(*shape, dev, seed=0, scale=1.0, grad=False):
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(*shape, generator=g) * scale).to(dev)
    return t.requires_grad_(grad) if grad else t


def _idx(n, hi, dev, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, hi, (n,), generator=g).to(dev)


N4M = 4 * 1024 * 1024
R, C = 4096, 1024


def f_add(dev):
    a, b = _rand(N4M, dev=dev), _rand(N4M, dev=dev, seed=1)
    return (lambda a, b: a + b), (a, b), ("GB", 3 * N4M * F32)


def f_mul_scalar(dev):
    return (lambda a: a * 2.5), (_rand(N4M, dev=dev),), ("GB", 2 * N4M * F32)


def f_bias_add(dev):
    a, b = _rand(R, C, dev=dev), _rand(C, dev=dev, seed=1)
    return (lambda a, b: a + b), (a, b), ("GB", (2 * R * C + C) * F32)


def f_gelu(dev):
    return (lambda a: F.gelu(a)), (_rand(N4M, dev=dev),), ("GB", 2 * N4M * F32)


def f_exp(dev):
    return (lambda a: a.exp()), (_rand(N4M, dev=dev),), ("GB", 2 * N4M * F32)


def f_transpose_copy(dev):
    return (lambda a: a.t().contiguous()), (_rand(R, C, dev=dev),), ("GB", 2 * R * C * F32)


def f_cast_bf16(dev):
    return (lambda a: a.to(torch.bfloat16)), (_rand(N4M, dev=dev),), ("GB", N4M * (F32 + 2))


def f_sum_last(dev):
    return (lambda a: a.sum(-1)), (_rand(R, C, dev=dev),), ("GB", (R * C + R) * F32)


def f_sum_dim0(dev):
    return (lambda a: a.sum(0)), (_rand(R, C, dev=dev),), ("GB", (R * C + C) * F32)


def f_sum_all(dev):
    return (lambda a: a.sum()), (_rand(N4M, dev=dev),), ("GB", N4M * F32)


def f_softmax(dev):
    return (lambda a: F.softmax(a, -1)), (_rand(R, C, dev=dev),), ("GB", 2 * R * C * F32)


def f_log_softmax(dev):
    return (lambda a: F.log_softmax(a, -1)), (_rand(R, C, dev=dev),), ("GB", 2 * R * C * F32)


def _ln_inputs(dev):
    return _rand(R, C, dev=dev), _rand(C, dev=dev, seed=1) * 0.1 + 1, _rand(C, dev=dev, seed=2) * 0.1


def f_layer_norm_fwd(dev):
    x, w, b = _ln_inputs(dev)
    return (lambda x, w, b: F.layer_norm(x, (C,), w, b)), (x, w, b), ("GB", 2 * R * C * F32)


def f_layer_norm_bwd(dev):
    """aten.native_layer_norm_backward alone (gy, x, mean, rstd, w -> dx, dw, db)."""
    x, w, b = _ln_inputs(dev)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [C], w, b, 1e-5)
    gy = _rand(R, C, dev=dev, seed=3)

    def fn(gy, x, mean, rstd, w, b):
        return torch.ops.aten.native_layer_norm_backward(gy, x, [C], mean, rstd, w, b, [True, True, True])
    return fn, (gy, x, mean, rstd, w, b), ("GB", 3 * R * C * F32)


def f_cross_entropy(dev):
    """forward + backward: (512, 50000) logits, mean over the rows; d logits."""
    rows, vocab = 512, 50000
    logits = _rand(rows, vocab, dev=dev, grad=True)
    t = _idx(rows, vocab, dev)

    def fn(logits, t):
        loss = F.cross_entropy(logits, t)
        (g,) = torch.autograd.grad(loss, (logits,))
        return g
    return fn, (logits, t), ("GB", 3 * rows * vocab * F32)


EMB_V, EMB_D, EMB_N = 50000, 768, 16 * 128


def f_embedding_fwd(dev):
    w, i = _rand(EMB_V, EMB_D, dev=dev), _idx(EMB_N, EMB_V, dev)
    return (lambda w, i: F.embedding(i, w)), (w, i), ("GB", 2 * EMB_N * EMB_D * F32)


def f_embedding_bwd(dev):
    """aten.embedding_dense_backward: (2048, 768) gradient into a (50000, 768) table."""
    g, i = _rand(EMB_N, EMB_D, dev=dev), _idx(EMB_N, EMB_V, dev)

    def fn(g, i):
        return torch.ops.aten.embedding_dense_backward(g, i, EMB_V, -1, False)
    return fn, (g, i), ("GB", (EMB_N * EMB_D + EMB_V * EMB_D) * F32)


def f_cat(dev):
    a, b = _rand(R // 2, C, dev=dev), _rand(R // 2, C, dev=dev, seed=1)
    return (lambda a, b: torch.cat([a, b], 0)), (a, b), ("GB", 2 * R * C * F32)


def f_index_select(dev):
    a, i = _rand(R, C, dev=dev), _idx(R, R, dev)
    return (lambda a, i: a.index_select(0, i)), (a, i), ("GB", 2 * R * C * F32)


def f_mm(dev):
    n = 1024
    a, b = _rand(n, n, dev=dev), _rand(n, n, dev=dev, seed=1)
    return (lambda a, b: a @ b), (a, b), ("GFLOP", 2 * n ** 3)


def f_bmm_attn(dev):
    """q @ k^T of attention: (B*H=64, T=256, D=64) x (64, 64, 256)."""
    bh, t, d = 64, 256, 64
    q, k = _rand(bh, t, d, dev=dev), _rand(bh, t, d, dev=dev, seed=1)
    return (lambda q, k: torch.bmm(q, k.transpose(1, 2))), (q, k), ("GFLOP", 2 * bh * t * t * d)


def f_sdpa(dev):
    """causal F.scaled_dot_product_attention forward + backward (dq, dk, dv): (B=8, H=8, T=256, D=64); rgpu
    runs its fused SDPA records, PyTorch CPU its flash kernel. FLOPs: FlashAttention's count (4 B H T^2 D
    forward, 2.5x that backward), halved for causal."""
    b, h, t, d = 8, 8, 256, 64
    q, k, v = (_rand(b, h, t, d, dev=dev, seed=s, grad=True) for s in range(3))
    gy = _rand(b, h, t, d, dev=dev, seed=3)

    def fn(q, k, v, gy):
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return (y,) + torch.autograd.grad(y, (q, k, v), gy)
    return fn, (q, k, v, gy), ("GFLOP", 3.5 * 4 * b * h * t * t * d / 2)


CONV_N, CONV_C, CONV_S = 32, 64, 32


def f_conv2d(dev):
    """forward + backward (d input, d weight): batch 32, 64 -> 64 channels, 32x32, 3x3, padding 1."""
    x = _rand(CONV_N, CONV_C, CONV_S, CONV_S, dev=dev, grad=True)
    w = _rand(CONV_C, CONV_C, 3, 3, dev=dev, seed=1, scale=0.05, grad=True)
    gy = _rand(CONV_N, CONV_C, CONV_S, CONV_S, dev=dev, seed=2)

    def fn(x, w, gy):
        y = F.conv2d(x, w, padding=1)
        return torch.autograd.grad(y, (x, w), gy)
    flops = 2 * CONV_N * CONV_C * CONV_S * CONV_S * CONV_C * 9
    return fn, (x, w, gy), ("GFLOP", 3 * flops)


def f_max_pool2d(dev):
    x = _rand(CONV_N, CONV_C, CONV_S, CONV_S, dev=dev)
    n = x.numel()
    return (lambda x: F.max_pool2d(x, 2)), (x,), ("GB", (n + n // 4) * F32)


def _adamw(dev, foreach):
    ps = [_rand(1 << 20, dev=dev, seed=s).requires_grad_() for s in range(10)]
    for s, p in enumerate(ps):
        p.grad = _rand(1 << 20, dev=dev, seed=100 + s, scale=1e-2)
    opt = torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, foreach=foreach)

    def fn(*ps):
        opt.step()
        return ps[0]
    # per element: read p, g, m, v; write p, m, v
    return fn, tuple(ps), ("GB", 10 * (1 << 20) * 7 * F32)


def f_adamw(dev):
    return _adamw(dev, False)


def f_adamw_foreach(dev):
    return _adamw(dev, True)


FAMILIES = {name[2:]: fn for name, fn in list(globals().items()) if name.startswith("f_")}


# --- timing ---------------------------------------------------------------------------

def _time(fn, inputs, sync, k):
    t = time.perf_counter()
    for _ in range(k):
        out = fn(*inputs)
    del out
    sync()
    return time.perf_counter() - t


def calibrate(fn, inputs, sync):
    """K: calls per measurement so that one takes >= MIN_TIME."""
    _time(fn, inputs, sync, 1)                          # warm-up: allocations, caches
    one = _time(fn, inputs, sync, 1)
    return max(1, min(10000, math.ceil(MIN_TIME / max(one, 1e-7))))


def _first(out):
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


def start_server(threads, exe):
    p, d, env = start_unix_server(exe, "cpu", "--threads", str(threads))
    os.environ.update(env)
    return p, d


def run_families(names, threads, exe, show=True):
    """Every family of names against one server (this process's connection): result rows."""
    proc, tmp = start_server(threads, exe)
    try:
        import rgpu
        rgpu.connect()
        if show:
            print(f"float32, {threads} threads (rgpu-server --threads {threads}, torch.set_num_threads({threads})); "
                  f"ms per op, median of 3 runs of >= {MIN_TIME} s; server {exe}")
            print(f"{'family':18s} {'rgpu ms':>9s} {'torch ms':>9s} {'rgpu':>8s} {'torch':>8s} {'unit':6s} "
                  f"{'rgpu/torch':>10s} {'err':>8s}")
        results = []
        for name in names:
            row = {"family": name, "threads": threads}
            try:
                fn_c, xin_c, (unit, work) = FAMILIES[name]("cpu")
                ref = _first(fn_c(*xin_c)).detach().clone()   # (an optimizer returns its parameter, stepped again below)
                fn_r, xin_r, _ = FAMILIES[name]("rgpu")
                got = _first(fn_r(*xin_r))
                err = (got.cpu().float() - ref.float()).abs().max().item() / max(ref.float().abs().max().item(), 1e-30)
                del got, ref
                k_cpu = calibrate(fn_c, xin_c, lambda: None)
                k_rgpu = calibrate(fn_r, xin_r, rgpu.synchronize)
                # the two sides alternate, so that a noisy neighbour slows both alike
                tc, tr = [], []
                for _ in range(REPS):
                    tc.append(_time(fn_c, xin_c, lambda: None, k_cpu) / k_cpu)
                    tr.append(_time(fn_r, xin_r, rgpu.synchronize, k_rgpu) / k_rgpu)
                t_cpu, t_rgpu = statistics.median(tc), statistics.median(tr)
                del fn_c, xin_c, fn_r, xin_r
            except Exception as e:          # noqa: BLE001 - one family's failure is reported, the others run
                print(f"{name:18s} failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}", flush=True)
                row["error"] = f"{type(e).__name__}: {e}"
                results.append(row)
                continue
            row.update(rgpu_ms=t_rgpu * 1e3, torch_ms=t_cpu * 1e3, unit=f"{unit}/s",
                       rgpu_rate=work / t_rgpu / 1e9, torch_rate=work / t_cpu / 1e9,
                       ratio=t_rgpu / t_cpu, k_rgpu=k_rgpu, k_torch=k_cpu, rel_err=err)
            results.append(row)
            if show:
                print(f"{name:18s} {row['rgpu_ms']:9.3f} {row['torch_ms']:9.3f} {row['rgpu_rate']:8.2f} "
                      f"{row['torch_rate']:8.2f} {row['unit']:6s} {row['ratio']:9.2f}x {err:8.1e}", flush=True)
        ok = [r["ratio"] for r in results if "ratio" in r]
        if ok and show:
            print(f"geometric mean rgpu/torch over {len(ok)} families: {_gmean(ok):.2f}x")
        warn_load(threads)
        return results
    finally:
        stop_unix_server(proc, tmp)


def warn_load(threads):
    """PyTorch's OpenMP threads wait at barriers for a descheduled peer: on a
    machine busy with other work its times (and the ratios) are worthless."""
    load = os.getloadavg()[0]
    cores = len(os.sched_getaffinity(0))
    if load > max(cores, threads) + 1.5:         # the benchmark itself keeps about threads + 1 busy
        print(f"warning: load average {load:.1f} on {cores} cores during the run: "
              f"other processes competed for the cores, times are noisy (torch's most)")


def _gmean(v):
    return math.exp(sum(map(math.log, v)) / len(v))


def compare(a, names, threads, exes):
    """One child per server binary (a client connects once per process), the
    families in the same order in each; a table with each binary's ms/op."""
    runs = []
    for exe in exes:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--families", ",".join(names),
                                "--threads", str(threads), "--server-bin", exe, "--json", f.name, "--quiet"],
                               text=True)
            if r.returncode != 0:
                raise SystemExit(f"{exe}: the benchmark failed")
            runs.append({row["family"]: row for row in json.load(open(f.name))["results"]})
    print(f"float32, {threads} threads, ms per op (median of 3 runs of >= {MIN_TIME} s); "
          f"torch: the median of its runs beside each server")
    for i, exe in enumerate(exes):
        print(f"  [{i}] {exe}")
    head = f"{'family':18s} {'torch ms':>9s}" + "".join(f" {f'[{i}] ms':>9s} {f'[{i}]/torch':>10s}"
                                                       for i in range(len(exes)))
    if len(exes) > 1:
        head += f" {'[1]/[0]':>8s}"
    print(head)
    gm = [[] for _ in exes]
    for name in names:
        rows = [run.get(name, {}) for run in runs]
        if any("rgpu_ms" not in r for r in rows):
            print(f"{name:18s} failed: " + "; ".join(r.get("error", "?")[:60] for r in rows if "rgpu_ms" not in r))
            continue
        t = statistics.median(r["torch_ms"] for r in rows)
        line = f"{name:18s} {t:9.3f}"
        for i, r in enumerate(rows):
            line += f" {r['rgpu_ms']:9.3f} {r['rgpu_ms'] / t:9.2f}x"
            gm[i].append(r["rgpu_ms"] / t)
        if len(exes) > 1:
            line += f" {rows[1]['rgpu_ms'] / rows[0]['rgpu_ms']:7.2f}x"
        print(line, flush=True)
    if gm[0]:
        print("geometric mean rgpu/torch: " + ", ".join(f"[{i}] {_gmean(g):.2f}x" for i, g in enumerate(gm)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"threads": threads, "servers": exes, "runs": runs}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="", help="comma-separated, of: " + ",".join(FAMILIES))
    ap.add_argument("--threads", type=int, default=0, help="threads of both sides (default: torch's)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--server-bin", help="the rgpu-server to measure (default $RGPU_SERVER_BIN, "
                                         "else this checkout's build/bin/rgpu-server)")
    ap.add_argument("--compare", help="BIN[,BIN...]: before/after, one run: each rgpu-server in turn, "
                                      "ms/op side by side")
    ap.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    names = [f for f in a.families.split(",") if f] or list(FAMILIES)
    for f in names:
        if f not in FAMILIES:
            ap.error(f"unknown family {f} (known: {', '.join(FAMILIES)})")
    threads = a.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    if a.compare:
        return compare(a, names, threads, [os.path.abspath(e) for e in a.compare.split(",") if e])
    exe = a.server_bin or os.environ.get("RGPU_SERVER_BIN", os.path.join(REPO, "build", "bin", "rgpu-server"))
    results = run_families(names, threads, exe, show=not a.quiet)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"threads": threads, "server": exe, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
