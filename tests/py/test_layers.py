"""torchhook/rgpu/ imports one way: no module imports, directly or through
others, a module that imports it back.

Every relative import counts, wherever it is (module level or inside a
function: a function-level import only hides a circle until the call), so
the package's modules form layers: pending, registry and tensor below
transfer and args, those below datadep and opmap, and dispatch above them.
A module a lower one needs to call back (cplx uses dispatch's view handler)
is handed down at import instead (cplx.use_dispatch, tensor.set_dispatcher),
or registers into a table the lower module owns (registry.register)."""
import ast
import os

PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torchhook", "rgpu")


def import_graph(pkg=PKG):
    """{module: {module it imports: [line, ...]}} over pkg/*.py, from every
    `from . import x`, `from .x import y` and `from .x.y import z`."""
    mods = {f[:-3] for f in os.listdir(pkg) if f.endswith(".py")}
    graph = {}
    for m in sorted(mods):
        with open(os.path.join(pkg, m + ".py")) as f:
            tree = ast.parse(f.read(), m + ".py")
        deps = {}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.level != 1:
                continue
            if node.module:
                targets = [node.module.split(".")[0]]
            else:
                targets = [a.name for a in node.names]
            for t in targets:
                if t in mods and t != m:
                    deps.setdefault(t, []).append(node.lineno)
        graph[m] = deps
    return graph


def find_cycle(graph):
    """One import circle as [a, b, ..., a], or None."""
    state = {}                  # 1: on the current path, 2: done
    path = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state:
                c = visit(d)
                if c:
                    return c
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            c = visit(m)
            if c:
                return c
    return None


def describe(graph, cycle):
    return " -> ".join(cycle) + "\n" + "\n".join(
        f"  {a}.py imports {b} at line {', '.join(map(str, graph[a][b]))}" for a, b in zip(cycle, cycle[1:]))


def test_find_cycle_finds_one():
    g = {"a": {"b": [1]}, "b": {"c": [2]}, "c": {"a": [3]}, "d": {"a": [4]}}
    c = find_cycle(g)
    assert c is not None and c[0] == c[-1] and set(c) == {"a", "b", "c"}
    assert find_cycle({"a": {"b": [1]}, "b": {}, "c": {"a": [1], "b": [2]}}) is None


def test_no_import_cycle():
    graph = import_graph()
    assert {"dispatch", "opmap", "tensor", "transfer"} <= set(graph)
    assert graph["dispatch"], "no relative imports found: is the parser right?"
    cycle = find_cycle(graph)
    if cycle:
        print("import circle in torchhook/rgpu/:\n" + describe(graph, cycle))
    assert cycle is None, "import circle in torchhook/rgpu/: " + describe(graph, cycle)
