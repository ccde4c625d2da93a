#!/usr/bin/env python3
"""rewrite.py — the one source transformation cudaemu needs before the host
C++ compiler can take a .cu file: the two constructs that are syntax, not
functions. Everything else (qualifiers, threadIdx, intrinsics, atomics) is
handled by the force-included prelude cudaemu.h.

  KERNEL<<<grid, block[, shmem[, stream]]>>>(args)
      -> ::cudaemu::launch(KERNEL, "KERNEL", __FILE__, __LINE__, grid, block[, ...])(args)
  __shared__ T a[N][M], b;          (static shared memory, one per block)
      -> auto &a = *::cudaemu::shared_static<T[N][M]>("file:line:a"), &b = ...;
  extern __shared__ T s[];          (dynamic shared memory)
      -> T *const s = (T *)::cudaemu::shared_dynamic();

Line numbers are kept (every replacement stays on its line) and a #line
directive names the original file, so compiler messages and __FILE__ point at
replayer/cuda/. Usage: rewrite.py SRC DST
"""
import re
import sys


def strip_comments_mask(text):
    """A copy of text with comments and string literals blanked (same length),
    so the searches below never match inside them."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9:]*$")


def kernel_start(mask, end):
    """Start of the kernel expression that ends just before mask[end]
    (an identifier, optionally with a balanced <...> template argument list)."""
    i = end
    while i > 0 and mask[i - 1].isspace():
        i -= 1
    if mask[i - 1] == ">":
        depth = 0
        j = i - 1
        while j >= 0:
            if mask[j] == ">":
                depth += 1
            elif mask[j] == "<":
                depth -= 1
                if depth == 0:
                    break
            j -= 1
        i = j
    m = IDENT.search(mask[:i])
    if not m:
        raise SystemExit(f"rewrite.py: cannot find the kernel name before <<< at offset {end}")
    return m.start()


def rewrite_launches(text):
    mask = strip_comments_mask(text)
    out, pos = [], 0
    while True:
        a = mask.find("<<<", pos)
        if a < 0:
            break
        b = mask.find(">>>", a)
        if b < 0:
            raise SystemExit("rewrite.py: <<< without >>>")
        s = kernel_start(mask, a)
        kern = text[s:a].strip()
        cfg = text[a + 3:b]
        name = " ".join(kern.split()).replace('"', "")
        out.append(text[pos:s])
        out.append(f'::cudaemu::launch({kern}, "{name}", __FILE__, __LINE__, {cfg})')
        pos = b + 3
    out.append(text[pos:])
    return "".join(out)


SHARED = re.compile(r"(\bextern\s+)?\b__shared__\b([^;]*);")
DECL = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*((?:\[[^\]]*\]\s*)*)$")


def split_top(s):
    parts, depth, cur = [], 0, ""
    for c in s:
        if c in "([<":
            depth += 1
        elif c in ")]>":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return parts


def rewrite_shared(text, path):
    mask = strip_comments_mask(text)
    out, pos = [], 0
    for m in SHARED.finditer(mask):
        body = text[m.start(2):m.end(2)]
        line = text.count("\n", 0, m.start()) + 1
        parts = split_top(body)
        # the first part is "TYPE declarator": the declarator is the last
        # identifier with its [..] suffixes
        first = re.match(r"^(.*?)([A-Za-z_][A-Za-z_0-9]*\s*(?:\[[^\]]*\]\s*)*)$", parts[0].strip(), re.S)
        if not first:
            raise SystemExit(f"{path}:{line}: rewrite.py: cannot parse __shared__ declaration")
        typ = first.group(1).strip()
        decls = [first.group(2)] + parts[1:]
        if m.group(1):
            d = DECL.match(decls[0])
            if len(decls) != 1 or not d:
                raise SystemExit(f"{path}:{line}: rewrite.py: cannot parse extern __shared__ declaration")
            rep = f"{typ} *const {d.group(1)} = ({typ} *)::cudaemu::shared_dynamic()"
        else:
            items = []
            for k, decl in enumerate(decls):
                d = DECL.match(decl)
                if not d:
                    raise SystemExit(f"{path}:{line}: rewrite.py: cannot parse __shared__ declarator '{decl}'")
                name, dims = d.group(1), "".join(d.group(2).split())
                items.append(f'{"auto " if k == 0 else ""}&{name} = '
                             f'*::cudaemu::shared_static<{typ}{dims}>("{path}:{line}:{name}")')
            rep = ", ".join(items)
        out.append(text[pos:m.start()])
        out.append(rep + ";")
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: rewrite.py SRC DST")
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    new = rewrite_shared(rewrite_launches(text), src)
    assert new.count("\n") == text.count("\n"), "rewrite.py must keep line numbers"
    with open(dst, "w") as f:
        f.write(f'#line 1 "{src}"\n' + new)


if __name__ == "__main__":
    main()
