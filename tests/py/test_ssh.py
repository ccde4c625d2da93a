"""RGPU_SERVER=ssh://host: the client runs ssh (here tests/py/fake_ssh.py in
its place, through RGPU_SSH: the remote command runs on this machine), whose
remote command `rgpu-server --stdio` bridges to the user's rgpu-server daemon
(started on first use, kept across links); a killed ssh is resumed like any
dropped link. Each case in a child process, with its own state folder."""
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SERVER = os.path.join(REPO, "build", "bin", "rgpu-server")
TORCHHOOK = os.path.join(REPO, "torchhook")
TOOLS = os.path.join(REPO, "tools")


@pytest.fixture
def env(tmp_path):
    pids = tmp_path / "ssh-pids"
    pids.mkdir()
    e = dict(os.environ, PYTHONPATH=TORCHHOOK, XDG_STATE_HOME=str(tmp_path / "state"),
             RGPU_SERVER="ssh://tester@gpuhost", RGPU_SSH=f"{sys.executable} {HERE}/fake_ssh.py",
             RGPU_REMOTE_SERVER=SERVER, FAKE_SSH_PIDS=str(pids), RGPU_RECONNECT_TIMEOUT="60")
    for k in ("RGPU_TOKEN", "RGPU_TOKEN_FILE"):
        e.pop(k, None)
    yield e
    # the daemon outlives its links by design: stop it
    lock = list((tmp_path / "state" / "rgpu" / "journal").glob("*/.rgpu-server.lock"))
    for f in lock:
        try:
            os.kill(int(f.read_text().strip()), signal.SIGTERM)
        except (ValueError, ProcessLookupError):
            pass


def run(code, env, timeout=180):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=timeout)


CONNECT = """
import torch, rgpu
try:
    torch.ones(4, device="rgpu").sum().item()
except ConnectionError as e:
    print("ConnectionError:", e)
"""


def test_hello_world_over_ssh_and_the_daemon_is_reused(env, tmp_path):
    code = """
        import torch, rgpu
        x = torch.ones(4, device="rgpu")
        print((x * 2).sum().item(), rgpu.stats()["backend"])
    """
    for _ in range(2):
        p = run(code, env)
        assert p.returncode == 0, p.stderr[-3000:]
        assert p.stdout.split()[0] == "8.0", p.stdout
    log = (tmp_path / "state" / "rgpu" / "daemon" / "log").read_text()
    assert log.count("listening on") == 1, log            # one daemon, two clients
    assert log.count("started (id") == 2, log
    assert (tmp_path / "state" / "rgpu" / "daemon").stat().st_mode & 0o777 == 0o700


HELLO_EXIT = "import torch, rgpu, sys; print((torch.ones(4, device='rgpu') * 2).sum().item()); sys.exit(3)"


def test_rgpu_run_over_ssh_keeps_the_exit_status(env, tmp_path):
    e = dict(env)
    e.pop("RGPU_SERVER")
    p = subprocess.run([sys.executable, "-m", "rgpu.run", "--host", "tester@gpuhost", "--", sys.executable, "-c",
                        HELLO_EXIT], env=e, capture_output=True, text=True, timeout=180)
    assert p.returncode == 3, p.stderr[-3000:]
    assert p.stdout.strip() == "8.0"
    assert len(list((tmp_path / "ssh-pids").iterdir())) == 1     # it went over the ssh stand-in


# tools/models/train.py's MLP loop; the ssh link is killed at step 20
TRAIN = f"import sys; sys.path.insert(0, {TOOLS!r})\n" + """
import json, sys, torch, rgpu
from models.train import mlp_steps
losses = []
for i, loss in enumerate(mlp_steps(60)):
    losses.append(loss.item().hex())
    print("step", i, flush=True)
    if i == 20: sys.stdin.readline()          # the test kills the ssh here
print(json.dumps({"losses": losses, "reconnects": rgpu.stats()["reconnects"]}), flush=True)
"""


