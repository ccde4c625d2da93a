"""What the journal's durability costs: rgpu-server --journal-sync full
(every ACK and RESULT after an fsync of the chunks it covers, group-committed)
against --journal-sync normal (a commit, no fsync) and --journal none.

    python3 tools/bench/journal.py [--dir DIR] [--chunks 2000] [--waits 300] [--steps 200] [--rounds 3]

One rgpu-server (--backend cpu) per policy on 127.0.0.1, its journal in a
fresh folder under DIR (default: the system's temporary folder: put DIR on
the disk whose fsync you want to measure). Each measurement is a child
process:
  (a) chunks streamed with no wait: one tiny op per chunk (rgpu._C.flush()),
      one wait at the end; microseconds per chunk (the server commits them in
      groups: ACK_IDLE, ACK_MAX_DELAY in server_loop.c);
  (b) a chunk and its wait, in turn: microseconds per wait (each pays one
      commit, under full one fsync, before its RESULT);
  (c) the MLP of tools/models/train.py (SGD, a new batch and one .item() per
      step): steps per second.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchsrv import start_server

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SERVER = os.path.join(REPO, "build", "bin", "rgpu-server")

CHILD = r"""
import json, sys, time, torch
sys.path.insert(0, {tools!r})
import rgpu
from models.train import mlp_steps
x = torch.zeros(16, device="rgpu")
for i in range(300):                             # warm-up: the first few hundred ops pay torch's dispatch caches
    x = x + 1
    rgpu._C.flush()
    if i % 10 == 0:
        x.sum().item()
x = torch.zeros(16, device="rgpu")
x.sum().item()
t0 = time.perf_counter()
for i in range({chunks}):
    x = x + 1
    rgpu._C.flush()                              # one chunk per op
assert x.sum().item() == 16.0 * {chunks}
per_chunk = (time.perf_counter() - t0) / {chunks}
t0 = time.perf_counter()
for i in range({waits}):
    x = x + 1
    x.sum().item()
per_wait = (time.perf_counter() - t0) / {waits}
steps = mlp_steps({steps} + 1)
next(steps).item()                               # warm-up step
t0 = time.perf_counter()
for loss in steps:
    loss.item()
print(json.dumps({{"us_per_chunk": per_chunk * 1e6, "us_per_wait": per_wait * 1e6,
                  "steps_per_s": {steps} / (time.perf_counter() - t0), "journal": rgpu.stats()["journal"]}}))
"""


def measure(policy, base, a):
    tmp = tempfile.mkdtemp(prefix=f"rgpu-bench-journal-{policy}-", dir=base)
    journal = ["--journal", "none"] if policy == "none" else ["--journal", os.path.join(tmp, "j"), "--journal-sync", policy]
    srv, port, token, log = start_server(SERVER, tmp, *journal)
    try:
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "torchhook"), RGPU_SERVER=f"127.0.0.1:{port}",
                   RGPU_TOKEN_FILE=token)
        env.pop("RGPU_TOKEN", None)
        code = CHILD.format(tools=os.path.join(REPO, "tools"), chunks=a.chunks, waits=a.waits, steps=a.steps)
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800)
        if p.returncode:
            raise SystemExit(f"{policy}: child failed:\n{p.stderr[-3000:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])
    finally:
        srv.terminate()
        srv.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None, help="where the journals go (default: the temporary folder)")
    ap.add_argument("--chunks", type=int, default=2000)
    ap.add_argument("--waits", type=int, default=300)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--policies", default="none,normal,full")
    ap.add_argument("--rounds", type=int, default=3, help="the policies in turn this many times; the best of each")
    a = ap.parse_args()
    policies = a.policies.split(",")
    best = {}
    print(f"journals under {a.dir or tempfile.gettempdir()}")
    hdr = f"{'--journal-sync':<17} {'µs/chunk (streamed)':>20} {'µs/wait (chunk+wait)':>21} {'MLP steps/s':>12}"
    print(hdr)
    for rnd in range(a.rounds):
        for policy in policies:
            r = measure(policy, a.dir, a)
            b = best.setdefault(policy, dict(r))
            b["us_per_chunk"] = min(b["us_per_chunk"], r["us_per_chunk"])
            b["us_per_wait"] = min(b["us_per_wait"], r["us_per_wait"])
            b["steps_per_s"] = max(b["steps_per_s"], r["steps_per_s"])
            print(f"{policy:<17} {r['us_per_chunk']:>20.1f} {r['us_per_wait']:>21.1f} {r['steps_per_s']:>12.1f}"
                  f"   (round {rnd + 1})", flush=True)
    print(f"best of {a.rounds}:")
    print(hdr)
    for policy in policies:
        r = best[policy]
        label = "--journal none" if policy == "none" else policy
        print(f"{label:<17} {r['us_per_chunk']:>20.1f} {r['us_per_wait']:>21.1f} {r['steps_per_s']:>12.1f}")


if __name__ == "__main__":
    main()
