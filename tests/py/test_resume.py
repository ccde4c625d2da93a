"""Nothing lost: a training run survives dropped connections (a fault-injecting
TCP proxy cuts the link 20 times, at random byte offsets, mid-frame included)
and a SIGKILLed server restarted on its journal, with a loss sequence bitwise
identical to an undisturbed run; an abandoned session is freed after --grace;
a session that can't be resumed raises rgpu.SessionLost; a wait never hangs.

Each run is a child process (a process connects once) talking to an
`rgpu-server --listen 127.0.0.1:PORT` started here, with a token file."""
import json
import os
import random
import re
import signal
import sqlite3
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from proc_util import free_port, stop, wait_listening

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHHOOK = os.path.join(HERE, "..", "..", "torchhook")
TOOLS = os.path.join(HERE, "..", "..", "tools")
SERVER = os.environ.get("RGPU_SERVER_BIN") or os.path.join(HERE, "..", "..", "build", "bin", "rgpu-server")
STEPS = 200

# A small MLP trained with SGD on fresh batches uploaded every step (so a
# resumed server also has to NEED blobs again); the loss is read each step.
# The loops are tools/models/train.py's (child() puts tools/ on PYTHONPATH).
TRAIN_LOOP = """
import json, os, sys
import torch
import rgpu
from models.train import {steps}
losses = []
for i, loss in enumerate({steps}(int(os.environ["STEPS"]){args})):
    losses.append(loss.item().hex())
    print("step", i, flush=True)
print(json.dumps({{"losses": losses, "stats": {{k: v for k, v in rgpu.stats().items() if isinstance(v, int)}}}}), flush=True)
"""
TRAIN = TRAIN_LOOP.format(steps="mlp_steps", args="")


class Server:
    """rgpu-server on 127.0.0.1:port with a token file and a log file;
    preexec (optional) runs in the server's process before it starts (limits)."""

    def __init__(self, tmp, *args, port=None, preexec=None):
        self.tmp, self.args, self.preexec = tmp, list(args), preexec
        self.port = port or free_port()
        self.token_file = str(tmp / "token")
        self.log_path = tmp / "server.log"
        self.proc = None
        self.start()

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([SERVER, "--listen", f"127.0.0.1:{self.port}", "--backend", "cpu",
                                      "--token-file", self.token_file, *self.args],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=self.preexec)
        log.close()
        wait_listening(self.proc, self.port, self.log)

    def log(self):
        return self.log_path.read_text(errors="replace")

    def wait_log(self, pattern, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.log())
            if m:
                return m
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} in the server log:\n{self.log()}")

    def kill(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)
        self.proc.wait(10)

    def stop(self):
        stop(self.proc)


class FaultProxy:
    """TCP proxy to 127.0.0.1:target. Each connection may be cut after a random
    number of forwarded bytes (both directions together; the cut falls inside
    whatever frame is passing), until `cuts` cuts are done. `blackhole` makes it
    accept and at once close new connections."""

    def __init__(self, target, seed=0, cuts=0, lo=1500, hi=20000):
        self.target, self.rng, self.cuts_left = target, random.Random(seed), cuts
        self.lo, self.hi = lo, hi
        self.cuts, self.connections = 0, 0
        self.blackhole = False
        self.lock = threading.Lock()
        self.live = []
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                a, _ = self.ls.accept()
            except OSError:
                return
            if self.blackhole:
                a.close()
                continue
            try:
                b = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                a.close()
                continue
            with self.lock:
                self.connections += 1
                st = {"budget": self.rng.randint(self.lo, self.hi) if self.cuts_left > 0 else None,
                      "socks": (a, b), "dead": False}
                if st["budget"] is not None:
                    self.cuts_left -= 1   # reserved for this connection
                self.live.append(st)
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(st, src, dst), daemon=True).start()

    def _close(self, st):
        if not st["dead"]:
            st["dead"] = True
            for s in st["socks"]:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _pump(self, st, src, dst):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            with self.lock:
                if st["dead"]:
                    return
                if not data:
                    self._close(st)
                    return
                cut = st["budget"] is not None and len(data) >= st["budget"]
                if cut:
                    data = data[:st["budget"]]
                elif st["budget"] is not None:
                    st["budget"] -= len(data)
                try:
                    dst.sendall(data)
                except OSError:
                    cut = False
                    self._close(st)
                    return
                if cut:
                    self.cuts += 1
                    self._close(st)
                    return

    def cut_all(self):
        with self.lock:
            for st in self.live:
                self._close(st)

    def close(self):
        self.ls.close()
        self.cut_all()