def train_killing_ssh(env, ssh_pids):
    """TRAIN over ssh, with the link's ssh killed at step 20 (ssh_pids(child
    pid) finds it); checked bitwise against the same run on the embedded
    server."""
    base = subprocess.run([sys.executable, "-c", TRAIN], env=dict(env, RGPU_SERVER=""), input="\n",
                          capture_output=True, text=True, timeout=300)
    assert base.returncode == 0, base.stderr[-3000:]
    ref = json.loads(base.stdout.strip().splitlines()[-1])
    p = subprocess.Popen([sys.executable, "-c", TRAIN], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        while not p.stdout.readline().startswith("step 20"):
            assert p.poll() is None, p.stderr.read()[-3000:]
        pids = ssh_pids(p.pid)
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)              # the link's ssh dies mid-training
        p.stdin.write("\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err[-3000:]
    r = json.loads(out.strip().splitlines()[-1])
    assert r["reconnects"] == 1 and r["losses"] == ref["losses"]


def test_killed_ssh_is_resumed_bitwise(env, tmp_path):
    train_killing_ssh(env, lambda pid: [int(f.name) for f in (tmp_path / "ssh-pids").iterdir()])
    assert len(list((tmp_path / "ssh-pids").iterdir())) == 2


@pytest.mark.parametrize("case", ["unreachable", "no-server"])
def test_clear_errors_in_bounded_time(env, case):
    e = dict(env)
    if case == "unreachable":
        e["RGPU_SERVER"] = "ssh://unreachable"
    else:
        e["RGPU_REMOTE_SERVER"] = "/nonexistent/rgpu-server"
    t0 = time.monotonic()
    p = run(CONNECT, e, timeout=120)
    assert time.monotonic() - t0 < 60
    assert p.returncode == 0, p.stderr[-2000:]
    want = "Could not resolve hostname unreachable" if case == "unreachable" else "no rgpu-server on the host"
    assert "ConnectionError:" in p.stdout and want in p.stdout, p.stdout + p.stderr[-2000:]


# --- a real OpenSSH server on 127.0.0.1, with its own keys and config ---------------------

@pytest.fixture
def sshd(tmp_path):
    """sshd on a free loopback port for the current user, key-only; yields the
    environment a client needs to reach it as ssh://testhost."""
    import getpass
    import socket
    d = tmp_path / "ssh"
    d.mkdir(mode=0o700)
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "user.pub").read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (d / "sshd_config").write_text(textwrap.dedent(f"""\
        Port {port}
        ListenAddress 127.0.0.1
        HostKey {d}/host
        PidFile {d}/sshd.pid
        AuthorizedKeysFile {d}/authorized_keys
        PasswordAuthentication no
        KbdInteractiveAuthentication no
        PubkeyAuthentication yes
        PermitRootLogin prohibit-password
        StrictModes no
        UsePAM no
        """))
    (d / "ssh_config").write_text(textwrap.dedent(f"""\
        Host testhost
          HostName 127.0.0.1
          Port {port}
          User {getpass.getuser()}
          IdentityFile {d}/user
          IdentitiesOnly yes
          StrictHostKeyChecking no
          UserKnownHostsFile /dev/null
          LogLevel ERROR
        """))
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=open(d / "sshd.log", "wb"))
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, (d / "sshd.log").read_text()
            time.sleep(0.05)
    state = tmp_path / "state"
    e = dict(os.environ, PYTHONPATH=TORCHHOOK, RGPU_SERVER="ssh://testhost", RGPU_SSH=f"ssh -F {d}/ssh_config",
             RGPU_REMOTE_SERVER=f"env XDG_STATE_HOME={state} {SERVER}", RGPU_RECONNECT_TIMEOUT="60",
             XDG_STATE_HOME=str(state))
    for k in ("RGPU_TOKEN", "RGPU_TOKEN_FILE", "FAKE_SSH_PIDS"):
        e.pop(k, None)
    yield e, d
    proc.terminate()
    proc.wait()
    for f in (state / "rgpu" / "journal").glob("*/.rgpu-server.lock"):
        try:
            os.kill(int(f.read_text().strip()), signal.SIGTERM)
        except (ValueError, ProcessLookupError):
            pass


