"""Architecture guardrails (issue 18): planner/ has no import cycles, no module above
MAX_MODULE_LINES lines, and README.md's layout names every module.

The import graph is read from the source (``ast``), not from ``sys.modules``, so that an
import hidden inside a function (the usual way to dodge a cycle at import time) still
counts as an edge: every ``import`` / ``from ... import`` statement anywhere in a module
(module level, function bodies, ``if TYPE_CHECKING:`` blocks) is an edge from that module.
``from pkg import name`` is an edge to the submodule ``pkg.name`` where that submodule
exists, and to ``pkg`` (its ``__init__``) otherwise; ``import a.b.c`` is an edge to the
deepest module of ``planner/`` it names. Imports of anything outside ``planner/`` are ignored.
"""

import ast
import re

from conftest import ROOT

PACKAGE_DIR = ROOT / "planner"
README = ROOT / "README.md"
MAX_MODULE_LINES = 500         # the developers' guide: "no module above ~500 lines"


def _modules():
    """Dotted module name -> path for every ``.py`` file under planner/ (sorted)."""
    modules = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _targets(module, node, modules):
    """The planner modules one import statement ``node`` of ``module`` refers to."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            package = module.split(".")
            if modules[module].name != "__init__.py":
                package = package[:-1]
            if node.level > 1:
                package = package[:len(package) - (node.level - 1)]
            base = ".".join(package + ([node.module] if node.module else []))
        else:
            base = node.module
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                 for alias in node.names]
    found = set()
    for name in names:
        while name and name not in modules:          # planner.x.func -> planner.x
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def import_graph():
    """module -> {imported module: first line number of such an import} over planner/."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        edges = {}
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, node, modules):
                    edges[target] = min(edges.get(target, node.lineno), node.lineno)
        graph[module] = edges
    return graph


def strongly_connected_components(graph):
    """Tarjan's algorithm (iterative); components of more than one module, each sorted."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def shortest_cycle(graph, component):
    """One shortest cycle through the component's first module (breadth-first search)."""
    start, members = component[0], set(component)
    previous, frontier = {start: None}, [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child == start:
                    path = [node]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child in members and child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def _describe(graph, cycle):
    steps = []
    for here, there in zip(cycle, cycle[1:]):
        steps.append(f"{here} -> {there} (line {graph[here][there]})")
    return "\n    ".join(steps)


def test_the_import_graph_reader_sees_function_level_and_relative_imports():
    graph = import_graph()
    # planner/__main__.py: "from planner.cli import run" at module level
    assert "planner.cli" in graph["planner.__main__"]
    # every package's modules are nodes; no edge points outside planner/
    nodes = set(graph)
    assert {"planner", "planner.serving", "planner.serving.roofline"} <= nodes
    assert all(set(edges) <= nodes for edges in graph.values())
    # a cycle made of a function-level import is found (a synthetic graph)
    toy = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert strongly_connected_components(toy) == [["a", "b", "c"]]
    assert shortest_cycle(toy, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    tree = ast.parse("def f():\n    from . import roofline\n    from .memory import fit\n")
    modules = _modules()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found |= _targets("planner.serving.evaluate", node, modules)
    assert found == {"planner.serving.roofline", "planner.serving.memory"}


def test_planner_has_no_import_cycles():
    graph = import_graph()
    components = strongly_connected_components(graph)
    report = [f"{len(c)} modules import each other: {', '.join(c)}\n  e.g. the cycle\n    "
              + _describe(graph, shortest_cycle(graph, c)) for c in components]
    assert not components, "import cycles in planner/ (function-level imports count):\n" + "\n".join(report)


def test_no_module_is_above_the_line_limit():
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines())
             for path in _modules().values()}
    too_long = {name: n for name, n in sorted(sizes.items()) if n > MAX_MODULE_LINES}
    assert not too_long, f"modules above {MAX_MODULE_LINES} lines (split them): {too_long}"


def readme_layout_names():
    """Paths (relative to the repository) that README.md's ``## Layout`` code block names.

    The block is a tree indented by two spaces per level: a line whose first word sits at
    most one level below the enclosing directory is an entry (``serving/`` opens a
    directory, ``memory.py`` names a module in it); a more deeply indented line continues
    the previous entry's description. Any ``name.py`` in an entry's description or its
    continuation names a sibling of that entry (``pareto.py ...; diagnosis.py: ...``).
    Directories are returned with a trailing ``/``; a package's entry names its ``__init__.py``.
    """
    text = README.read_text()
    section = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    assert section, "README.md has no '## Layout' section"
    block = re.search(r"^```[^\n]*\n(.*?)^```", section.group(1), flags=re.S | re.M)
    assert block, "README.md's layout section has no code block"
    named = set()
    stack = []              # (indent, directory name) of the open directories
    sibling_dir = ""
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        entry_limit = stack[-1][0] + 2 if stack else 0
        words = line.split()
        if indent <= entry_limit:
            while stack and stack[-1][0] >= indent:
                stack.pop()
            sibling_dir = "/".join(name for _, name in stack)
            head = words[0].rstrip(":,;")
            path = f"{sibling_dir}/{head}" if sibling_dir else head
            named.add(path)
            if head.endswith("/"):
                stack.append((indent, head.rstrip("/")))
            words = words[1:]
        for word in re.findall(r"\b[A-Za-z_]\w*\.py\b", " ".join(words)):
            named.add(f"{sibling_dir}/{word}" if sibling_dir else word)
    return named


def _is_named(module_path: str, named: set) -> bool:
    if module_path.endswith("/__init__.py") and module_path[:-len("__init__.py")] in named:
        return True
    return module_path in named


def test_readme_layout_parser_reads_nesting_and_siblings():
    named = readme_layout_names()
    assert {"planner/", "planner/serving/", "planner/serving/memory.py", "planner/units.py"} <= named
    assert _is_named("planner/serving/__init__.py", named)     # "serving/" names the package
    assert not _is_named("planner/memory.py", named)           # memory.py is listed under serving/


def test_readme_layout_names_every_module():
    named = readme_layout_names()
    modules = [str(path.relative_to(ROOT)) for path in _modules().values()]
    missing = [m for m in modules if not _is_named(m, named)]
    assert not missing, ("README.md's layout section does not name these modules "
                         f"(one line each, with its concern): {missing}")


def test_readme_layout_names_no_module_that_does_not_exist():
    stale = sorted(name for name in readme_layout_names()
                   if name.startswith("planner/") and not (ROOT / name).exists())
    assert not stale, f"README.md's layout names files or folders planner/ does not have: {stale}"
