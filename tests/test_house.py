"""The house's structure: no import cycle among the package's modules, counting the imports inside functions too
(a function-level import must never be what hides one)."""
import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "gridgnn").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Every module's imports of other package modules, at module level and inside functions alike (``from .x
    import name`` counts as an import of ``x.name`` where that is a module, else of ``x``)."""
    mods = modules()
    edges = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    name = ".".join(base + ([node.module] if node.module else []))
                else:
                    name = node.module or ""
                for alias in node.names:
                    target = f"{name}.{alias.name}" if f"{name}.{alias.name}" in mods else name
                    if target in mods and target != mod:
                        edges[mod].add(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods and alias.name != mod:
                        edges[mod].add(alias.name)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (by reachability: the graph is small)."""
    reach = {}
    for start in edges:
        seen, todo = {start}, [start]
        while todo:
            for nxt in edges[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    done, out = set(), []
    for m in sorted(edges):
        if m in done:
            continue
        comp = sorted(o for o in reach[m] if m in reach[o])
        done.update(comp)
        if len(comp) > 1:
            out.append(comp)
    return out


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (module-level and function-level imports counted): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle():
    """The check above can fail: a planted cycle through a function-level import is found."""
    edges = import_graph()
    edges["gridgnn.errors"] = edges["gridgnn.errors"] | {"gridgnn.train.api"}  # api reaches errors
    assert any("gridgnn.errors" in c and "gridgnn.train.api" in c for c in cycles(edges))
