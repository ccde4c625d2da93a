#!/usr/bin/env python3
"""A stand-in for `ssh` in tests (RGPU_SSH="python3 tests/py/fake_ssh.py"):
takes ssh's options and target like ssh does, then runs the remote command
on this machine, in place (exec: its pid is this process's, so a test can
kill "the ssh" by the pid it writes to $FAKE_SSH_PIDS/<pid>). A target named
"unreachable" fails as ssh does for an unknown host."""
import os
import shlex
import sys

args = sys.argv[1:]
i = 0
while i < len(args) and args[i].startswith("-"):
    i += 2 if args[i] in ("-o", "-p", "-F", "-i", "-l") else 1
target, command = args[i], " ".join(args[i + 1:])
if target.split("@")[-1] == "unreachable":
    sys.stderr.write("ssh: Could not resolve hostname unreachable: Name or service not known\n")
    sys.exit(255)
d = os.environ.get("FAKE_SSH_PIDS")
if d:
    open(os.path.join(d, str(os.getpid())), "w").close()
parts = shlex.split(command)
try:
    os.execvp(parts[0], parts)
except OSError as e:
    sys.stderr.write(f"sh: 1: {parts[0]}: not found\n" if isinstance(e, FileNotFoundError) else f"sh: {e}\n")
    sys.exit(127)
