"""Authentication and hostile input at the Python level: the server's token
(RGPU_TOKEN, RGPU_TOKEN_FILE, the embedded server's private one), refusals
with RGPU_ERR_AUTH and a clear message, and wrong token / garbage / a half-sent
frame / an oversized length each refused with its error while an honest
session on the same server keeps training. A session's secret: another client
with the right token but not the secret cannot resume a live, a dropped or a
SIGKILLed client's session, and the victim carries on unharmed."""
import os
import socket
import stat
import struct
import subprocess
import sys
import textwrap
import time

import pytest

import rgpu

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_resume import TRAIN, FaultProxy, Server, child, finish, until_step  # noqa: E402

TORCHHOOK = os.path.join(HERE, "..", "..", "torchhook")
MAGIC = 0x57504752
ERR_AUTH, ERR_TOO_LARGE, ERR_BAD_MAGIC = 32, 9, 2
MSG_HELLO, MSG_WELCOME, MSG_ERROR, MSG_CHUNK, MSG_NOTICE = 1, 2, 10, 3, 13


def frame(typ, payload):
    return struct.pack("<BBHIQ", typ, 0, 0, MAGIC, len(payload)) + payload


def hello(token=b"", session=0, secret=bytes(16)):
    """FORMAT.md §7.1: version, op-table hash, session, last_ack, secret, token."""
    return frame(MSG_HELLO, struct.pack("<I16sQQ16sI", rgpu._C.WIRE_VERSION, rgpu._C.op_table_hash(), session, 0,
                                        secret, len(token)) + token)


