"""What the benchmarks that run their own rgpu-server share: on loopback TCP
(journal.py, latency.py) or on a Unix socket (nanogpt.py, cpu_kernels.py,
record_cost.py)."""
import os
import socket
import subprocess
import tempfile
import time


def start_unix_server(exe, backend, *args):
    """exe --unix DIR/sock --backend backend --journal none --token-file DIR/token
    --quiet args... in a fresh temporary DIR; returns (process, DIR, env) once
    the socket exists, env being the RGPU_SERVER / RGPU_TOKEN_FILE a client
    needs. Exits with a message when the server does not start."""
    d = tempfile.mkdtemp(prefix="rgpu-bench-")
    sock, tok = os.path.join(d, "sock"), os.path.join(d, "token")
    # no journal (nothing to resume in a benchmark); a private token the clients get via env
    p = subprocess.Popen([exe, "--unix", sock, "--backend", backend, "--journal", "none",
                          "--token-file", tok, "--quiet", *args])
    for _ in range(3000):
        if os.path.exists(sock) or p.poll() is not None:
            break
        time.sleep(0.01)
    if not os.path.exists(sock):
        p.kill()
        raise SystemExit(f"{exe} --backend {backend} did not start")
    return p, d, {"RGPU_SERVER": "unix:" + sock, "RGPU_TOKEN_FILE": tok}


def stop_unix_server(proc, tmp):
    """Stop what start_unix_server started: terminate (kill after 10 s) and
    remove its DIR."""
    import shutil
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    shutil.rmtree(tmp, ignore_errors=True)


def start_server(exe, tmp, *args, data=(), data_rw=()):
    """exe --listen 127.0.0.1:PORT --backend cpu --token-file tmp/token args...
    (and --data SPEC / --data-rw SPEC for each of data / data_rw: "[NAME=]DIR"),
    its log in tmp/server.log; returns (process, port, token path, log file)
    once it accepts connections."""
    args = list(args) + [a for spec in data for a in ("--data", spec)] + \
        [a for spec in data_rw for a in ("--data-rw", spec)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = os.path.join(tmp, "token")
    log = open(os.path.join(tmp, "server.log"), "wb")
    srv = subprocess.Popen([exe, "--listen", f"127.0.0.1:{port}", "--backend", "cpu", "--token-file", token, *args],
                           stdout=log, stderr=log)
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.02)
    return srv, port, token, log
