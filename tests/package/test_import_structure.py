"""The package's import graph, read from the source (ast, nothing imported): no module of nqf
imports itself back through others (function-level imports included), no experiment kind
imports another kind (no module of a kind's folder imports a module of another kind's folder): shared
code lives in the library or in nqf.experiments' helper modules; and only figure modules import
figure code."""
import ast
from pathlib import Path

import helpers

from nqf.experiments import KINDS

ROOT = helpers.ROOT / "nqf"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the nqf modules it imports anywhere in its source (``from nqf.a import b`` counts
    as an edge to nqf.a.b when that is a module, else to nqf.a)."""
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    deps.add(target if target in paths else base)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in paths and d != name}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every back edge of a depth-first search, as the cycle it closes (empty when acyclic).
    The top package ``nqf`` is skipped: its names load lazily by string (importlib), not by import."""
    state, stack, cycles = {}, [], []

    def visit(u):
        state[u] = "open"
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if v == "nqf":
                continue
            if state.get(v) == "open":
                cycles.append(stack[stack.index(v):] + [v])
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"

    for u in sorted(graph):
        if u not in state:
            visit(u)
    return cycles


def test_the_finder_sees_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_nqf():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_kind_imports_another_kind():
    graph = import_graph()
    kinds = {f"nqf.experiments.{k}" for k in KINDS}
    assert kinds <= set(graph), "every registered kind is a package of nqf.experiments"
    crossing = {k: sorted(graph[k] & (kinds - {k})) for k in kinds if graph[k] & (kinds - {k})}
    assert not crossing, f"kinds importing other kinds: {crossing}"


def kind_folders(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Kind package nqf.experiments.<kind> -> its modules (the package and every module in its folder)."""
    return {f"nqf.experiments.{k}": {m for m in graph if m == f"nqf.experiments.{k}"
                                     or m.startswith(f"nqf.experiments.{k}.")} for k in KINDS}


def test_a_kinds_modules_import_no_other_kind():
    graph = import_graph()
    folders = kind_folders(graph)
    assert all(f"{kind}.figure" in modules for kind, modules in folders.items()), "every kind has a figure module"
    crossing = {}
    for kind, modules in folders.items():
        others = set().union(*(mods for k, mods in folders.items() if k != kind))
        for m in modules:
            if graph[m] & others:
                crossing[m] = sorted(graph[m] & others)
    assert not crossing, f"modules of one kind importing another kind: {crossing}"


def figure_modules(graph: dict[str, set[str]]) -> set[str]:
    """The figure stages nqf.experiments.<kind>.figure and the panel the power-law kinds share."""
    return {f"nqf.experiments.{k}.figure" for k in KINDS} | {"nqf.experiments.powerlaw_figure"}


def test_no_kind_imports_figure_code():
    graph = import_graph()
    figures = figure_modules(graph)
    outside = {m: sorted(graph[m] & figures) for m in graph if m not in figures and graph[m] & figures}
    assert not outside, f"modules other than figure modules importing figure code: {outside}"


# The package by concern, lowest first: a module imports only modules of its own package or of a
# package on a lower layer (nqf itself and nqf.validate sit below everything). Packages on one layer
# do not import each other.
LAYERS = (("theory", "io"), ("data", "architectures"), ("training", "plotting"), ("experiments",),
          ("pipeline",))
PACKAGES = {p for layer in LAYERS for p in layer}


def layer_of(module: str) -> tuple[int, str]:
    """(layer, package) of a module of nqf; the root modules (nqf, nqf.errors, nqf.validate) are
    layer -1, the command line (nqf.__main__) sits on the pipeline's layer."""
    parts = module.split(".")
    package = "pipeline" if module == "nqf.__main__" else parts[1] if len(parts) > 1 and parts[1] in PACKAGES else ""
    for rank, packages in enumerate(LAYERS):
        if package in packages:
            return rank, package
    return -1, package


def upward_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Module -> the modules it imports that sit on its own layer in another package or above it."""
    found = {}
    for module, deps in graph.items():
        rank, package = layer_of(module)
        bad = sorted(d for d in deps if d != "nqf" and (layer_of(d)[0] > rank
                                                        or (layer_of(d)[0] == rank and layer_of(d)[1] != package)))
        if bad:
            found[module] = bad
    return found


def test_the_layer_finder_sees_an_upward_import():
    graph = {"nqf.theory.forms": {"nqf.training.loop"}, "nqf.training.loop": {"nqf.theory.forms"},
             "nqf.io.netcdf": {"nqf.theory.forms"}}
    assert upward_imports(graph) == {"nqf.theory.forms": ["nqf.training.loop"], "nqf.io.netcdf": ["nqf.theory.forms"]}


def test_imports_run_one_way_down_the_layers():
    found = upward_imports(import_graph())
    assert not found, "imports against the layers (pipeline -> experiments -> training, plotting -> " \
                      "data, architectures -> theory, io): " + "; ".join(f"{m} -> {', '.join(d)}" for m, d in found.items())
