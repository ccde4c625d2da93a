"""Round trips on a slow link: rgpu through a loopback proxy that adds a
round-trip time (and optionally caps bandwidth), against the same run direct.

    python3 tools/bench/latency.py [--rtt 20,100] [--steps 10] [--quick]

One rgpu-server (--backend cpu, no journal) on 127.0.0.1; each scenario runs
in its own child process, direct and through the proxy, side by side in one
run. The table gives seconds per step direct and proxied, and the extra time
per step divided by the RTT: how many round trips a step really pays (the
ideal for a loop with one .item() per step is 1). It also prints the client's
own count, rgpu.stats()["round_trips"] per step.

Scenarios: (a) a small MLP, the same batch every step; (b) the MLP with a
new batch every step; (c) a small GPT (4 layers, 128 wide) with a new batch
every step; (d) uploading the 10.8 M-parameter GPT (model.to) and its first
step; (e) the same at 100 Mbit/s; (f) the small GPT at 100 Mbit/s twice, side
by side: uploading its batches (c's loop) and with its data on the server (a
uint16 train.bin the server exposes with --data, rgpu.from_file; per step 8
offsets go up and the batch is gathered there); (g) models.cnn's ResNetSmall
on 64 random-cropped, flipped, normalized 32x32 images per step at 100
Mbit/s, side by side: augmented on the CPU and uploaded (what a DataLoader
feeds), and packed on the server, augmented there (models/vision_data.py).
The last column is the client's bytes sent per step (rgpu.stats()["bytes_out"]).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

from benchsrv import start_server

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SERVER = os.path.join(REPO, "build", "bin", "rgpu-server")


# --- the proxy ---------------------------------------------------------------------------

class DelayProxy:
    """127.0.0.1:port -> target; every byte arrives rtt/2 later in each
    direction, and no faster than bw bytes/s (0: unlimited)."""

    def __init__(self, target_port, rtt, bw=0):
        self.target, self.half, self.bw = target_port, rtt / 2, bw
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                a, _ = self.ls.accept()
            except OSError:
                return
            b = socket.create_connection(("127.0.0.1", self.target))
            for s in (a, b):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for src, dst in ((a, b), (b, a)):
                q, cv = [], threading.Condition()
                threading.Thread(target=self._read, args=(src, q, cv), daemon=True).start()
                threading.Thread(target=self._write, args=(dst, q, cv), daemon=True).start()

    def _read(self, src, q, cv):
        free_at = 0.0                        # when the link is free again (bandwidth)
        while True:
            try:
                d = src.recv(1 << 16)
            except OSError:
                d = b""
            now = time.monotonic()
            if d and self.bw:
                free_at = max(free_at, now) + len(d) / self.bw
                due = free_at + self.half
            else:
                due = now + self.half
            with cv:
                q.append((due, d))
                cv.notify()
            if not d:
                return

    def _write(self, dst, q, cv):
        while True:
            with cv:
                while not q:
                    cv.wait()
                due, d = q.pop(0)
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not d:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            try:
                dst.sendall(d)
            except OSError:
                return

    def close(self):
        self.closed = True
        self.ls.close()


# --- the children --------------------------------------------------------------------------

CHILD = r"""
import json, sys, time, torch, torch.nn as nn, torch.nn.functional as F
sys.path.insert(0, {tools!r})
import rgpu
scenario, steps = {scenario!r}, {steps}
rgpu.connect()
torch.manual_seed(0)
g = torch.Generator().manual_seed(1)
out = {{}}
if scenario in ("fixed", "new"):
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to("rgpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x0, y0 = torch.randn(32, 64, generator=g), torch.randn(32, 10, generator=g)
    def step(i):
        x, y = (torch.randn(32, 64, generator=g), torch.randn(32, 10, generator=g)) if scenario == "new" else (x0, y0)
        loss = F.mse_loss(model(x.to("rgpu")), y.to("rgpu"))
        opt.zero_grad(); loss.backward(); opt.step()
        return loss.item()
elif scenario in ("gpt", "gpt_srv"):
    from models import data, gpt
    cfg = gpt.GPTConfig.small()
    model = gpt.GPT(cfg).to("rgpu")
    opt = model.configure_optimizer(lr=1e-3, foreach=True)
    T = cfg.block_size
    if scenario == "gpt":                          # nanoGPT's get_batch: uploaded
        train, _ = data.train_val(200_000)
        def batch():
            x, y = data.get_batch(train, 8, T, g)
            return x.to("rgpu"), y.to("rgpu")
    else:                                          # the same, train.bin on the server
        tokens = rgpu.from_file("data/train.bin", torch.uint16)
        n, ar = tokens.shape[0], torch.arange(T, device="rgpu")
        def batch():
            idx = torch.randint(n - T - 1, (8,), generator=g).to("rgpu")[:, None] + ar
            return tokens[idx].long(), tokens[idx + 1].long()
    def step(i):
        x, y = batch()
        _, loss = model(x, y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        return loss.item()
elif scenario in ("cnn", "cnn_srv"):
    from models import cnn, vision_data as vd
    model = cnn.ResNetSmall(classes=10).to("rgpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = vd.ServerImages("data/vision", mean=(0.5,) * 3, std=(0.25,) * 3)
    if scenario == "cnn":                          # the same batch made on the CPU, uploaded
        imgs, labels = vd.synthetic(1024, 32)
        def batch():
            d = images.draw(64, g)
            x, y = vd.augment(imgs, labels, *d, images.mean_cpu, images.std_cpu, images.pad)
            return x.to("rgpu"), y.to("rgpu")
    else:
        def batch():
            return images.batch(images.draw(64, g))
    def step(i):
        x, y = batch()
        loss = F.cross_entropy(model(x), y)
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        return loss.item()
if scenario in ("fixed", "new", "gpt", "gpt_srv", "cnn", "cnn_srv"):
    step(-1)                                       # warm-up: setup, caches
    rt0, b0, t0 = rgpu.stats()["round_trips"], rgpu.stats()["bytes_out"], time.perf_counter()
    for i in range(steps):
        step(i)
    out["s_per_step"] = (time.perf_counter() - t0) / steps
    out["rt_per_step"] = (rgpu.stats()["round_trips"] - rt0) / steps
    out["bytes_per_step"] = (rgpu.stats()["bytes_out"] - b0) / steps
else:                                              # upload: model.to + the first step
    from models import data, gpt
    cfg = gpt.GPTConfig()
    model = gpt.GPT(cfg)
    opt_args = dict(lr=1e-3, foreach=True)
    train, _ = data.train_val(200_000)
    x, y = data.get_batch(train, 4, 64, g)
    rt0, t0 = rgpu.stats()["round_trips"], time.perf_counter()
    model = model.to("rgpu")
    opt = model.configure_optimizer(**opt_args)
    _, loss = model(x.to("rgpu"), y.to("rgpu"))
    loss.backward(); opt.step()
    loss.item()
    out["s_per_step"] = time.perf_counter() - t0
    out["rt_per_step"] = rgpu.stats()["round_trips"] - rt0
    out["bytes_per_step"] = rgpu.stats()["bytes_out"]
print(json.dumps(out))
"""


def write_data(folder):
    """What the server scenarios read: the GPT's corpus as nanoGPT's prepare.py
    writes train.bin (uint16 token ids), and 1024 32x32 images for the CNN."""
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import numpy as np
    from models import data, vision_data
    os.makedirs(folder, exist_ok=True)
    train, _ = data.train_val(200_000)
    train.numpy().astype(np.uint16).tofile(os.path.join(folder, "train.bin"))
    vision_data.pack(os.path.join(folder, "vision"), *vision_data.synthetic(1024, 32))


def run_child(scenario, port, token_file, steps):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "torchhook"), RGPU_SERVER=f"127.0.0.1:{port}",
               RGPU_TOKEN_FILE=token_file)
    env.pop("RGPU_TOKEN", None)
    code = CHILD.format(tools=os.path.join(REPO, "tools"), scenario=scenario, steps=steps)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode:
        raise SystemExit(f"{scenario}: child failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtt", default="20,100", help="round-trip times in ms, comma-separated")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="scenarios a and b only")
    ap.add_argument("--only", help="these scenarios only, e.g. f or a,c")
    a = ap.parse_args()
    rtts = [float(r) / 1000 for r in a.rtt.split(",")]
    tmp = tempfile.mkdtemp(prefix="rgpu-latency-")
    write_data(os.path.join(tmp, "data"))
    srv, port, token, log = start_server(SERVER, tmp, "--journal", "none", "--quiet",
                                         data=["data=" + os.path.join(tmp, "data")])
    try:
        scen = [("a", "fixed", 0), ("b", "new", 0)]
        if not a.quick:
            scen += [("c", "gpt", 0), ("d", "upload", 0), ("e", "upload", 100e6 / 8),
                     ("f", "gpt", 100e6 / 8), ("f", "gpt_srv", 100e6 / 8),
                     ("g", "cnn", 100e6 / 8), ("g", "cnn_srv", 100e6 / 8)]
        if a.only:
            scen = [x for x in scen if x[0] in a.only.split(",")]
        print(f"{'scenario':<64} {'RTT':>6} {'direct s':>9} {'proxied s':>10} {'extra/RTT':>10} {'counted':>8} "
              f"{'sent/step':>10}")
        for rtt in rtts:
            for key, name, bw in scen:
                steps = a.steps if name != "upload" else 1
                direct = run_child(name, port, token, steps)
                proxy = DelayProxy(port, rtt, bw)
                try:
                    slow = run_child(name, proxy.port, token, steps)
                finally:
                    proxy.close()
                label = {"fixed": "MLP, same batch (s/step)", "new": "MLP, new batch (s/step)",
                         "gpt": "small GPT, new batch (s/step)",
                         "gpt_srv": "small GPT, data on the server (s/step)",
                         "cnn": "CNN, 64 images augmented on CPU, uploaded",
                         "cnn_srv": "CNN, 64 images augmented on the server",
                         "upload": "10.8M GPT upload + first step (s)"}[name]
                if bw:
                    label += f" @{bw * 8 / 1e6:.0f} Mbit/s"
                extra = (slow["s_per_step"] - direct["s_per_step"]) / rtt
                print(f"({key}) {label:<60} {rtt * 1000:>4.0f}ms {direct['s_per_step']:>9.3f} "
                      f"{slow['s_per_step']:>10.3f} {extra:>10.2f} {slow['rt_per_step']:>8.2f} "
                      f"{slow['bytes_per_step']:>10.0f}", flush=True)
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