def child(code, port, token_file, timeout=240, **env):
    e = dict(os.environ, PYTHONPATH=TORCHHOOK + os.pathsep + TOOLS, RGPU_SERVER=f"127.0.0.1:{port}", RGPU_TOKEN_FILE=token_file,
             STEPS=str(STEPS), RGPU_RECONNECT_TIMEOUT="60", RGPU_WAIT_TIMEOUT="120")
    e.pop("RGPU_TOKEN", None)
    e.update(env)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True)


def rest(p, stdin=None, timeout=240):
    """The rest of the child's output (after readline()s), once it exits."""
    if stdin is not None:
        p.stdin.write(stdin)
        p.stdin.flush()
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    try:
        out, err = p.stdout.read(), p.stderr.read()
        p.wait()
    finally:
        timer.cancel()
    return out, err


def finish(p, timeout=240):
    out, err = rest(p, timeout=timeout)
    assert p.returncode == 0, f"child failed ({p.returncode}):\n{err[-4000:]}"
    return json.loads(out.strip().splitlines()[-1])


def until_step(p, step):
    """Reads the child's output up to its line `step N`."""
    while not p.stdout.readline().startswith(f"step {step}"):
        assert p.poll() is None, p.stderr.read()[-3000:]


def restart_during(srv, p, step, down=lambda: None):
    """Once child p says `step N`: SIGKILL srv, call down() while it is down,
    start it again (same port, journal folder and token file) and return
    (finish(p), what down() returned). p is killed and srv stopped whatever
    happens."""
    try:
        until_step(p, step)
        srv.kill(signal.SIGKILL)
        got = down()
        srv.start()
        return finish(p), got
    finally:
        if p.poll() is None:
            p.kill()
        srv.stop()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """The loss sequence of an undisturbed run."""
    tmp = tmp_path_factory.mktemp("baseline")
    srv = Server(tmp, "--journal", "none")
    try:
        r = finish(child(TRAIN, srv.port, srv.token_file))
    finally:
        srv.stop()
    assert r["stats"]["reconnects"] == 0 and len(r["losses"]) == STEPS
    return r["losses"]


def test_twenty_dropped_connections_lose_nothing(tmp_path, baseline):
    srv = Server(tmp_path, "--journal", "none", "--grace", "60")
    proxy = FaultProxy(srv.port, seed=int(os.environ.get("RGPU_TEST_SEED", "1234")), cuts=20)
    try:
        r = finish(child(TRAIN, proxy.port, srv.token_file))
    finally:
        proxy.close()
        srv.stop()
    assert proxy.cuts == 20, f"only {proxy.cuts} cuts happened"
    # every cut is resumed (a cut during a resume's own handshake is redialled within it)
    assert 1 <= r["stats"]["reconnects"] <= 20 and proxy.connections >= r["stats"]["reconnects"] + 1
    assert r["losses"] == baseline
    log = srv.log()
    assert log.count("resumed at op") == r["stats"]["reconnects"], log[-3000:]


def test_sigkilled_server_restarted_on_its_journal_resumes(tmp_path, baseline):
    journal = tmp_path / "journal"
    srv = Server(tmp_path, "--journal", str(journal))
    p = child(TRAIN, srv.port, srv.token_file)
    def down():
        assert list(journal.glob("session-*.rgt")), "no journal file"
    r, _ = restart_during(srv, p, 80, down)
    assert r["losses"] == baseline
    log = srv.log()
    assert "rebuilt from its journal" in log and r["stats"]["reconnects"] == 1, log[-3000:]
    assert "token in " + srv.token_file in log


def test_compacted_journal_stays_small_and_resumes(tmp_path, baseline):
    """--journal-compact: the journal checkpoints the session's state and drops
    its history; a server SIGKILLed after several compactions rebuilds the
    session from the last checkpoint and the run ends with the undisturbed
    losses."""
    journal = tmp_path / "journal"
    srv = Server(tmp_path, "--journal", str(journal), "--journal-compact", "24K")
    p = child(TRAIN, srv.port, srv.token_file)
    def down():
        (jf,) = list(journal.glob("session-*.rgt"))
        con = sqlite3.connect(f"file:{jf}?mode=ro", uri=True)
        ck_op = int(con.execute("select value from meta where key='checkpoint_op'").fetchone()[0])
        first = con.execute("select min(first_op) from stream").fetchone()[0]
        n_stream = con.execute("select count(*) from stream").fetchone()[0]
        con.close()
        assert ck_op > 0 and (first is None or first >= ck_op), (ck_op, first)
        return n_stream
    r, n_stream = restart_during(srv, p, 150, down)
    log = srv.log()
    n = log.count("journal compacted at op")
    assert n >= 3, log[-3000:]
    sizes = [int(m) for m in re.findall(r"journal file (\d+) bytes", log)]
    assert max(sizes) < 400_000, sizes          # a few chunks after a checkpoint, not 150 steps of history
    assert n_stream < 150, n_stream
    assert "rebuilt from its journal" in log and r["stats"]["reconnects"] == 1, log[-3000:]
    assert r["losses"] == baseline


