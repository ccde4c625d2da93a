"""Uploads on the cuda backend under cudaemu (run by run-tests.sh): when the
copy stream's device landing buffers cannot be had (a device of 48 MiB,
most of it cuBLAS's workspace), uploads of 256 KiB and more stay on the
compute stream, the server says so once, and every value is right."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(os.environ.get("RGPU_BACKEND") != "cuda",
                                reason="the cuda backend's upload paths under cudaemu (run-tests.sh)")

CLIENT = """
import torch, rgpu
g = torch.Generator().manual_seed(1)
for n in (100_000, 300_000, 1000):
    a = torch.randn(n, generator=g)
    r = a.to("rgpu")
    assert torch.equal((r * 2).cpu(), a * 2), n
    assert torch.equal(r.cpu(), a), n
print("ok")
"""


def test_no_copy_stream_without_device_memory(tmp_path):
    log = tmp_path / "server.log"
    env = dict(os.environ, CUDAEMU_MEM_MB="48", RGPU_SERVER_LOG=str(log))
    env.pop("RGPU_SERVER", None)
    r = subprocess.run([sys.executable, "-c", CLIENT], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    text = log.read_text()
    assert text.count("uploads stay on the compute stream (no copy stream)") == 1, text
