"""The journal's promises (FORMAT.md §7.2, §7.3): sessions whose clients
vanished hold no file descriptors while they wait --grace, so a server under a
low descriptor limit keeps journaling new sessions; a journal that turns off
(it cannot be created, a write fails) is reported to the client -- a
RuntimeWarning at the next wait and rgpu.stats()["journal"] -- while the run
goes on; and under --journal-sync full an acknowledged op is in the journal
files at the moment its ACK or RESULT arrives (the power-cut test: a copy of
the files taken then resumes with nothing acknowledged missing).

Servers are test_resume's (127.0.0.1, a token file, a log); children are
Python processes running rgpu (a process connects once)."""
import json
import os
import resource
import shutil
import signal
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_auth import MSG_WELCOME, hello, recv_msg  # noqa: E402
from test_resume import (SERVER, TRAIN_LOOP, FaultProxy, Server, baseline, child, finish,  # noqa: E402,F401
                         rest, restart_during)

# The MLP loop of test_resume, recording for each step the journal's state and
# the warnings its wait raised.
TRAIN_WATCHED = """
import json, os, warnings
import torch, rgpu
from models.train import mlp_steps
losses, warned, journal = [], [], []
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    for i, loss in enumerate(mlp_steps(int(os.environ["STEPS"]))):
        losses.append(loss.item().hex())
        warned += [[i, w.category.__name__, str(w.message)] for w in ws[len(warned):]]
        journal.append(rgpu.stats()["journal"])
        print("step", i, flush=True)
print(json.dumps({"losses": losses, "warned": warned, "journal": journal,
                  "reconnects": rgpu.stats()["reconnects"]}), flush=True)
"""


def nfds(srv):
    return len(os.listdir(f"/proc/{srv.proc.pid}/fd"))


