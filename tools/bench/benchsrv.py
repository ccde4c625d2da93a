"""What the benchmarks that run their own rgpu-server on loopback TCP share
(journal.py, latency.py)."""
import os
import socket
import subprocess
import time


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
