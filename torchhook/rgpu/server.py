"""The connection to an rgpu-server, made lazily on first use and thread-safely.

RGPU_SERVER=host:port or unix:/path uses a running server; its token comes
from RGPU_TOKEN, else the file RGPU_TOKEN_FILE, else the server's default token
file (~/.local/state/rgpu/token). Without RGPU_SERVER, an embedded
`rgpu-server --unix <tmp>/sock --backend $RGPU_BACKEND` (default auto) is started as a child process
(token in its private temp dir, no journal: it lives and dies with this
process) and stopped at exit. RGPU_RECORD=path.rgt also writes the trace there.
RGPU_GRAPHS=1 starts the embedded server with `--graphs on` (repeated calls of
a compiled graph replay as captured graphs; results never change);
RGPU_SERVER_LOG=path appends its log there instead of to its temp dir.
RGPU_PROFILE=DIR starts it with `--profile DIR`: each session's records timed
into a Chrome trace, DIR/session-N.json, written when the session ends.
A dropped connection is resumed by the C client (RGPU_RECONNECT_TIMEOUT);
when that is impossible, calls raise rgpu.SessionLost.
The server binary is $RGPU_SERVER_BIN, else the one installed in this package
(rgpu/bin/, pip install .), else <repo>/build/bin/rgpu-server next to it (a
checkout), else `rgpu-server` on PATH."""
import atexit
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
import time

from . import _C

START_TIMEOUT_S = float(os.environ.get("RGPU_SERVER_TIMEOUT", "30"))

_lock = threading.Lock()
_info = None        # what _C.connect returned, once connected
_proc = None        # the embedded server, if we started one
_tmpdir = None


def info():
    """The server's answer to the handshake ({"backend", "session", ...}); connects if needed."""
    return _info if _info is not None else _connect()


def is_connected():
    return _info is not None


def ensure():
    """Connect unless connected. Cheap when already connected."""
    if _info is None:
        _connect()


def _connect():
    global _info
    with _lock:
        if _info is not None:
            return _info
        record = os.environ.get("RGPU_RECORD") or None
        address = os.environ.get("RGPU_SERVER")
        if address:
            _info = _C.connect(address, record)
        else:
            _info = _connect_embedded(record)
        atexit.register(shutdown)
        if _info.get("backend", "").startswith("cpu (cuda"):   # a GPU host whose cuda failed its self-check
            warnings.warn(f"rgpu: the server is not using its GPU: backend {_info['backend']}", RuntimeWarning,
                          stacklevel=3)
        return _info


def server_binary():
    path = os.environ.get("RGPU_SERVER_BIN")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "bin", "rgpu-server"),                                  # pip install .
                 os.path.normpath(os.path.join(here, "..", "..", "build", "bin", "rgpu-server"))):  # a checkout
        if os.access(path, os.X_OK):
            return path
    path = shutil.which("rgpu-server")
    if path:
        return path
    raise RuntimeError("rgpu: rgpu-server not found (build it with `make`, set RGPU_SERVER_BIN, "
                       "put it on PATH, or set RGPU_SERVER=host:port to use a running server)")


def _connect_embedded(record):
    global _proc, _tmpdir
    binary = server_binary()
    _tmpdir = tempfile.mkdtemp(prefix="rgpu-")
    sock = os.path.join(_tmpdir, "sock")
    token_file = os.path.join(_tmpdir, "token")
    log_path = os.environ.get("RGPU_SERVER_LOG") or os.path.join(_tmpdir, "server.log")
    log = open(log_path, "a+b")
    args = [binary, "--unix", sock, "--backend", os.environ.get("RGPU_BACKEND", "auto"),
            "--token-file", token_file, "--journal", "none", "--exit-with-parent"]
    if os.environ.get("RGPU_GRAPHS", "") not in ("", "0"):
        args += ["--graphs", "on"]
    if os.environ.get("RGPU_PROFILE"):
        args += ["--profile", os.environ["RGPU_PROFILE"]]
    try:
        _proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    except OSError as e:
        log.close()
        _cleanup()
        raise RuntimeError(f"rgpu: cannot start {binary}: {e}") from None
    deadline = time.monotonic() + START_TIMEOUT_S
    last = None
    try:
        while True:
            if _proc.poll() is not None:
                raise RuntimeError(f"rgpu: embedded server {binary} exited with status "
                                   f"{_proc.returncode} before accepting connections; "
                                   f"its output:\n{_read_log(log)}")
            if os.path.exists(sock):
                try:
                    with open(token_file) as f:   # written before the socket appears
                        token = f.read().strip()
                    return _C.connect("unix:" + sock, record, token)
                except ConnectionError as e:   # socket bound but not listening yet
                    last = e
            if time.monotonic() > deadline:
                raise RuntimeError(f"rgpu: embedded server {binary} did not accept connections on "
                                   f"{sock} within {START_TIMEOUT_S:g} s (last error: {last}); "
                                   f"its output:\n{_read_log(log)}")
            time.sleep(0.01)
    except BaseException:
        _stop_server()
        _cleanup()
        raise
    finally:
        log.close()


def _read_log(f):
    f.flush()
    f.seek(0)
    return f.read().decode("utf-8", "replace")[-4000:] or "(nothing)"


def _stop_server():
    global _proc
    p, _proc = _proc, None
    if p is None or p.poll() is not None:
        return
    p.terminate()
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def _cleanup():
    global _tmpdir
    d, _tmpdir = _tmpdir, None
    if d:
        shutil.rmtree(d, ignore_errors=True)


def shutdown():
    """Disconnect (flushing what is queued) and stop the embedded server. Runs at exit."""
    global _info
    with _lock:
        if _info is not None:
            _info = None
            _C.close()
        _stop_server()
        _cleanup()
