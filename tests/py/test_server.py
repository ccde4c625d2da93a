"""The connection: asynchronous errors, the embedded server's life cycle, RGPU_RECORD,
and clear errors when the server can't start (each in a child process, since a
process connects once)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import rgpu

TORCHHOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torchhook")


def child(code, timeout=120, **env):
    e = dict(os.environ, PYTHONPATH=TORCHHOOK)
    e.pop("RGPU_SERVER", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True,
                          text=True, timeout=timeout)


def test_remote_error_surfaces_at_the_next_wait():
    C = rgpu._C
    x = torch.ones(2, device="rgpu")
    bad = C.record(C.OP_ADD_SCALAR, ((C.new_id(), C.new_id(), C.DTYPE_F32, (2,), (1,), 0, 8),),
                   (987654321,), (1, 1))
    with pytest.raises(rgpu.RemoteError, match=rf"op {bad}\b.*add\.Scalar"):
        x.sum().item()
    assert issubclass(rgpu.RemoteError, RuntimeError)
    assert (x + 1).sum().item() == 4.0          # reported once; the session goes on


def test_embedded_server_is_stopped_and_cleaned_up_at_exit():
    p = child("""
        import torch, rgpu
        assert (torch.ones(4, device="rgpu") * 2).sum().item() == 8.0
        print(rgpu.server._tmpdir, rgpu.server._proc.pid)
    """)
    assert p.returncode == 0, p.stderr
    tmpdir, pid = p.stdout.split()
    assert os.path.isabs(tmpdir) and not os.path.exists(tmpdir)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid), 0)


def test_embedded_server_stops_when_its_client_is_killed():
    """A client killed without atexit (SIGKILL, abort) leaves no server behind:
    the embedded server runs with --exit-with-parent."""
    import signal
    import time
    p = child("""
        import os, signal, sys, torch, rgpu
        assert (torch.ones(4, device="rgpu") * 2).sum().item() == 8.0
        print(rgpu.server._proc.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert p.returncode == -signal.SIGKILL, p.stderr
    pid = int(p.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:                        # our grandchild, reparented: reaped by init (or by us as subreaper)
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    with open(f"/proc/{pid}/status") as f:
        state = [ln for ln in f if ln.startswith("State")]
    assert "zombie" in "".join(state), f"server {pid} still running after its client was killed: {state}"


def test_connection_is_lazy():
    p = child("""
        import torch, rgpu
        assert not rgpu.server.is_connected() and rgpu.server._proc is None
        torch.zeros(1, device="rgpu")
        print(rgpu.server.is_connected())
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True"]


def test_rgpu_record_writes_a_trace(tmp_path):
    path = tmp_path / "t.rgt"
    p = child("""
        import torch, rgpu
        x = torch.tensor([1.5, 2.5, 3.5], device="rgpu")      # an upload: one blob
        print(torch.arange(4, device="rgpu").sum().item(), (x * 2).sum().item())
        print(rgpu.stats()["ops"])
    """, RGPU_RECORD=str(path))
    assert p.returncode == 0, p.stderr
    out = p.stdout.split()
    assert out[:2] == ["6", "15.0"]
    ops = int(out[2])

    def sql(q):   # the sqlite3 shell, as a user would open the file
        r = subprocess.run(["sqlite3", str(path), q], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    assert sql("select value from meta where key='magic'") == "rgpu-trace"
    # the stream covers every recorded op, in order, without gaps
    rows = [tuple(map(int, line.split("|"))) for line in sql("select seq, first_op, op_count from stream order by seq").splitlines()]
    assert rows, "no chunks listed"
    nxt = 0
    for seq, first, count in rows:
        assert first == nxt
        nxt += count
    assert nxt >= ops          # (frees queued at exit may add a last FREE record)
    assert int(sql("select count(*) from chunks")) >= 1
    # the uploaded bytes are a blob of 12 bytes (3 float32), named by their hash
    assert sql("select raw_len from blobs") == "12"
    assert sql("select length(hash) from blobs") == "16"
    # the waits' results are kept by op index
    assert int(sql("select count(*) from results")) == 2


def fake_server(tmp_path, name, script):
    """An executable shell script standing in for rgpu-server."""
    fake = tmp_path / name
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    return str(fake)


def first_op_error(exc, **env):
    """A child's first op on device "rgpu" with env; returns its output, which
    is `ERR <seconds> <message>` when the op raised exc."""
    p = child(f"""
        import time, torch, rgpu
        t = time.monotonic()
        try:
            torch.ones(1, device="rgpu")
        except {exc} as e:
            print("ERR", round(time.monotonic() - t), e)
    """, **env)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_server_that_dies_at_start_is_reported_with_its_output(tmp_path):
    fake = fake_server(tmp_path, "bad-server", "echo 'no GPU and no luck' >&2\nexit 3\n")
    out = first_op_error("RuntimeError", RGPU_SERVER_BIN=fake)
    assert "ERR" in out and "status 3" in out and "no GPU and no luck" in out


def test_server_that_never_listens_times_out(tmp_path):
    fake = fake_server(tmp_path, "mute-server", "echo 'starting slowly' >&2\nexec sleep 60\n")
    out = first_op_error("RuntimeError", RGPU_SERVER_BIN=fake, RGPU_SERVER_TIMEOUT="1")
    assert out.startswith("ERR 1 ") and "did not accept" in out and "starting slowly" in out


def test_bad_rgpu_server_address_raises():
    out = first_op_error("ConnectionError", RGPU_SERVER="unix:/nonexistent/rgpu.sock")
    assert out.startswith("ERR")


def test_versions_agree():
    """rgpu-server --version, rgpu.__version__ and pyproject.toml name one version."""
    import re
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    out = subprocess.run([os.path.join(repo, "build", "bin", "rgpu-server"), "--version"], capture_output=True,
                         text=True, timeout=30).stdout
    m = re.match(r"rgpu-server (\S+) \(trace format 1, wire protocol 2, (\d+) ops", out)
    assert m and m.group(1) == rgpu.__version__ and int(m.group(2)) == rgpu._C.OP_COUNT, out
    pyproject = open(os.path.join(repo, "pyproject.toml")).read()
    assert f'version = "{rgpu.__version__}"' in pyproject
    torch.ones(1, device="rgpu").sum().item()
    assert rgpu.stats()["server_version"] == rgpu.__version__      # the handshake carries it


# ---------------------------------------------------------------------------
# A server that breaks the protocol: the client's wait fails at once, naming
# what came (FORMAT.md §7.1: unknown types and undecodable messages are
# protocol errors), instead of waiting out RGPU_WAIT_TIMEOUT.
def fake_protocol_server(answer):
    """A TCP listener speaking the handshake right (a WELCOME whose backend
    runs every op), then answering the client's first WAIT with the bytes
    answer (a whole message, header included). Returns its port."""
    import socket
    import struct
    import threading
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_auth import MSG_WELCOME, frame, recv_msg
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)

    def serve():
        s, _ = ls.accept()
        ls.close()
        try:
            recv_msg(s)                                                    # HELLO
            nbits = rgpu._C.OP_COUNT
            body = struct.pack("<I16sQQ16s32sI", rgpu._C.WIRE_VERSION, rgpu._C.op_table_hash(), 0x5eed, 0,
                               b"\x01" * 16, b"fake", nbits) + b"\xff" * ((nbits + 7) // 8)
            s.sendall(frame(MSG_WELCOME, body))
            while True:
                typ, _ = recv_msg(s)
                if typ == 7:                                               # WAIT
                    s.sendall(answer)
                    while s.recv(4096):                                    # until the client goes
                        pass
                    return
        except (EOFError, OSError):
            pass
        finally:
            s.close()

    threading.Thread(target=serve, daemon=True).start()
    return ls.getsockname()[1]


PROTOCOL_CHILD = """
    import time, torch, rgpu
    rgpu.server.ensure()
    y = torch.ones(2, device="rgpu").sum()      # recorded: no wait yet (an op's first call is slow in Python)
    t = time.monotonic()
    try:
        y.item()
        print("NO ERROR")
    except RuntimeError as e:
        print("ERR", f"{time.monotonic() - t:.2f}", type(e).__name__, e)
"""


@pytest.mark.parametrize("what,answer,says", [
    ("short RESULT", (8, b"\x07" * 10), "a RESULT that does not decode (10 bytes"),
    ("RESULT msg_len", (8, bytes(24) + b"\xff\x00\x00\x00" + b"ab"), "a RESULT that does not decode (30 bytes"),
    ("ACK of 4 bytes", (9, bytes(4)), "an ACK of 4 bytes"),
    ("unknown type", (14, bytes(8)), "a message of unknown type 14"),
    ("NOTICE cut short", (13, bytes(4)), "a NOTICE"),
    ("CHUNK from the server", (3, bytes(32)), "an unexpected CHUNK message"),
])
def test_protocol_error_from_the_server_fails_the_wait_at_once(what, answer, says):
    import struct
    typ, payload = answer
    port = fake_protocol_server(struct.pack("<BBHIQ", typ, 0, 0, 0x57504752, len(payload)) + payload)
    p = child(PROTOCOL_CHILD, RGPU_SERVER=f"127.0.0.1:{port}", RGPU_TOKEN="t" * 64, RGPU_WAIT_TIMEOUT="3600")
    assert p.returncode == 0, p.stderr
    out = p.stdout.strip()
    assert out.startswith("ERR "), (what, out)
    _, secs, cls, msg = out.split(" ", 3)
    assert float(secs) < 1.0, (what, out)
    assert cls == "RemoteError" and "protocol error: rgpu-server at 127.0.0.1:" in msg and says in msg, (what, out)
