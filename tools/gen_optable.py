"""Regenerate the op table in trace-format/FORMAT.md from trace-format/ops.def.

    python3 tools/gen_optable.py          # rewrite FORMAT.md between the markers
    python3 tools/gen_optable.py --check  # exit 1 when FORMAT.md is out of date (make test runs this)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = os.path.join(ROOT, "trace-format", "ops.def")
DOC = os.path.join(ROOT, "trace-format", "FORMAT.md")
BEGIN, END = "<!-- optable:begin -->", "<!-- optable:end -->"
LINE = re.compile(r'^X\((\w+),\s*"([^"]+)",\s*(\d+),\s*(\d+),\s*([^)]*)\)\s*(?:/\*(.*?)\*/)?')
SECTION = re.compile(r"^/\*\s*---\s*(.*?)\s*(?:-+\s*)?\*/")
FLAGS = {"RGPU_OPF_WAIT": "WAIT", "RGPU_OPF_FACTORY": "FACTORY", "RGPU_OPF_VIEW": "VIEW",
         "RGPU_OPF_CONTROL": "CONTROL", "RGPU_OPF_VARIADIC": "VARIADIC"}


def table():
    rows, n = [], 0
    for raw in open(OPS):
        line = raw.strip()
        s = SECTION.match(line)
        if s:
            rows.append(f"| | **{s.group(1).rstrip(' -')}** | | | | | |")
            continue
        m = LINE.match(line)
        if not m:
            continue
        enum, name, nin, nout, flags, comment = m.groups()
        fl = " ".join(FLAGS.get(f.strip(), f.strip()) for f in flags.split("|") if f.strip() not in ("", "0")) or "–"
        args = (comment or "").strip().replace("|", "\\|") or "–"
        rows.append(f"| {n} | {enum} | `{name}` | {nin} | {nout} | {fl} | {args} |")
        n += 1
    head = ["| # | enum | name (ATen overload) | n_in | n_out | flags | inputs, args, outputs (from ops.def) |",
            "|---|------|----------------------|------|-------|-------|-------------------------------------|"]
    return "\n".join(head + rows), n


def main():
    body, n = table()
    doc = open(DOC).read()
    if BEGIN not in doc or END not in doc:
        sys.exit(f"{DOC}: markers {BEGIN} / {END} not found")
    new = doc[:doc.index(BEGIN) + len(BEGIN)] + "\n" + body + "\n" + doc[doc.index(END):]
    new = re.sub(r"RGPU_OP_COUNT == \d+", f"RGPU_OP_COUNT == {n}", new)
    if "--check" in sys.argv:
        if new != doc:
            sys.exit("trace-format/FORMAT.md's op table is out of date with ops.def: run python3 tools/gen_optable.py")
        return
    open(DOC, "w").write(new)
    print(f"FORMAT.md: {n} ops")


if __name__ == "__main__":
    main()