def recv_msg(s):
    def exact(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                raise EOFError
            b += c
        return b
    typ, _, _, magic, n = struct.unpack("<BBHIQ", exact(16))
    assert magic == MAGIC
    return typ, exact(n)


def expect_error(s):
    """The server's ERROR (code, message), then it closes (NOTICEs before it,
    not fatal, skipped: --journal none says so after WELCOME)."""
    typ, p = recv_msg(s)
    while typ == MSG_NOTICE:
        typ, p = recv_msg(s)
    assert typ == MSG_ERROR, typ
    code = struct.unpack("<I", p[:4])[0]
    s.settimeout(10)
    assert s.recv(1) == b""
    s.close()
    return code, p[8:].decode()


def run_child(code, **env):
    e = dict(os.environ, PYTHONPATH=TORCHHOOK)
    for k in ("RGPU_SERVER", "RGPU_TOKEN", "RGPU_TOKEN_FILE"):
        e.pop(k, None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True,
                          timeout=120)


def test_embedded_server_has_a_private_token():
    p = run_child("""
        import os, socket, stat, struct, sys, torch, rgpu
        sys.path.insert(0, %r)
        from test_auth import hello, expect_error
        assert (torch.ones(4, device="rgpu") * 2).sum().item() == 8.0
        d = rgpu.server._tmpdir
        print(oct(stat.S_IMODE(os.stat(os.path.join(d, "token")).st_mode)))
        s = socket.socket(socket.AF_UNIX)
        s.connect(os.path.join(d, "sock"))
        s.sendall(hello())
        print(*expect_error(s))
        s = socket.socket(socket.AF_UNIX)
        s.connect(os.path.join(d, "sock"))
        s.sendall(hello(b"0" * 64))
        print(*expect_error(s))
    """ % HERE)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "0o600"
    assert lines[1].startswith(f"{ERR_AUTH} no token")
    assert lines[2].startswith(f"{ERR_AUTH} wrong token")


USE = """
import torch, rgpu
try:
    print((torch.ones(3, device="rgpu") + 1).sum().item())
except ConnectionError as e:
    print("REFUSED", e)
"""


def test_token_from_env_file_or_default(tmp_path):
    srv = Server(tmp_path, "--journal", "none")
    try:
        tok = open(srv.token_file).read().strip()
        assert len(tok) == 64 and stat.S_IMODE(os.stat(srv.token_file).st_mode) == 0o600
        addr = f"127.0.0.1:{srv.port}"
        home = tmp_path / "home"
        home.mkdir()
        assert run_child(USE, RGPU_SERVER=addr, RGPU_TOKEN_FILE=srv.token_file).stdout == "6.0\n"
        assert run_child(USE, RGPU_SERVER=addr, RGPU_TOKEN=tok).stdout == "6.0\n"
        # the default token file under XDG_STATE_HOME
        (home / "rgpu").mkdir()
        (home / "rgpu" / "token").write_text(tok + "\n")
        assert run_child(USE, RGPU_SERVER=addr, XDG_STATE_HOME=str(home)).stdout == "6.0\n"
        out = run_child(USE, RGPU_SERVER=addr, RGPU_TOKEN="f" * 64).stdout
        assert out.startswith("REFUSED") and "wrong token" in out
        out = run_child(USE, RGPU_SERVER=addr, HOME=str(home / "nothing"), XDG_STATE_HOME="").stdout
        assert out.startswith("REFUSED") and "no token" in out and "RGPU_TOKEN_FILE" in out
        assert srv.log().count("error RGPU_ERR_AUTH") == 2
    finally:
        srv.stop()


def test_hostile_connections_while_an_honest_session_trains(tmp_path):
    srv = Server(tmp_path, "--journal", "none", "--max-message", "1M")
    tok = open(srv.token_file).read().strip().encode()
    honest = child(TRAIN, srv.port, srv.token_file, STEPS="60")
    try:
        codes = []
        for attack in ("wrong token", "garbage", "half frame", "oversized"):
            s = socket.create_connection(("127.0.0.1", srv.port))
            if attack == "wrong token":
                s.sendall(hello(b"x" * 64))
                codes.append(expect_error(s))
                continue
            s.sendall(hello(tok))
            typ, _ = recv_msg(s)
            assert typ == MSG_WELCOME
            if attack == "garbage":
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                codes.append(expect_error(s))
            elif attack == "half frame":
                s.sendall(struct.pack("<BBHIQ", MSG_CHUNK, 0, 0, MAGIC, 1000) + b"\0" * 10)
                s.close()     # the peer vanishes mid-frame: nothing to answer, the session is detached
            else:
                s.sendall(struct.pack("<BBHIQ", MSG_CHUNK, 0, 0, MAGIC, 1 << 40))
                codes.append(expect_error(s))
        r = finish(honest)
    finally:
        if honest.poll() is None:
            honest.kill()
        srv.stop()
    assert [c for c, _ in codes] == [ERR_AUTH, ERR_BAD_MAGIC, ERR_TOO_LARGE]
    assert "--max-message" in codes[2][1]
    assert len(r["losses"]) == 60 and r["stats"]["reconnects"] == 0
    assert "connection lost at op 0" in srv.log()


# ---------------------------------------------------------------------------
# A session's secret: the token admits a client to the server, not to another
# client's session.
SAYS_SESSION = "import rgpu\nprint('session', rgpu.server.info()['session'], flush=True)\n"
STEPS_SECRET = "60"


def session_of(p):
    line = p.stdout.readline()
    assert line.startswith("session "), (line, p.stderr.read()[-2000:] if p.poll() is not None else "")
    return int(line.split()[1])


def takeover(port, tok, sid):
    """Resume session sid with the server's token but no secret, then a random
    one: the (code, message) of each refusal."""
    out = []
    for secret in (bytes(16), os.urandom(16)):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(hello(tok, session=sid, secret=secret))
        out.append(expect_error(s))
    return out


def assert_refused(codes, sid):
    assert [c for c, _ in codes] == [ERR_AUTH, ERR_AUTH], codes
    assert "no session secret" in codes[0][1] and "wrong session secret" in codes[1][1], codes
    assert all(f"{sid:016x}" in m for _, m in codes), codes


@pytest.fixture(scope="module")
def solo(tmp_path_factory):
    """The losses of an undisturbed run of STEPS_SECRET steps."""
    tmp = tmp_path_factory.mktemp("solo")
    srv = Server(tmp, "--journal", "none")
    try:
        return finish(child(TRAIN, srv.port, srv.token_file, STEPS=STEPS_SECRET))["losses"]
    finally:
        srv.stop()


def test_live_session_cannot_be_taken_over(tmp_path, solo):
    """A second client with the token but not the secret tries to resume a
    training client's session, again and again: refused each time, and the
    trainer never notices (no reconnect, the same losses as alone)."""
    srv = Server(tmp_path, "--journal", "none")
    tok = open(srv.token_file).read().strip().encode()
    victim = child(SAYS_SESSION + TRAIN, srv.port, srv.token_file, STEPS=STEPS_SECRET)
    try:
        sid = session_of(victim)
        until_step(victim, 3)
        codes = []
        for _ in range(5):
            codes += takeover(srv.port, tok, sid)
        r = finish(victim)
    finally:
        if victim.poll() is None:
            victim.kill()
        srv.stop()
    for i in range(0, len(codes), 2):
        assert_refused(codes[i:i + 2], sid)
    assert r["losses"] == solo and r["stats"]["reconnects"] == 0
    assert "resumed" not in srv.log() and srv.log().count("error RGPU_ERR_AUTH") == 10


def test_dropped_session_cannot_be_taken_over_and_its_client_comes_back(tmp_path, solo):
    """The trainer's link drops and stays down (a proxy cuts it and refuses new
    connections); meanwhile another client with the token tries to resume the
    detached session: refused. The link comes back, the trainer resumes its
    session with its secret and ends with the same losses as alone."""
    srv = Server(tmp_path, "--journal", str(tmp_path / "journal"))
    tok = open(srv.token_file).read().strip().encode()
    proxy = FaultProxy(srv.port)
    victim = child(SAYS_SESSION + TRAIN, proxy.port, srv.token_file, STEPS=STEPS_SECRET)
    try:
        sid = session_of(victim)
        until_step(victim, 10)
        proxy.blackhole = True
        proxy.cut_all()
        srv.wait_log("connection lost at op")
        codes = takeover(srv.port, tok, sid)
        assert os.path.exists(tmp_path / "journal" / f"session-{sid:016x}.rgt")
        proxy.blackhole = False
        r = finish(victim)
    finally:
        if victim.poll() is None:
            victim.kill()
        proxy.close()
        srv.stop()
    assert_refused(codes, sid)
    assert r["losses"] == solo and r["stats"]["reconnects"] >= 1
    assert srv.log().count(": resumed at op") >= 1


def test_sigkilled_clients_session_cannot_be_taken_over(tmp_path):
    """A SIGKILLed client's session waits --grace seconds for its client;
    another client with the token but not the secret is refused, and the
    session stays as it was until its grace period ends (then it is freed,
    with the bytes it held)."""
    srv = Server(tmp_path, "--journal", str(tmp_path / "journal"), "--grace", "4")
    tok = open(srv.token_file).read().strip().encode()
    victim = child(SAYS_SESSION + TRAIN, srv.port, srv.token_file, STEPS="100000")
    try:
        sid = session_of(victim)
        until_step(victim, 5)
        victim.kill()
        victim.wait()
        srv.wait_log("connection lost at op")
        codes = takeover(srv.port, tok, sid)
        journal = tmp_path / "journal" / f"session-{sid:016x}.rgt"
        assert journal.exists()
        m = srv.wait_log(r"no client came back within 4 s \(--grace\): freed (\d+) bytes, journal removed", timeout=20)
    finally:
        if victim.poll() is None:
            victim.kill()
        srv.stop()
    assert_refused(codes, sid)
    assert int(m.group(1)) > 0 and not journal.exists()
    assert "resumed" not in srv.log()