def ssh_children(pid):
    """The ssh processes pid started (from /proc)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            st = open(f"/proc/{p}/stat").read()
        except OSError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        if ppid == pid and comm == "ssh":
            out.append(int(p))
    return out


def test_real_sshd_hello_world_and_killed_ssh(sshd, tmp_path):
    e, d = sshd
    p = run("""
        import torch, rgpu
        print((torch.ones(4, device="rgpu") * 2).sum().item())
    """, e)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip() == "8.0"
    r = subprocess.run([sys.executable, "-m", "rgpu.run", "--host", "testhost", "--", sys.executable, "-c", HELLO_EXIT],
                       env={k: v for k, v in e.items() if k != "RGPU_SERVER"}, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 3 and r.stdout.strip() == "8.0", r.stderr[-3000:]
    log = (tmp_path / "state" / "rgpu" / "daemon" / "log").read_text()
    assert log.count("listening on") == 1 and log.count("started (id") == 2, log   # one daemon, reused
    assert log.count(": bye after") == 2 and "kept for" not in log, log           # both exits freed at once
    train_killing_ssh(e, ssh_children)


@pytest.mark.parametrize("case", ["auth", "unknown-host", "refused", "no-server"])
def test_real_ssh_errors_are_one_clear_line(sshd, tmp_path, case):
    e, d = sshd
    if case == "auth":
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "other")], check=True)
        cfg = (d / "ssh_config").read_text().replace(f"IdentityFile {d}/user", f"IdentityFile {d}/other")
        (d / "ssh_config_bad").write_text(cfg)
        e, want = dict(e, RGPU_SSH=f"ssh -F {d}/ssh_config_bad"), "Permission denied"
    elif case == "unknown-host":
        e, want = dict(e, RGPU_SERVER="ssh://no-such-host.invalid"), "Could not resolve hostname"
    elif case == "refused":
        with socket.socket() as sk:          # a port nobody listens on
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        e, want = dict(e, RGPU_SERVER=f"ssh://127.0.0.1:{port}"), "Connection refused"
    else:
        e, want = dict(e, RGPU_REMOTE_SERVER="/nonexistent/rgpu-server"), "no rgpu-server on the host"
    t0 = time.monotonic()
    p = run(CONNECT, e)
    assert time.monotonic() - t0 < 60
    lines = [x for x in p.stdout.splitlines() if x.startswith("ConnectionError:")]
    assert len(lines) == 1 and want in lines[0], p.stdout + p.stderr[-2000:]


def test_a_server_that_never_answers_is_an_error_in_bounded_time(tmp_path):
    """RGPU_CONNECT_TIMEOUT bounds the handshake too (here a socket that
    accepts and never speaks)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    e = dict(os.environ, PYTHONPATH=TORCHHOOK, RGPU_SERVER=f"127.0.0.1:{ls.getsockname()[1]}",
             RGPU_CONNECT_TIMEOUT="2")
    t0 = time.monotonic()
    try:
        p = run(CONNECT, e)
    finally:
        ls.close()
    assert time.monotonic() - t0 < 30
    assert "ConnectionError:" in p.stdout and "RGPU_CONNECT_TIMEOUT" in p.stdout, p.stdout + p.stderr[-2000:]


# --- clean exits free the session at once; the host end trusts only what is this user's ---------

# rgpu._C alone (no torch: a child starts in milliseconds), with RGPU_SERVER.
C_ONLY = f"""
import importlib.machinery, importlib.util, os
_ld = importlib.machinery.ExtensionFileLoader("rgpu._C", {os.path.join(TORCHHOOK, "rgpu", "_C.abi3.so")!r})
_C = importlib.util.module_from_spec(importlib.util.spec_from_loader("rgpu._C", _ld))
_ld.exec_module(_C)
"""

