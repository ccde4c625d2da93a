"""rgpu-run: run a command with its rgpu tensors on a GPU host.

    rgpu-run --host [user@]host [--ssh-port N] [-i KEY] [--] command ...
    rgpu-run --server HOST:PORT [--] command ...       (a server already reachable)
    python -m rgpu.run ...                             (the same)

Sets RGPU_SERVER for the command (ssh://[user@]host[:port], or HOST:PORT) and
RGPU_SSH when a key is given, runs it, and exits with its exit status. Over
ssh the user's own OpenSSH is used (~/.ssh/config applies); on the host,
`rgpu-server --stdio` starts or reuses the user's rgpu-server daemon."""
import argparse
import os
import shlex
import subprocess
import sys


def build_env(a, environ):
    """The command's environment for the parsed options a."""
    env = dict(environ)
    if a.server:
        env["RGPU_SERVER"] = a.server
    else:
        env["RGPU_SERVER"] = f"ssh://{a.host}" + (f":{a.ssh_port}" if a.ssh_port else "")
        if a.identity:
            ssh = shlex.split(environ.get("RGPU_SSH", "ssh"))
            env["RGPU_SSH"] = " ".join(ssh + ["-i", a.identity])
    return env


def main(argv=None):
    ap = argparse.ArgumentParser(prog="rgpu-run", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--host", help="[user@]host to reach over ssh")
    where.add_argument("--server", help="HOST:PORT or unix:PATH of a running rgpu-server")
    ap.add_argument("--ssh-port", type=int, help="ssh port on the host")
    ap.add_argument("-i", dest="identity", help="ssh identity file (private key)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command to run")
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command given")
    if a.server and (a.ssh_port or a.identity):
        ap.error("--ssh-port and -i go with --host")
    try:
        return subprocess.call(cmd, env=build_env(a, os.environ))
    except FileNotFoundError:
        print(f"rgpu-run: {cmd[0]}: command not found", file=sys.stderr)
        return 127
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
