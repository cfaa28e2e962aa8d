"""No import cycle among the project's own modules.

The graph is read from the source (AST only, nothing is imported), and it counts every import:
at module level, inside functions and under ``TYPE_CHECKING``, plus ``import_module("...")``
calls with a literal name. A cycle hidden in a function still means two modules need each
other, so the test fails on it and prints the cycle with the line of each import.
"""

import ast
from collections import deque
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The project's own packages: the apps and the site. tests/, bench/ and scripts/ sit on top of
# them and may import anything.
PACKAGES = (
    "attachments",
    "bots",
    "budgets",
    "chats",
    "hermes_site",
    "knowledge",
    "learning",
    "memory",
    "openai_api",
    "operations",
    "schedules",
    "skills",
    "toolservers",
    "usage",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def project_modules() -> dict[str, Path]:
    """Every module of the project's packages (migrations included), by dotted name."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            modules[_module_name(path)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module that ``import name`` runs last, or None for a foreign module."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "text"` assignments, for `import_module(NAME)`."""
    constants = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            constants[node.targets[0].id] = node.value.value
    return constants


def _statements(nodes):
    """Every statement, at any depth (function bodies, branches, handlers, match cases);
    imports are statements, so the expressions need no visit."""
    for node in nodes:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                yield from _statements(children)


def _imported_names(tree: ast.Module, module: str, is_package: bool, source: str):
    """(dotted name, line) of everything the module imports, wherever the import sits."""
    package = module if is_package else module.rpartition(".")[0]
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                # ``from pkg import name`` imports the submodule pkg.name when there is one,
                # else takes a name from pkg itself; _resolve falls back to pkg.
                yield f"{base}.{alias.name}", node.lineno
    if "import_module" not in source:
        return
    constants = _string_constants(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called != "import_module":
            continue
        name = node.args[0]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            yield name.value, node.lineno
        elif isinstance(name, ast.Name) and name.id in constants:
            yield constants[name.id], node.lineno


@cache
def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported project module: line of its first import} (read once per run)."""
    modules = project_modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
        edges: dict[str, int] = {}
        for name, line in _imported_names(tree, module, path.name == "__init__.py", source):
            target = _resolve(name, modules)
            if target is not None and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components with more than one module (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
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
    return components


def shortest_cycle(graph: dict[str, dict[str, int]], members: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside the component."""
    inside = set(members)
    start = members[0]
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node]):
            if child not in inside:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [*reversed(path), start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return members


def describe(graph: dict[str, dict[str, int]], components: list[list[str]]) -> str:
    lines = []
    for members in components:
        cycle = shortest_cycle(graph, members)
        lines.append(f"cycle among {len(members)} modules: {', '.join(members)}")
        for here, there in zip(cycle, cycle[1:], strict=False):
            path = project_modules()[here].relative_to(ROOT)
            lines.append(f"  {here} -> {there}  ({path}:{graph[here][there]})")
    return "\n".join(lines)


def test_the_graph_sees_imports_inside_functions_and_import_module():
    """The reader counts what a module-level scan would miss (else the next test proves little)."""
    graph = import_graph()
    # chats/agent/llm/factory.py loads the local provider lazily through import_module.
    assert "chats.agent.llm.local" in graph["chats.agent.llm.factory"]
    # Every app's ready() imports its receivers inside a function.
    assert any(target.startswith("memory.") for target in graph["memory.apps"])


def test_no_import_cycle_among_project_modules():
    graph = import_graph()
    components = strongly_connected(graph)
    assert not components, "import cycles (break them, see docs/ARCHITECTURE.md):\n" + describe(
        graph, components
    )


# The site package is the project's frame: its entry modules (asgi, celery, settings) load
# the apps and its libraries (redis, scanning) serve them, so it stands outside the apps' order.
SITE = "hermes_site"


def app_graph() -> dict[str, dict[str, tuple[str, str, int]]]:
    """app -> {app it imports: (one importing module, the module imported, line)}."""
    graph = import_graph()
    apps: dict[str, dict[str, tuple[str, str, int]]] = {
        package: {} for package in PACKAGES if package != SITE
    }
    for module, edges in graph.items():
        here = module.partition(".")[0]
        for target, line in edges.items():
            there = target.partition(".")[0]
            if here != there and SITE not in (here, there):
                apps[here].setdefault(there, (module, target, line))
    return apps


def test_the_apps_depend_on_each_other_one_way():
    """Between apps too, counting every import: an app that needs a neighbour's answer
    registers for it (a registry or a port, docs/ARCHITECTURE.md) rather than importing back."""
    apps = app_graph()
    components = strongly_connected({app: dict.fromkeys(edges, 0) for app, edges in apps.items()})
    lines = []
    for members in components:
        lines.append(f"apps importing each other: {', '.join(members)}")
        for here in members:
            for there, (module, target, line) in sorted(apps[here].items()):
                if there in members:
                    lines.append(f"  {here} -> {there}: {module} imports {target} (line {line})")
    assert not components, "\n".join(lines)