# N sessions, each holding a 4 MiB upload when it says BYE; after each close
# (which returns once the server's BYE came back) the server's log, read at
# once: its "bye" lines and its last "stats" line.
CLEAN_EXITS = C_ONLY + """
import json, re, sys, time
log = sys.argv[1]
for i in range(int(sys.argv[2])):
    _C.connect(os.environ["RGPU_SERVER"])
    n = 4 << 20
    tid, sid = _C.new_id(), _C.new_id()
    _C.wait(_C.upload((tid, sid, _C.DTYPE_U8, (n,), (1,), 0, n), os.urandom(n)))
    t0 = time.monotonic()
    _C.close()
    dt = time.monotonic() - t0
    text = open(log).read()
    print(json.dumps({"close_s": dt, "byes": len(re.findall(r"session \\d+ \\(.*\\): bye after", text)),
                      "kept": text.count("kept for"), "stats": (re.findall(r"stats \\(.*", text) or [""])[-1]}), flush=True)
"""


def clean_exits(e, log, n):
    p = subprocess.run([sys.executable, "-c", CLEAN_EXITS, str(log), str(n)], env=e, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(x) for x in p.stdout.splitlines()]
    assert len(rows) == n
    for i, r in enumerate(rows):
        # the server had freed the session before close() returned: its bye
        # and its stats are in the log already, nothing is kept for --grace
        assert r["byes"] == i + 1 and r["kept"] == 0, (i, r)
        m = re.fullmatch(r"stats \(session ended\): sessions 0 \(detached 0\), session bytes 0, host memory (\d+) of .*",
                         r["stats"])
        assert m and int(m.group(1)) == 0, (i, r)
        assert r["close_s"] < 1.0, (i, r)        # the BYE came back: no 2 s bounded wait ran out
    return rows


def test_clean_exits_over_real_ssh_free_the_session_at_once(sshd, tmp_path):
    e, _ = sshd
    t0 = time.monotonic()
    rows = clean_exits(e, tmp_path / "state" / "rgpu" / "daemon" / "log", 20)
    log = (tmp_path / "state" / "rgpu" / "daemon" / "log").read_text()
    assert log.count(": bye after") == 20 and "kept for" not in log, log
    assert time.monotonic() - t0 < 60
    print("close() over ssh, s: max %.3f, mean %.3f" % (max(r["close_s"] for r in rows),
                                                     sum(r["close_s"] for r in rows) / len(rows)))


def test_clean_exits_over_tcp_free_the_session_at_once(tmp_path):
    sys.path.insert(0, HERE)
    from test_resume import Server
    srv = Server(tmp_path, "--journal", "none")
    try:
        e = dict(os.environ, RGPU_SERVER=f"127.0.0.1:{srv.port}", RGPU_TOKEN_FILE=srv.token_file)
        e.pop("RGPU_TOKEN", None)
        clean_exits(e, srv.log_path, 5)
    finally:
        srv.stop()


