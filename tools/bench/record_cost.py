"""The cpu backend's cost per record on tiny tensors, next to the null backend
(`rgpu-server --backend null`: decodes and validates every record, executes
nothing), side by side in one run.

Cases, on 4x4 float32 tensors: x + y, x * 2.5, x.sum(0), and a mixed
sequence of 10 ops (add, mul by scalar, relu, exp, sub, mm, transpose copy,
sum(0), neg, div). Two measurements per case:

  live    µs of wall time per record in a client looping the case against a
          server of each backend (the loop ends with rgpu.synchronize()); the
          client's cost is the same for both, so cpu - null is what executing
          costs the server per record (when the server keeps up, it hides
          behind the client: the difference then reads near 0);
  replay  the same records, recorded once (RGPU_RECORD), replayed by
          rgpu-replay --backend cpu and --backend null: server time only, µs
          per record; their ratio is issue 33's "within 2x of the null
          backend".

Median of 3 runs each. The server is $RGPU_SERVER_BIN, else this checkout's
build/bin/rgpu-server; rgpu-replay the one beside it.

    python tools/bench/record_cost.py [--n 20000] [--threads N]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

from benchsrv import start_unix_server, stop_unix_server  # noqa: E402
SERVER = os.environ.get("RGPU_SERVER_BIN", os.path.join(REPO, "build", "bin", "rgpu-server"))
REPLAY = os.path.join(os.path.dirname(os.path.abspath(SERVER)), "rgpu-replay")
CASES = ("add", "mul_scalar", "sum0", "mixed10")


# --- child: one backend, every case ---------------------------------------------------

def case_fn(name, x, y):
    if name == "add":
        return lambda: x + y
    if name == "mul_scalar":
        return lambda: x * 2.5
    if name == "sum0":
        return lambda: x.sum(0)

    def mixed():
        a = x + y
        b = a * 2.5
        c = b.relu()
        d = c.exp()
        e = d - x
        f = e @ y
        g = f.t().contiguous()
        h = g.sum(0)
        i = h.neg()
        return i / 3.0
    return mixed


def child(a):
    import torch
    import rgpu
    rgpu.connect()
    x = torch.randn(4, 4).to("rgpu")
    y = torch.randn(4, 4).to("rgpu")
    out = {}
    for name in a.cases.split(","):
        fn = case_fn(name, x, y)
        for _ in range(200):                      # warm-up
            fn()
        rgpu.synchronize()
        per = []
        for _ in range(a.reps):
            o0 = rgpu.stats()["ops"]
            t = time.perf_counter()
            for _ in range(a.n // (10 if name == "mixed10" else 1)):
                fn()
            rgpu.synchronize()
            dt = time.perf_counter() - t
            per.append(dt / max(rgpu.stats()["ops"] - o0, 1) * 1e6)
        out[name] = statistics.median(per)
    print("RESULT " + json.dumps(out), flush=True)


# --- parent ---------------------------------------------------------------------------

def start_server(backend, threads):
    return start_unix_server(SERVER, backend, *(["--threads", str(threads)] if threads else []))


def run_child(a, backend, record=None, cases=CASES):
    proc, tmp, srv_env = start_server(backend, a.threads)
    try:
        env = dict(os.environ, **srv_env)
        env["PYTHONPATH"] = os.path.join(REPO, "torchhook") + os.pathsep + env.get("PYTHONPATH", "")
        env.pop("RGPU_RECORD", None)
        if record:
            env["RGPU_RECORD"] = record
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", f"--n={a.n}",
                            f"--reps={1 if record else a.reps}", "--cases=" + ",".join(cases)], env=env, capture_output=True, text=True)
    finally:
        stop_unix_server(proc, tmp)
    if p.returncode != 0:
        raise SystemExit(f"{backend}: child failed\n{p.stdout}{p.stderr}")
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"{backend}: no result\n{p.stdout}{p.stderr}")


def replay_us(trace, backend, threads, reps):
    """µs per record of rgpu-replay --backend B (its summary line's ops and wall time)."""
    per = []
    for _ in range(reps):
        cmd = [REPLAY, trace, "--backend", backend]
        if threads:
            cmd += ["--threads", str(threads)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"rgpu-replay --backend {backend} failed:\n{r.stdout}{r.stderr}")
        m = re.search(r"(\d+) ops in ([\d.]+) s", r.stdout)   # the summary line: replay time only
        if not m:
            raise SystemExit(f"rgpu-replay: no summary line in\n{r.stdout}")
        ops = int(m.group(1))
        per.append(float(m.group(2)) / max(ops, 1) * 1e6)
    return statistics.median(per), ops


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000, help="records per case and measurement")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="the cpu backend's --threads (default: its own)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cases", default=",".join(CASES), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)

    live = {b: run_child(a, b) for b in ("cpu", "null")}
    print(f"live: µs of wall time per record, 4x4 float32, {a.n} records per case, median of {a.reps}")
    print(f"{'case':12s} {'cpu':>8s} {'null':>8s} {'cpu-null':>9s} {'cpu/null':>9s}")
    for c in CASES:
        cu, nu = live["cpu"][c], live["null"][c]
        print(f"{c:12s} {cu:8.2f} {nu:8.2f} {cu - nu:9.2f} {cu / nu:8.2f}x")

    # replay: each case recorded alone (its warm-up included), replayed on each backend
    tmp = tempfile.mkdtemp(prefix="rgpu-bench-trace-")
    rep = {}
    print(f"replay: µs per record of rgpu-replay (server time only), median of {a.reps}")
    print(f"{'case':12s} {'cpu':>8s} {'null':>8s} {'cpu-null':>9s} {'cpu/null':>9s} {'records':>8s}")
    try:
        for c in CASES:
            trace = os.path.join(tmp, c + ".rgt")
            run_child(a, "null", record=trace, cases=(c,))
            cu, ops = replay_us(trace, "cpu", a.threads, a.reps)
            nu, _ = replay_us(trace, "null", a.threads, a.reps)
            rep[c] = {"records": ops, "cpu_us": cu, "null_us": nu}
            print(f"{c:12s} {cu:8.3f} {nu:8.3f} {cu - nu:9.3f} {cu / nu:8.2f}x {ops:8d}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"live": live, "replay": rep}, f, indent=1)


if __name__ == "__main__":
    main()
