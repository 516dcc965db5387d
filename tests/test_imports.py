"""How perfgate's modules import each other (read from the source with ``ast``, nothing imported)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted((SRC / "perfgate").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _imports(path: Path) -> Iterator[str]:
    """Every perfgate name ``path`` imports at any depth (module, or module.name for ``from``)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def _stage(module: str) -> str:
    """The package under perfgate/ a module belongs to (a top-level module is its own)."""
    return ".".join(module.split(".")[:2])


def test_no_module_imports_another_packages_private_module() -> None:
    # perfgate's own top-level helpers (perfgate._files, _names, _redact, _stats) are for every stage.
    crossing = []
    for module, path in _modules():
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] != "perfgate":
                continue
            private = next(
                (i for i, p in enumerate(parts[2:], 2) if p.startswith("_") and not p.startswith("__")), None
            )
            if private is not None and _stage(".".join(parts[:private])) != _stage(module):
                crossing.append(f"{module} imports {name}")
    assert not crossing, "export what is shared from the package's __init__:\n" + "\n".join(crossing)


def _graph() -> dict[str, set[str]]:
    """Module -> the perfgate modules it imports (a ``from m import name`` of a submodule counts
    as importing it; ``import a.b`` also imports package ``a``)."""
    modules = dict(_modules())
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        deps = set()
        for name in _imports(path):
            parts = name.split(".")
            deps |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & modules.keys()
        graph[module] = deps - {module}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle among the modules of ``graph`` (excluding a package's own ``__init__``
    importing its submodules, which Python resolves), or [] when it is acyclic."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph[module]):
            # A submodule importing its own package's __init__ runs the package first: no cycle.
            if module.startswith(dep + "."):
                continue
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[module] = 2
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_no_import_cycle_among_perfgate_modules() -> None:
    cycle = _cycle(_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"p": {"p.x"}, "p.x": {"p"}}) == []


def test_stages_that_must_not_reach_up_do_not() -> None:
    """The store stores (its check is injected by the policy; formats and metric groups come from the
    catalogue), and the load gets the server's headers passed down: neither imports the stage named."""
    graph = _graph()
    forbidden = {"perfgate.baseline": ("perfgate.verdict", "perfgate.telemetry"), "perfgate.load": ("perfgate.server",)}
    found = [
        f"{module} imports {dep}"
        for module, deps in graph.items()
        for stage, above in forbidden.items()
        if _stage(module) == stage
        for dep in deps
        if dep.startswith(above)
    ]
    assert not found, "\n".join(found)