def vanish_after_welcome(port, token):
    """A client that starts a session and disappears without BYE (as a SIGKILLed one does)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(hello(token))
    m = recv_msg(s)
    assert m[0] == MSG_WELCOME, m
    s.close()


def wait_for(cond, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_detached_sessions_hold_no_journal_descriptors(tmp_path, baseline):
    """RLIMIT_NOFILE 64: 60 clients start a session and vanish, each leaving a
    journaled session detached for --grace. Their journals are closed (the
    server's descriptors are back to what it had before them), so the next
    client's session journals ("on" at every step, no WARNING in the log);
    its link is cut three times (each resume reopens the journal) and then the
    server is SIGKILLed and restarted on the journal folder: the run ends
    with the undisturbed losses, so the reopened journal missed nothing."""
    journal = tmp_path / "journal"

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    srv = Server(tmp_path, "--journal", str(journal), "--grace", "300", preexec=limit)
    token = open(srv.token_file, "rb").read().strip()
    base = nfds(srv)
    for _ in range(60):
        vanish_after_welcome(srv.port, token)
    wait_for(lambda: srv.log().count("kept for 300 s") == 60, "60 detached sessions")
    assert len(list(journal.glob("session-*.rgt"))) == 60
    assert nfds(srv) <= base + 1, (base, os.listdir(f"/proc/{srv.proc.pid}/fd"))
    proxy = FaultProxy(srv.port, seed=7, cuts=3)
    try:
        p = child(TRAIN_WATCHED, proxy.port, srv.token_file)
        r, _ = restart_during(srv, p, 150)
    finally:
        proxy.close()
    assert proxy.cuts == 3
    assert r["losses"] == baseline
    assert r["journal"] == ["on"] * len(baseline) and r["warned"] == [], (r["journal"][-1], r["warned"])
    log = srv.log()
    assert "WITHOUT a journal" not in log and "rebuilt from its journal" in log, log[-3000:]
    assert r["reconnects"] >= 2 and log.count("resumed at op") == r["reconnects"]


def test_journal_that_cannot_be_created_is_reported_at_the_first_wait(tmp_path):
    """No descriptor left for a new session's journal (RLIMIT_NOFILE lowered
    on the running server to two more than it holds: the connection takes
    one, SQLite cannot open the journal's -wal): the session runs without it,
    and its client gets one RuntimeWarning at its first wait and
    stats()["journal"] "off: ..."; its results are right. With the limit
    raised again, the next session journals."""
    journal = tmp_path / "journal"
    srv = Server(tmp_path, "--journal", str(journal))
    code = """
        import json, warnings, torch, rgpu
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            x = torch.arange(6, dtype=torch.float32, device="rgpu") * 2 + 1
            first = x.sum().item()
            n_first = len(ws)
            second = (x * x).sum().item()
        print(json.dumps({"values": [first, second], "warned": [[w.category.__name__, str(w.message)] for w in ws],
                          "n_first": n_first, "journal": rgpu.stats()["journal"]}), flush=True)
    """
    try:
        srv.wait_log("closed before its HELLO")   # wait_listening's probe: its descriptor is gone
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.prlimit(srv.proc.pid, resource.RLIMIT_NOFILE, (nfds(srv) + 2, hard))
        r = finish(child(code, srv.port, srv.token_file))
        resource.prlimit(srv.proc.pid, resource.RLIMIT_NOFILE, (soft, hard))
        again = finish(child(code, srv.port, srv.token_file))
    finally:
        srv.stop()
    assert r["values"] == [36.0, 286.0] and again["values"] == [36.0, 286.0]
    assert r["n_first"] == 1 and len(r["warned"]) == 1, r["warned"]
    kind, msg = r["warned"][0]
    assert kind == "RuntimeWarning" and "journal off" in msg and "a server restart will not resume it" in msg, msg
    assert r["journal"].startswith("off: cannot create trace") and r["journal"][5:] in msg, r["journal"]
    assert again["journal"] == "on" and again["warned"] == []
    assert "WARNING" in srv.log()


def test_journal_write_failure_is_reported_and_the_run_goes_on(tmp_path, baseline):
    """RLIMIT_FSIZE 512 KiB on the server (SIGXFSZ ignored: a write past it
    fails): the session's journal fails while the MLP trains. The client gets
    exactly one RuntimeWarning, at the wait of the step where stats()
    ["journal"] turns from "on" to "off: <SQLite's reason>", and the run ends
    with the undisturbed losses."""
    journal = tmp_path / "journal"

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (512 << 10, 512 << 10))
    srv = Server(tmp_path, "--journal", str(journal), preexec=limit)
    try:
        r = finish(child(TRAIN_WATCHED, srv.port, srv.token_file))
    finally:
        srv.stop()
    assert r["losses"] == baseline
    on = r["journal"].count("on")
    assert 0 < on < len(baseline) and r["journal"][:on] == ["on"] * on, r["journal"]
    off = r["journal"][on]
    assert off.startswith("off: ") and set(r["journal"][on:]) == {off}, r["journal"][on:]
    assert len(r["warned"]) == 1, r["warned"]
    step, kind, msg = r["warned"][0]
    assert step == on and kind == "RuntimeWarning" and off[5:] in msg, (step, on, r["warned"])
    log = srv.log()
    assert "WARNING: journal" in log and "continues WITHOUT a journal" in log, log[-2000:]


def test_journal_none_is_said(tmp_path):
    srv = Server(tmp_path, "--journal", "none")
    try:
        r = finish(child("""
            import json, torch, rgpu
            print(json.dumps({"v": (torch.ones(3, device="rgpu") * 2).sum().item(), "journal": rgpu.stats()["journal"]}))
        """, srv.port, srv.token_file))
    finally:
        srv.stop()
    assert r == {"v": 6.0, "journal": "none"}


def test_bad_journal_sync_is_refused(tmp_path):
    import subprocess
    p = subprocess.run([SERVER, "--journal-sync", "sometimes", "--journal", "none"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and "--journal-sync wants full or normal, not 'sometimes'" in p.stderr, p.stderr


# The power-cut test's client: a running sum of batches uploaded every step,
# waited on at step 19; then 50 more ops no wait covers (the server's group
# commit acknowledges them with an ACK), a pause while the test copies the
# journal and replaces the server, and 20 more steps. The rgpu result must
# equal the same sums on the CPU: bitwise (integers in float32).
POWER_CUT = """
import json, sys, time, torch, rgpu
g = torch.Generator().manual_seed(3)
x, ref = torch.zeros(1000, device="rgpu"), torch.zeros(1000)
for i in range(40):
    b = torch.randint(0, 100, (1000,), generator=g).float()
    x, ref = x + b.to("rgpu"), ref + b
    if i == 19:
        print("waited", x.sum().item(), ref.sum().item(), flush=True)
        for j in range(50):
            x, ref = x + 1, ref + 1
        rgpu._C.flush()
        deadline = time.monotonic() + 10
        while rgpu.stats()["unacked_bytes"] and time.monotonic() < deadline:
            time.sleep(0.01)
        print("acked", rgpu.stats()["unacked_bytes"], flush=True)
        sys.stdin.readline()
out = x.cpu()
print(json.dumps({"equal": torch.equal(out, ref), "sum": out.sum().item(), "ref": ref.sum().item(),
                  "reconnects": rgpu.stats()["reconnects"], "journal": rgpu.stats()["journal"]}), flush=True)
"""


def test_power_cut_loses_no_acknowledged_op(tmp_path):
    """--journal-sync full. The client has seen a RESULT (step 19) and the
    ACK of 50 more ops; at that moment the server is stopped (SIGSTOP), its
    journal's files (the .rgt and its -wal, not the -shm: what a disk holds
    after a power cut) are copied, and it is SIGKILLed. A new server on the
    copy, same address: the client resumes (one reconnect), the session is
    rebuilt from the copy, and the final tensor equals the CPU reference --
    an acknowledged op missing from the copy would have been SessionLost
    (the client frees what is acknowledged) or a wrong sum."""
    journal, cut = tmp_path / "journal", tmp_path / "after-the-cut"
    srv = Server(tmp_path, "--journal", str(journal), "--journal-sync", "full")
    p = child(POWER_CUT, srv.port, srv.token_file)
    try:
        waited = p.stdout.readline().split()
        assert waited[0] == "waited" and waited[1] == waited[2], waited + [p.stderr.read()[-2000:]]
        assert p.stdout.readline().split() == ["acked", "0"]
        srv.proc.send_signal(signal.SIGSTOP)
        cut.mkdir()
        names = []
        for f in journal.glob("session-*"):
            if not f.name.endswith("-shm"):
                shutil.copy2(f, cut / f.name)
                names.append(f.name)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(10)
        assert any(n.endswith(".rgt") for n in names), names
        srv.args = ["--journal", str(cut), "--journal-sync", "full"]
        srv.start()
        out, err = rest(p, "go\n")
    finally:
        if p.poll() is None:
            p.kill()
        srv.stop()
    assert p.returncode == 0, err[-3000:]
    r = json.loads(out.strip().splitlines()[-1])
    assert r["equal"] and r["sum"] == r["ref"], r
    assert r["reconnects"] == 1 and r["journal"] == "on", r
    log = srv.log()
    assert "rebuilt from its journal" in log and "(sync full)" in log, log[-3000:]
