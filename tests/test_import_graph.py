"""The import graph of ``mmst/``: no cycle between subpackages, no import of the scripts' folders.

Every ``import``/``from ... import`` statement is read with :mod:`ast`, including the ones inside
functions and ``if TYPE_CHECKING`` blocks, so a cycle cannot hide behind a function-level import.
A subpackage is the first component under ``mmst`` (``mmst.data``, ``mmst.training``; a top-level
module such as ``mmst.features`` is its own node).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

MMST = Path(__file__).resolve().parent.parent / "mmst"
FORBIDDEN_TOP = {"recipes", "eval", "data_prep", "bench", "tests"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(MMST.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """Absolute module names imported by ``path`` (relative imports resolved), with line numbers."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    mod = _module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((name, node.lineno))
            out.extend((f"{name}.{a.name}", node.lineno) for a in node.names)
    return out


def _node(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "mmst" or len(parts) < 2:
        return None
    return f"mmst.{parts[1]}"


def _graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], list[str]]]:
    edges: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(MMST.rglob("*.py")):
        src = _node(_module_name(path)) or "mmst"
        for name, line in _imports(path):
            dst = _node(name)
            if dst is None or dst == src or not _exists(dst):
                continue
            edges[src].add(dst)
            where[(src, dst)].append(f"{path.relative_to(MMST.parent)}:{line} imports {name}")
    return edges, where


def _exists(node: str) -> bool:
    name = node.split(".")[1]
    return (MMST / name).is_dir() or (MMST / f"{name}.py").is_file()


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        color[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if color.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in color:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        color[n] = 2
        return None

    for n in sorted(edges):
        if n not in color:
            found = visit(n)
            if found:
                return found
    return None


def test_cycle_finder_finds_a_planted_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}}) is None


def test_function_level_imports_are_seen(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f():\n    from mmst.training import trainer\n    import mmst.data.vocab\n")
    tree_names = [n for n, _ in _imports_from_text(p)]
    assert "mmst.training.trainer" in tree_names and "mmst.data.vocab" in tree_names


def _imports_from_text(p: Path) -> list[tuple[str, int]]:
    tree = ast.parse(p.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.extend((f"{node.module}.{a.name}", node.lineno) for a in node.names)
    return out


def test_no_cycle_between_mmst_subpackages():
    edges, where = _graph()
    cycle = _find_cycle(edges)
    if cycle:
        detail = "\n".join(f"  {a} -> {b}: {where[(a, b)][0]}" for a, b in zip(cycle, cycle[1:]))
        raise AssertionError(f"import cycle {' -> '.join(cycle)}:\n{detail}")


def test_mmst_never_imports_scripts_or_tests():
    bad = []
    for path in sorted(MMST.rglob("*.py")):
        for name, line in _imports(path):
            if name.split(".")[0] in FORBIDDEN_TOP:
                bad.append(f"{path.relative_to(MMST.parent)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def test_bench_never_imports_tests():
    bench = MMST.parent / "bench"
    bad = []
    for path in sorted(bench.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad.extend(f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in ("tests", "conftest"))
        text = path.read_text(encoding="utf-8")
        if "tests" in text and "sys.path" in text and "/ \"tests\"" in text:
            bad.append(f"{path.name}: puts tests/ on sys.path")
    assert not bad, "\n".join(bad)