def connect_error(env):
    """Connect over the ssh stand-in and close: '' or the ConnectionError's text."""
    p = subprocess.run([sys.executable, "-c", C_ONLY + """
try:
    _C.connect(os.environ["RGPU_SERVER"])
    _C.close()
    print("")
except ConnectionError as e:
    print(e)
"""], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.strip()


def test_the_data_folder_must_be_this_users_alone(env, tmp_path):
    state = tmp_path / "state"
    data, daemon = state / "rgpu", state / "rgpu" / "daemon"
    data.mkdir(parents=True, mode=0o700)
    refused = []
    data.chmod(0o770)                                   # group-writable DATA
    refused.append((connect_error(env), f"{data} is mode 770: it must not be writable by group or others"))
    data.chmod(0o700)
    state.chmod(0o777)                                  # a folder above it others can write (not sticky)
    refused.append((connect_error(env), f"{state} (above the data folder) is mode 777"))
    state.chmod(0o1777)                                 # sticky, like /tmp: others cannot rename our folders
    assert connect_error(env) == ""
    state.chmod(0o700)
    daemon.chmod(0o750)
    refused.append((connect_error(env), f"{daemon} is mode 750: it must not be open to group or others"))
    os.rename(daemon, tmp_path / "elsewhere")           # daemon/ a symbolic link to a folder of ours
    os.symlink(tmp_path / "elsewhere", daemon)
    (tmp_path / "elsewhere").chmod(0o700)
    refused.append((connect_error(env), f"{daemon} is a symbolic link"))
    os.unlink(daemon)
    os.rename(tmp_path / "elsewhere", daemon)
    if os.geteuid() == 0:                               # a folder above DATA owned by another user
        os.chown(state, 12345, -1)
        refused.append((connect_error(env), f"{state} (above the data folder) is owned by uid 12345"))
        os.chown(state, 0, -1)
    for got, want in refused:
        assert want in got and "refusing to use it" in got, (got, want)
    assert connect_error(env) == ""                     # all put right: it works again


FOREIGN = """
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
os.setuid(12345)                 # the socket is served (listen) by another user
s.listen(4)
print("listening", flush=True)
c, _ = s.accept()
got = b""
c.settimeout(5)
try:
    while True:
        b = c.recv(65536)
        if not b:
            break
        got += b
except OSError:
    pass
print(len(got), flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to serve a socket as another user "
                                             "(the check itself: test_server's peer_uid_checked)")
def test_a_daemon_socket_served_by_another_user_gets_no_token(env, tmp_path):
    daemon = tmp_path / "state" / "rgpu" / "daemon"
    daemon.mkdir(parents=True, mode=0o700)
    (tmp_path / "state" / "rgpu").chmod(0o700)
    f = subprocess.Popen([sys.executable, "-c", FOREIGN, str(daemon / "sock")], stdout=subprocess.PIPE, text=True)
    try:
        assert f.stdout.readline().strip() == "listening"
        got = connect_error(env)
        assert f"{daemon}/sock: it is served by uid 12345, not by this user (uid 0); refusing to send it the token" \
            in got, got
        assert f.stdout.readline().strip() == "0"      # not a byte reached it
    finally:
        f.kill()
        f.wait()


def test_token_file_deleted_or_replaced_under_a_running_daemon(env, tmp_path):
    data = tmp_path / "state" / "rgpu"
    tok = data / "token"
    assert connect_error(env) == ""                     # the daemon runs, with the token in DATA/token
    direct = dict(env, RGPU_SERVER=f"unix:{data}/daemon/sock")
    t1 = tok.read_text().strip()
    tok.unlink()                                        # deleted: the next client still gets in
    assert connect_error(env) == ""
    t2 = tok.read_text().strip()                        # the bridge's new one (taken by the daemon), or t1 again
    assert len(t2) == 64
    tok.unlink()                                        # deleted with no client about: written back
    deadline = time.monotonic() + 5
    while not tok.exists():
        assert time.monotonic() < deadline, "the daemon did not write its token file back"
        time.sleep(0.05)
    time.sleep(0.05)
    assert tok.read_text().strip() == t2 and stat.S_IMODE(tok.stat().st_mode) == 0o600
    assert connect_error(dict(direct, RGPU_TOKEN=t2)) == ""
    t3 = "ab" * 32                                      # replaced by the user: the new one counts
    (data / "token.new").write_text(t3 + "\n")
    (data / "token.new").chmod(0o600)
    os.rename(data / "token.new", tok)
    assert connect_error(env) == ""
    assert connect_error(dict(direct, RGPU_TOKEN=t3)) == ""
    assert "wrong token" in connect_error(dict(direct, RGPU_TOKEN=t2))
    log = (data / "daemon" / "log").read_text()
    assert "holds a new token" in log and "was gone: this server's token written to it again" in log, log
    assert log.count("wrong token") == 1, log           # only the old token, tried on purpose
