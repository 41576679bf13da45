"""Layers import one way, and no two modules import each other.

Each folder is one layer; a module imports its own layer and the layers it lists below, never one above:

    layer            folder                        what it holds                                   may import
    device runtime   ditskip_edge/runtime/         what a phone runs: bundle -> trained LoRA       (nothing of ours)
    model library    ditskip_edge/ (the rest)      model views, quantization, LoRA, skip plan,     device runtime
                                                   residual cache, selection, memory estimate,
                                                   the eager reference trainer
    exporters        export/                       lower a bundle's programs to ExecuTorch / ORT   model library,
                                                                                                   device runtime
    device tests     device_tests/                 runs what a phone runs, measures it             model library,
                                                                                                   device runtime
    compiler         compiler/                     compile orchestration, subcommands, the         exporters, model
                                                   `ditskip-edge` console script                   library, device
                                                                                                   runtime
    scripts          examples/ benchmarks/         demo, measurements, the personalization         everything
                     testbed/ tests/               testbed, tests (nothing imports them but
                                                   scripts)

Properties protected (read from the source with `ast`, nothing imported):
- no import, at module level or inside a function (a lazy import that runs back up is still a dependency), goes
  to a layer its module may not import; the failure names the file, the line and both layers;
- no module circle anywhere in the project (module-level and function-level imports alike): the failure names each
  import of the circle by file and line;
- every top-level package has a layer (a new one must be placed in LAYERS);
- the checker itself finds a planted import back up and a planted circle.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {"android_demo", "ios_demo", "device_runtime", "demo_out", "docs", "build", "dist", "node_modules",
             "__pycache__"}

# (layer, module prefixes, layers it may import besides itself); the longest matching prefix wins
LAYERS = [
    ("device runtime", ("ditskip_edge.runtime",), ()),
    ("model library", ("ditskip_edge",), ("device runtime",)),
    ("exporters", ("export",), ("model library", "device runtime")),
    ("device tests", ("device_tests",), ("model library", "device runtime")),
    ("compiler", ("compiler",), ("exporters", "model library", "device runtime")),
]
SCRIPTS = "scripts"               # every other top-level folder: may import anything, imported by scripts alone
SCRIPT_FOLDERS = {"examples", "benchmarks", "testbed", "tests"}


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    path: Path
    line: int
    lazy: bool                    # inside a function

    def where(self, root: Path) -> str:
        kind = "function-level" if self.lazy else "module-level"
        return f"{self.path.relative_to(root)}:{self.line}: {self.src} imports {self.dst} ({kind})"


def project_modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under `root` outside hidden, app and build folders."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part.startswith(".") or part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module `name` names (`a.b.func` -> `a.b`), or None for a third-party / stdlib name."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def import_edges(modules: dict[str, Path]) -> list[Edge]:
    edges = []
    for src, path in modules.items():
        package = src.split(".") if path.name == "__init__.py" else src.split(".")[:-1]

        def visit(node: ast.AST, lazy: bool) -> None:
            for child in ast.iter_child_nodes(node):
                inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                targets = []
                if isinstance(child, ast.Import):
                    targets = [_resolve(a.name, modules) for a in child.names]
                elif isinstance(child, ast.ImportFrom):
                    if child.level:
                        base = package[:len(package) - (child.level - 1)]
                        module = ".".join(base + ([child.module] if child.module else []))
                    else:
                        module = child.module
                    # `from pkg import mod` names a module; `from mod import name` names something in it
                    targets = [_resolve(f"{module}.{a.name}", modules) or _resolve(module, modules)
                               for a in child.names]
                for dst in dict.fromkeys(targets):
                    if dst is not None and dst != src:
                        edges.append(Edge(src, dst, path, child.lineno, inner))
                visit(child, inner)

        visit(ast.parse(path.read_text(), filename=str(path)), False)
    return edges


def layer_of(module: str) -> str:
    best = None
    for layer, prefixes, _ in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (layer, len(prefix))
    return best[0] if best else SCRIPTS


def upward_imports(edges: list[Edge]) -> list[Edge]:
    """Imports of a layer the importing module's layer may not import."""
    may = {layer: {layer, *below} for layer, _, below in LAYERS}
    return [e for e in edges
            if layer_of(e.src) != SCRIPTS and layer_of(e.dst) not in may[layer_of(e.src)]]


