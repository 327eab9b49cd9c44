"""The package's import graph: no cycles, no import from the core into cli/, checks never import planners,
and outside cli/ the only function-local imports are of heavy third-party libraries."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "kubectl_triton"
# Heavy third-party libraries that the core may import inside a function to keep `kubectl triton --help` fast.
# urllib: the standard library's urllib.request pulls in http.client, ssl and email (20 ms), for --triton only.
HEAVY = {"yaml", "ruamel", "jsonschema", "kubernetes_validate", "kubernetes", "google", "tritonclient", "numpy",
         "urllib3", "requests", "jsonpatch", "gevent", "grpc", "click", "referencing", "urllib", "cryptography", "oras"}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> tuple[dict[str, set[str]], dict[str, list[tuple[int, str]]]]:
    """module -> modules of the package it imports at module level; module -> function-local imports."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py") if "data" not in p.relative_to(PACKAGE).parts}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    local: dict[str, list[tuple[int, str]]] = {m: [] for m in modules}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = {id(n) for n in tree.body} | {id(n) for s in tree.body if isinstance(s, ast.If) for n in s.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{mod}: relative import (use absolute kubectl_triton.* imports)"
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            targets = {n for n in names if n in modules}
            if id(node) in top:
                graph[mod] |= targets
            else:
                local[mod] += [(node.lineno, n) for n in names[:1]]
    return graph, local


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if t == m or t.startswith(m + "."):  # a package importing its own sub-module
                continue
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state and (found := visit(t)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def _cli(module: str) -> bool:
    """The CLI layer: cli/ and `python -m kubectl_triton`."""
    return module.startswith("kubectl_triton.cli") or module == "kubectl_triton.__main__"


def test_no_import_cycle():
    graph, _ = _graph()
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_core_never_imports_the_cli_layer():
    graph, local = _graph()
    bad = [f"{m} imports {t}" for m, ts in graph.items() if not _cli(m) for t in ts if _cli(t)]
    bad += [f"{m}:{line} imports {t}" for m, ts in local.items() if not _cli(m) for line, t in ts if _cli(t)]
    assert not bad


def test_checks_never_import_planners():
    graph, local = _graph()
    planners = ("kubectl_triton.gitops.scaffold", "kubectl_triton.gitops.canary")
    bad = [f"{m} imports {t}" for m, ts in graph.items() if m.startswith("kubectl_triton.checks")
           for t in ts if t.startswith(planners)]
    assert not bad


def test_function_local_imports_only_of_heavy_libraries_outside_the_cli():
    _, local = _graph()
    bad = [f"{m}:{line} imports {t}" for m, ts in local.items() if not _cli(m)
           for line, t in ts if t.split(".")[0] not in HEAVY]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("graph,expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"p": {"p.x"}, "p.x": set()}, None),
])
def test_the_cycle_finder_itself(graph, expected):
    assert _cycle(graph) == expected
