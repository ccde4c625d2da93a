"""What the tests that start an rgpu-server of their own share (test_basic.py,
test_resume.py and the files that import its Server): a free port, waiting
until the server listens, stopping a process."""
import contextlib
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc, port, log, timeout=20):
    """Returns once 127.0.0.1:port accepts a connection; fails, with log(),
    when proc exits first or after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert proc.poll() is None, "server exited:\n" + log()
            assert time.monotonic() < deadline, "server did not start\n" + log()
            time.sleep(0.02)


def stop(proc, timeout=10):
    """SIGTERM, then SIGKILL when proc is still there after timeout seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout)
        return
    proc.kill()
    proc.wait()