BIG = """
import json, torch, rgpu
g = torch.Generator().manual_seed(3)
xs = [torch.randn(6_000_000, generator=g) for _ in range(3)]      # 24 MB each: sent in BLOB_PART pieces
ys = [x.to("rgpu") for x in xs]
sums = [float((y * 2).sum().item()) for y in ys]
back = [torch.equal(y.cpu(), x) for x, y in zip(xs, ys)]
s = rgpu.stats()
print(json.dumps({"ok": all(back), "sums": sums, "ref": [float((x * 2).sum()) for x in xs],
                  "reconnects": s["reconnects"]}))
"""


def test_big_uploads_survive_dropped_connections(tmp_path):
    """Uploads bigger than a piece travel as BLOB_PART pieces; links cut in
    the middle of them are resumed and the pieces sent again: nothing lost."""
    srv = Server(tmp_path, "--journal", "none", "--grace", "60")
    proxy = FaultProxy(srv.port, seed=7, cuts=4, lo=2_000_000, hi=30_000_000)
    try:
        r = finish(child(BIG, proxy.port, srv.token_file))
    finally:
        proxy.close()
        srv.stop()
    assert proxy.cuts >= 2, proxy.cuts
    assert r["ok"] and r["reconnects"] >= 2, r
    for a, b in zip(r["sums"], r["ref"]):
        assert abs(a - b) <= 1e-3 * max(1.0, abs(b)), (a, b)


ABANDON = """
import os, signal, torch, rgpu
x = torch.ones(1000, 1000, device="rgpu")          # 4 MB on the server
print((x * 2).sum().item(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)               # gone without a BYE
"""


def test_abandoned_session_is_freed_after_grace(tmp_path):
    srv = Server(tmp_path, "--journal", str(tmp_path / "journal"), "--grace", "2")
    try:
        p = child(ABANDON, srv.port, srv.token_file)
        rest(p)
        assert p.returncode == -signal.SIGKILL
        m = srv.wait_log(r"stats \(session detached\): sessions 1 \(detached 1\), session bytes (\d+)")
        assert int(m.group(1)) >= 4_000_000
        t0 = time.monotonic()
        srv.wait_log(r"no client came back within 2 s \(--grace\): freed \d+ bytes, journal removed")
        srv.wait_log(r"stats \(session expired\): sessions 0 \(detached 0\), session bytes 0, host memory 0 of \d+")
        assert time.monotonic() - t0 < 10
        assert not list((tmp_path / "journal").glob("session-*")), "journal not removed"
    finally:
        srv.stop()


LOST = """
import sys, torch, rgpu
x = torch.ones(4, device="rgpu")
print((x + 1).sum().item(), flush=True)
sys.stdin.readline()                  # the test breaks things here
try:
    print((x * 3).sum().item())
except rgpu.SessionLost as e:
    print("LOST", isinstance(e, rgpu.RemoteError), e, flush=True)
"""


def test_resume_after_grace_expired_raises_session_lost(tmp_path):
    srv = Server(tmp_path, "--journal", "none", "--grace", "1")
    proxy = FaultProxy(srv.port)
    try:
        p = child(LOST, proxy.port, srv.token_file)
        assert p.stdout.readline().strip() == "8.0"
        proxy.blackhole = True
        proxy.cut_all()
        srv.wait_log(r"no client came back within 1 s")
        proxy.blackhole = False
        out, err = rest(p, "go\n")
    finally:
        proxy.close()
        srv.stop()
    assert p.returncode == 0, err[-3000:]
    assert out.startswith("LOST True rgpu session lost"), out
    assert "ops from" in out and "--grace" in out and "cannot resume session" in out


def test_journal_removed_raises_session_lost(tmp_path):
    journal = tmp_path / "journal"
    srv = Server(tmp_path, "--journal", str(journal))
    try:
        p = child(LOST, srv.port, srv.token_file)
        assert p.stdout.readline().strip() == "8.0"
        srv.kill(signal.SIGKILL)
        for f in journal.glob("session-*"):
            f.unlink()
        srv.start()
        out, err = rest(p, "go\n")
    finally:
        srv.stop()
    assert p.returncode == 0, err[-3000:]
    assert out.startswith("LOST True"), out
    assert "server restarted without its journal" in out