def circles(edges: list[Edge]) -> list[list[Edge]]:
    """Each set of modules that reach each other through imports (Tarjan's strongly connected components), as one
    shortest circle of imports through its first module."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.src, set()).add(e.dst)
        graph.setdefault(e.dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def strongconnect(v: str) -> None:           # iterative: a deep import chain must not hit the recursion limit
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    members.add(w)
                    if w == node:
                        break
                if len(members) > 1:
                    found.append(members)

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return [_shortest_circle(min(m), [e for e in edges if e.src in m and e.dst in m]) for m in found]


def _shortest_circle(start: str, edges: list[Edge]) -> list[Edge]:
    """The fewest imports that lead from `start` back to itself (breadth-first over a component's imports)."""
    first: dict[str, Edge] = {}
    for e in sorted(edges, key=lambda e: (e.src, e.line)):
        first.setdefault((e.src, e.dst), e)
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for (src, dst), e in first.items():
                if src != node or dst in came:
                    continue
                came[dst] = e
                if dst == start:
                    path = [e]
                    while path[0].src != start:
                        path.insert(0, came[path[0].src])
                    return path
                nxt.append(dst)
        frontier = nxt
    raise AssertionError(f"{start} is in a component but on no circle")


def _report(title: str, groups: list[list[Edge]], root: Path) -> str:
    return title + "\n" + "\n\n".join("\n".join("  " + e.where(root) for e in g) for g in groups)


# ------------------------------------------------------------------------------------------------------- the tree

def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    may = {layer: below for layer, _, below in LAYERS}
    bad = [f"  {e.where(ROOT)}: {layer_of(e.src)} may import only {', '.join(may[layer_of(e.src)]) or 'itself'}, "
           f"not {layer_of(e.dst)}" for e in upward_imports(import_edges(project_modules(ROOT)))]
    assert not bad, "imports that run back up a layer (move the code down, or the import up):\n" + "\n".join(bad)


def test_no_two_modules_import_each_other_not_even_through_a_function_level_import():
    found = circles(import_edges(project_modules(ROOT)))
    assert not found, _report("module circles (each module reaches itself through these imports):", found, ROOT)


def test_every_top_level_package_has_a_layer():
    tops = {name.split(".")[0] for name in project_modules(ROOT)}
    placed = {p.split(".")[0] for _, prefixes, _ in LAYERS for p in prefixes} | SCRIPT_FOLDERS
    assert tops <= placed, f"top-level folders with no layer (add them to LAYERS or SCRIPT_FOLDERS): {tops - placed}"


# ---------------------------------------------------------------------------------------------- the checker

def test_the_checker_finds_a_lazy_import_back_up_and_a_circle(tmp_path):
    files = {
        "ditskip_edge/__init__.py": "",
        "ditskip_edge/runtime/__init__.py": "",
        "ditskip_edge/runtime/loop.py": "import numpy\n\ndef f():\n    from ditskip_edge.models import views\n",
        "ditskip_edge/models/__init__.py": "",
        "ditskip_edge/models/views.py": "from ..runtime import loop\nfrom . import specs\n",
        "ditskip_edge/models/specs.py": "from .views import make_view\n",
        "export/__init__.py": "",
        "export/stage.py": "from ditskip_edge.models.specs import X\n",
        "compiler/__init__.py": "",
        "compiler/cli.py": "from export.stage import Y\n",
        "tests/test_x.py": "from compiler.cli import main\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    edges = import_edges(project_modules(tmp_path))
    up = upward_imports(edges)
    assert [(e.src, e.dst, e.line, e.lazy) for e in up] == [
        ("ditskip_edge.runtime.loop", "ditskip_edge.models.views", 4, True)]
    assert up[0].where(tmp_path) == ("ditskip_edge/runtime/loop.py:4: ditskip_edge.runtime.loop imports "
                                     "ditskip_edge.models.views (function-level)")
    found = [[(e.src, e.dst, e.line) for e in circle] for circle in circles(edges)]
    assert found == [[("ditskip_edge.models.specs", "ditskip_edge.models.views", 1),
                      ("ditskip_edge.models.views", "ditskip_edge.models.specs", 2)]]
