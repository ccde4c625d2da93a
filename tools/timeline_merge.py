"""Merge the timelines of one run into one Chrome trace.

RGPU_PROFILE=DIR makes the client write DIR/client-<pid>.json (its waits and
the recording of each chunk) and the embedded server DIR/session-N.json (each
record's time on the server); all of them stamp CLOCK_MONOTONIC microseconds,
so on one host they line up. This puts every file of DIR (or the files
named) into one trace, each server session a process of its own:

    python tools/timeline_merge.py DIR -o run.json      # open in ui.perfetto.dev
"""
import argparse
import glob
import json
import os
import sys


def merge(paths):
    events, next_pid = [], 1
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        evs = d.get("traceEvents", [])
        if os.path.basename(path).startswith("session-"):
            pid, next_pid = next_pid, next_pid + 1   # server files all say pid 1
            for e in evs:
                e["pid"] = pid
        events += evs
    return {"displayTimeUnit": "ms", "traceEvents": events,
            "otherData": {"merged": [os.path.basename(p) for p in paths]}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="a directory (every *.json in it) or files")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    paths = []
    for x in a.inputs:
        paths += sorted(glob.glob(os.path.join(x, "*.json"))) if os.path.isdir(x) else [x]
    paths = [p for p in paths if os.path.abspath(p) != os.path.abspath(a.output)]
    if not paths:
        print(f"timeline_merge: no timelines in {' '.join(a.inputs)}", file=sys.stderr)
        return 1
    with open(a.output, "w") as f:
        json.dump(merge(paths), f)
    print(f"timeline_merge: {len(paths)} files -> {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