def test_wait_on_a_frozen_server_times_out(tmp_path):
    srv = Server(tmp_path, "--journal", "none")
    try:
        p = child("""
            import sys, time, torch, rgpu
            x = torch.ones(4, device="rgpu")
            print(x.sum().item(), flush=True)
            sys.stdin.readline()
            t = time.monotonic()
            try:
                (x * 2).sum().item()
            except rgpu.RemoteError as e:
                print("ERR", round(time.monotonic() - t), e, flush=True)
        """, srv.port, srv.token_file, RGPU_WAIT_TIMEOUT="2")
        assert p.stdout.readline().strip() == "4.0"
        srv.proc.send_signal(signal.SIGSTOP)
        try:
            out, err = rest(p, "go\n", timeout=60)
        finally:
            srv.proc.send_signal(signal.SIGCONT)
    finally:
        srv.stop()
    assert out.startswith("ERR ") and 2 <= int(out.split()[1]) <= 15 and "RGPU_WAIT_TIMEOUT" in out, out + err[-2000:]


def test_backlog_of_unacknowledged_ops_is_bounded(tmp_path):
    """With the server frozen, recording blocks once RGPU_MAX_UNACKED bytes of
    ops are un-acknowledged (other threads keep running: the GIL is released),
    and goes on when the server's ACKs come back."""
    srv = Server(tmp_path, "--journal", "none")
    try:
        p = child("""
            import sys, threading, time, torch, rgpu
            x = torch.ones(64, device="rgpu")
            print(x.sum().item(), flush=True)
            sys.stdin.readline()                          # the server is frozen now
            done = []
            def work():
                y = x
                for i in range(40000):
                    y = y + 1
                done.append(y.sum().item())
            t = threading.Thread(target=work)
            t.start()
            # until recording stands still past the limit (a loaded machine takes longer)
            deadline, s1 = time.monotonic() + 60, rgpu.stats()
            while time.monotonic() < deadline:
                time.sleep(0.5)
                s = rgpu.stats()
                if s["ops"] == s1["ops"] and s["unacked_bytes"] > 65536:
                    break
                s1 = s
            time.sleep(1)
            s2 = rgpu.stats()
            print("blocked", not done, s1["ops"] == s2["ops"], s2["unacked_bytes"], flush=True)
            sys.stdin.readline()                          # the server runs again
            t.join()
            print("done", done[0], flush=True)
        """, srv.port, srv.token_file, RGPU_MAX_UNACKED="65536", RGPU_WAIT_TIMEOUT="60")
        assert p.stdout.readline().strip() == "64.0"
        srv.proc.send_signal(signal.SIGSTOP)
        try:
            p.stdin.write("go\n")
            p.stdin.flush()
            blocked = p.stdout.readline().split()
        finally:
            srv.proc.send_signal(signal.SIGCONT)
        out, err = rest(p, "go\n", timeout=120)
    finally:
        srv.stop()
    assert blocked[:3] == ["blocked", "True", "True"], blocked
    assert 65536 < int(blocked[3]) <= 65536 + 2 * (256 << 10), blocked
    assert out.split() == ["done", str(64 * 40001.0)], out + err[-2000:]


# The reduced GPT (dropout on: the random ops' (seed, offset) must survive the
# resumes too), AdamW, batches uploaded every step, loss read every step.
TRAIN_GPT = TRAIN_LOOP.format(steps="tiny_gpt_steps", args=", data_seed=1")


def test_twenty_dropped_connections_lose_nothing_gpt(tmp_path):
    srv = Server(tmp_path, "--journal", "none", "--grace", "60")
    try:
        base = finish(child(TRAIN_GPT, srv.port, srv.token_file), timeout=600)
    finally:
        srv.stop()
    assert base["stats"]["reconnects"] == 0 and len(base["losses"]) == STEPS
    srv = Server(tmp_path, "--journal", "none", "--grace", "60")
    proxy = FaultProxy(srv.port, seed=int(os.environ.get("RGPU_TEST_SEED", "4321")), cuts=20)
    try:
        r = finish(child(TRAIN_GPT, proxy.port, srv.token_file), timeout=600)
    finally:
        proxy.close()
        srv.stop()
    assert proxy.cuts == 20, f"only {proxy.cuts} cuts happened"
    assert 1 <= r["stats"]["reconnects"] <= 20
    assert r["losses"] == base["losses"]
