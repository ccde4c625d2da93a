"""The server's host cost per record of a GPT training step (issue 27 item 5):
what rgpu-server spends per record besides the kernels, side by side for one
or more server builds in one run.

Two measurements:

  live    a client trains the reduced GPT (tests/cudaemu/gpt_trace.py's model)
          against `rgpu-server --backend null` (decodes, validates and
          executes every record's bookkeeping, runs no kernel); the server's
          CPU time over the steady steps (its threads' /proc schedstat, read
          while the client is connected) divided by the records of those
          steps: frame decompression, hashing, decoding, the session's tables,
          answers -- everything a record costs the server on any backend
          except the kernel itself;
  replay  the same steps recorded once, replayed by rgpu-replay --profile on
          null, and on cuda under the CUDA-on-CPU layer when it is built
          (build-emu/): the median and 90th percentile of the per-record host
          spans (a record's lookups, checks, allocation and launches; kernels
          run on the layer only at waits, so wait records are left out).

    python tools/bench/record_host.py [--steps 30] [--server PATH]...

--server (repeatable) names rgpu-server builds to compare, e.g. one built
from an older commit in a git worktree; default: this checkout's.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from benchsrv import start_unix_server, stop_unix_server  # noqa: E402

CLIENT = r'''
import os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "tools"))
import rgpu
from models.train import check_gpt
rgpu.connect()
step = check_gpt(dropout=0.0)
for _ in range(3):
    step().item()
print("WARM", rgpu.stats()["ops"], flush=True)
sys.stdin.readline()
for _ in range(int(sys.argv[2])):
    step().item()
rgpu.synchronize()
print("DONE", rgpu.stats()["ops"], flush=True)
sys.stdin.readline()
'''


def server_cpu_ns(pid):
    total = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(f) as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass   # a thread that just ended
    return total


def live(server, steps):
    proc, tmp, env = start_unix_server(server, "null")
    try:
        cenv = dict(os.environ, **env)
        for k in ("RGPU_RECORD", "RGPU_BACKEND", "RGPU_GRAPHS"):
            cenv.pop(k, None)
        c = subprocess.Popen([sys.executable, "-c", CLIENT, REPO, str(steps)], env=cenv, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        w = c.stdout.readline().split()
        t0, ops0 = server_cpu_ns(proc.pid), int(w[1])
        c.stdin.write("\n")
        c.stdin.flush()
        d = c.stdout.readline().split()
        t1, ops1 = server_cpu_ns(proc.pid), int(d[1])
        c.stdin.write("\n")
        c.stdin.flush()
        c.wait(60)
        return (t1 - t0) / 1e3 / (ops1 - ops0), ops1 - ops0
    finally:
        stop_unix_server(proc, tmp)


def record_trace(path, steps):
    env = dict(os.environ, RGPU_BACKEND="cpu", RGPU_RECORD=path)
    for k in ("RGPU_SERVER", "RGPU_GRAPHS"):
        env.pop(k, None)
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "cudaemu", "gpt_trace.py"), str(steps)],
                   env=env, check=True, stdout=subprocess.DEVNULL)


def replay_spans(replay, trace, backend, env=None):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "p.json")
        subprocess.run([replay, trace, "--backend", backend, "--quiet", "--profile", out],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            ev = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "record"]
    waits = {"download", "_local_scalar_dense", "rgpu::sync", "synchronize"}
    ev = ev[len(ev) // 3:]   # the steady steps
    us = sorted(e["dur"] for e in ev if e["name"] not in waits)
    return statistics.median(us), us[int(0.9 * (len(us) - 1))], len(us)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--server", action="append", help="an rgpu-server build (repeatable)")
    a = ap.parse_args()
    servers = a.server or [os.path.join(REPO, "build", "bin", "rgpu-server")]
    print(f"live: reduced GPT, {a.steps} steady steps against rgpu-server --backend null; "
          "server CPU us per record (all threads)")
    for rnd in range(2):   # interleaved rounds: the machine's noise falls on every build alike
        for s in servers:
            us, n = live(s, a.steps)
            print(f"  {s}: {us:.3f} us/record ({n} records)  [round {rnd + 1}]")
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "gpt.rgt")
        record_trace(trace, a.steps)
        print("replay --profile: per-record host span, median / p90 us (wait records left out)")
        for s in servers:
            replay = os.path.join(os.path.dirname(os.path.abspath(s)), "rgpu-replay")
            med, p90, n = replay_spans(replay, trace, "null")
            print(f"  null {replay}: {med:.3f} / {p90:.3f} ({n} records)")
        emu = os.path.join(REPO, "build-emu")
        if os.path.exists(os.path.join(emu, "bin", "rgpu-replay")):
            env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(emu, "lib"), RGPU_CUBLAS_PATH=os.path.join(emu, "lib"),
                       CUDAEMU_PROTECT="0")
            med, p90, n = replay_spans(os.path.join(emu, "bin", "rgpu-replay"), trace, "cuda", env)
            print(f"  cuda (CUDA-on-CPU layer) {emu}/bin/rgpu-replay: {med:.3f} / {p90:.3f} ({n} records)")
        else:
            print("  cuda: build-emu/ not built (make CUDA_EMU=1 all)")


if __name__ == "__main__":
    main()
