"""RGPU_SERVER=ssh://host: the client runs ssh (here tests/py/fake_ssh.py in
its place, through RGPU_SSH: the remote command runs on this machine), whose
remote command `rgpu-server --stdio` bridges to the user's rgpu-server daemon
(started on first use, kept across links); a killed ssh is resumed like any
dropped link. Each case in a child process, with its own state folder."""
import json
import os
import signal
import socket
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
