"""Packaging: `pip install --no-build-isolation .` of a clone into a fresh
virtual environment (torch from the system's site-packages), the clone
deleted afterwards: the hello world runs on the embedded server built into
the package, and the console scripts run the packaged programs.
`make install PREFIX=...` puts the server and tools on a host without Python."""
import os
import shutil
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def sh(*cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert p.returncode == 0, f"{cmd}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def test_pip_install_into_a_fresh_venv_then_the_clone_is_gone(tmp_path):
    clone = tmp_path / "clone"
    sh("git", "clone", "-q", REPO, str(clone))
    # the programs as this checkout built them (a fresh clone would build them itself: minutes of nvcc)
    shutil.copytree(os.path.join(REPO, "build"), clone / "build", symlinks=True,
                    ignore=shutil.ignore_patterns("tests"))
    # newer than the clone's sources (git clone stamps them now): make reuses them
    # instead of compiling everything again (six minutes of nvcc on 2 cores)
    later = time.time() + 2
    for root, _, files in os.walk(clone / "build"):
        for f in files:
            os.utime(os.path.join(root, f), (later, later), follow_symlinks=False)
    venv = tmp_path / "venv"
    sh(sys.executable, "-m", "venv", "--system-site-packages", str(venv))
    sh(str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation", "--no-deps", str(clone))
    shutil.rmtree(clone)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RGPU_") and k != "PYTHONPATH"}
    out = sh(str(venv / "bin" / "python"), "-c", textwrap.dedent("""
        import os, torch, rgpu
        assert "/venv/" in rgpu.__file__, rgpu.__file__
        print((torch.ones(4, device="rgpu") * 2).sum().item(), rgpu.server.server_binary())
    """), env=env, cwd=str(tmp_path))
    value, binary = out.split()
    assert value == "8.0" and binary.startswith(str(venv)), out
    ver = sh(str(venv / "bin" / "rgpu-server"), "--version", env=env)
    assert ver.startswith("rgpu-server 0.1.0"), ver
    assert "usage: rgpu-replay" in sh(str(venv / "bin" / "rgpu-replay"), "--help", env=env)
    assert "rgpu-run" in sh(str(venv / "bin" / "rgpu-run"), "--help", env=env)


def test_make_install_puts_the_programs_under_prefix(tmp_path):
    sh("make", "-C", REPO, "--no-print-directory", "install", f"PREFIX={tmp_path}")
    for p in ("rgpu-server", "rgpu-replay", "rgpu-diff", "rgpu-trace"):
        assert os.access(tmp_path / "bin" / p, os.X_OK), p
    assert sh(str(tmp_path / "bin" / "rgpu-server"), "--version").startswith("rgpu-server ")
