"""The package's layout rules, checked on the source: imports go one way down
(core <- data, models <- eval <- systems <- cli/demo; core, eval <- experiments <- report; experiments runs the
systems only through the CLI in subprocesses: systems never import it, it never imports them), systems do not
import each other, no module imports another module's private (underscore) names, predgen's modules import
one another without a cycle (counting the imports inside functions), and no seed is derived by arithmetic
(core/runtime.py's mix_seed is the one seed mixer)."""

from __future__ import annotations

import ast
from pathlib import Path

import forethought

SRC = Path(forethought.__file__).resolve().parent
# what each layer may import from forethought (besides itself)
ALLOWED = {
    "core": set(),
    "data": {"core"},
    "models": {"core"},
    "eval": {"core", "data", "models"},
    "predgen": {"core", "data", "models", "eval"},
    "psf": {"core", "data", "models", "eval"},
    "myopia": {"core", "data", "models", "eval"},
    # renders docs from the collected JSON and the specs that produced it: never imports model code
    "report": {"core", "experiments"},
    # seeds, job queue, run archive, seed-paired statistics: drives the systems through the CLI (subprocesses),
    # so it sits beside them, not above or below: neither imports the other
    "experiments": {"core", "eval"},
}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every ``import forethought.x`` / ``from forethought.x import a, b``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("forethought"):
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("forethought")]
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_imports_go_one_way_down() -> None:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        layer = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if layer not in ALLOWED:
            continue  # cli.py, demo.py, testing.py: the top
        for module, _ in _imports(path):
            target = _layer(module)
            if target != layer and target not in ALLOWED[layer]:
                bad.append(f"{rel} imports {module}")
    assert not bad, bad


def test_no_private_names_cross_modules() -> None:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        for module, names in _imports(path):
            bad += [f"{rel}: from {module} import {n}" for n in names if n.startswith("_") and n != "__version__"]
    assert not bad, bad


def _module_name(path: Path) -> str:
    parts = ("forethought", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as [a, b, ..., a], or [] when there is none (depth first: reaching a module that is
    still on the current path closes a cycle)."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str]:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return []
        path.append(node)
        for nxt in sorted(graph[node]):
            if found := visit(nxt):
                return found
        path.pop()
        done.add(node)
        return []

    for node in sorted(graph):
        if found := visit(node):
            return found
    return []


def test_predgen_modules_import_one_way() -> None:
    """The imports among forethought.predgen's modules form no cycle, counting those inside functions and under
    TYPE_CHECKING: deferring an import hides a cycle from Python, not from the design (registry <- config <-
    model <- methods <- commands, never back)."""
    modules = {_module_name(p): p for p in sorted((SRC / "predgen").rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = set()
        for module, names in _imports(path):
            # ``from forethought.predgen import registry`` imports the submodule, not the package
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules] or [module]
            graph[name] |= {t for t in targets if t in modules and t != name}
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check itself sees one
    cycle = _cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def _seed_arithmetic(source: str) -> list[int]:
    """Lines where a seed (a name or attribute called ``seed`` or ``*_seed``, or ``seed_index``) is combined by
    ``+``, ``-`` or ``*``: derived seeds go through mix_seed."""
    def is_seed(node: ast.AST) -> bool:
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        return name in ("seed", "seed_index") or name.endswith("_seed")

    return sorted(node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult))
            and any(is_seed(side) for side in (node.left, node.right)))


def test_derived_seeds_come_from_the_one_seed_mixer() -> None:
    assert _seed_arithmetic("torch.manual_seed(cfg.run.seed + 1000 * (stage.seed_index + 1))\nf(1000 * seed + m)\n"
                            "g(mix_seed('x', seed, i))\n") == [1, 1, 2]  # the check itself sees them
    found = [f"{path.relative_to(SRC)}:{line}" for path in sorted(SRC.rglob("*.py"))
             for line in _seed_arithmetic(path.read_text())]
    assert not found, "seeds derived by arithmetic (use core.runtime.mix_seed): " + ", ".join(found)
