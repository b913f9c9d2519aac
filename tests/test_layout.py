"""The house rules of ``service/`` that a reader relies on (docs/architecture.md), held
by reading the source: imports point one way and make no cycle, SQL parameters go by
name and a function fits on a screen (in the embedding package too)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVICE = ROOT / "service"
MAX_FUNCTION_LINES = 60
# What the SQL layer may import from the service: itself, ids, and the schema's vector
# dimension (service.ops.db). Never the faces, the HTTP shell or the pipelines.
QUERIES_MAY_IMPORT = ("service.queries", "service.ids", "service.ops.db")
# Imported inside a function on purpose: ``mneme serve`` alone needs the app (aiohttp and
# the MCP SDK, about a second to import), so the administration commands do not pay it.
LAZY_IMPORTS = {"service.cli": {"service.app", "service.http.server"}}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SERVICE.rglob("*.py"))}
# The service's modules and the embedding package's: both held to SQL by name and to
# functions that fit on a screen.
SQL_MODULES = MODULES | {module_name(p): p for p in sorted((ROOT / "embeddings").rglob("*.py"))}


def module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements run when the module is imported: ``body`` and, recursively, the
    branches of its ``if`` (``if TYPE_CHECKING:`` included) and ``try`` statements."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out += module_level(node.body) + module_level(node.orelse)
        elif isinstance(node, ast.Try):
            branches = [node.body, node.orelse, node.finalbody] + [h.body for h in node.handlers]
            out += [n for b in branches for n in module_level(b)]
    return out


def imports(path: Path, *, top_level: bool = True) -> set[str]:
    """The service modules ``path`` imports: at module level (under an ``if`` or a
    ``try`` too, ``if TYPE_CHECKING:`` included), or inside functions."""
    tree = ast.parse(path.read_text())
    nodes = module_level(tree.body) if top_level else [
        n for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        for n in ast.walk(f)
    ]  # fmt: skip
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("service"):
            assert node.module is not None
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("service")}
    return found


def graph() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps = imports(path)
        for dep in list(deps):  # importing a.b.c runs the package a.b first
            parts = dep.split(".")
            deps |= {".".join(parts[:k]) for k in range(2, len(parts))}
        out[name] = {d for d in deps if d in MODULES and d != name and not name.startswith(d + ".")}
    return out


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(edges[node]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)) is not None:
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_service_imports_make_no_cycle() -> None:
    assert cycle(graph()) is None


def test_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert cycle(edges) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_imports_under_if_and_try_count(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from service.app import build\n"
        "try:\n    import service.ids\nexcept ImportError:\n    pass\n"
        "def f() -> None:\n    from service.cli import main\n"
    )
    assert imports(source) == {"service.app", "service.ids"}
    assert imports(source, top_level=False) == {"service.cli"}


def test_queries_import_nothing_above_them() -> None:
    for name, path in MODULES.items():
        if name.startswith("service.queries"):
            above = {m for m in imports(path) if not m.startswith(QUERIES_MAY_IMPORT)}
            assert not above, f"{name} imports {sorted(above)}"


def test_embeddings_import_only_named_sql_of_the_service() -> None:
    """The embedding package runs apart from the service (its worker is configured by a
    ``WorkerConfig``): of ``service/`` it takes only the named-SQL helper."""
    for name, path in SQL_MODULES.items():
        if name.startswith("embeddings"):
            taken = imports(path) | imports(path, top_level=False)
            assert taken <= {"service.queries.named"}, f"{name} imports {sorted(taken)}"


def test_no_function_imports_service_modules() -> None:
    """A function-local import would hide a cycle from the check above."""
    for name, path in MODULES.items():
        hidden = imports(path, top_level=False) - LAZY_IMPORTS.get(name, set())
        assert not hidden, f"{name} imports {sorted(hidden)} inside a function"


# A ``$n`` parameter in SQL: a dollar sign and digits, not inside an identifier.
POSITIONAL = re.compile(r"(?<![\w$])\$[0-9]+\b")


@pytest.mark.parametrize("name", sorted(SQL_MODULES))
def test_sql_parameters_by_name(name: str) -> None:
    if name == "service.queries.named":
        return  # it compiles :name into $n
    tree = ast.parse(SQL_MODULES[name].read_text())
    strings = [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    numbered = [line for line, s in strings if isinstance(s, str) and POSITIONAL.search(s)]
    assert not numbered, f"{name}: positional SQL parameters at lines {numbered}"


def test_functions_fit_on_a_screen() -> None:
    long = []
    for name, path in SQL_MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                if (lines := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert not long, long


def test_readme_layout_lists_every_module() -> None:
    """The README's Layout names every module of service/ once, and nothing that is gone."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    listed = [line.split()[0] for line in block.splitlines() if line.strip()]
    modules = {str(p.relative_to(ROOT)) for p in MODULES.values() if p.name != "__init__.py"}
    assert sorted(m for m in modules if listed.count(m) != 1) == []
    assert [path for path in listed if not (ROOT / path).exists()] == []


def test_pipelines_import_no_face_and_not_each_other() -> None:
    """The write path and the search path past the handler are called by the faces (and
    mneme import): they import no face, not the app, and not one another."""
    for name, path in MODULES.items():
        for package, other in (("write", "retrieval"), ("retrieval", "write")):
            if name.startswith(f"service.{package}"):
                banned = ("service.faces", "service.routes", f"service.{other}")
                found = {m for m in imports(path) if m.startswith(banned) or m == "service.app"}
                assert not found, f"{name} imports {sorted(found)}"


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of what ``path`` imports that is not of this repository."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
    return found - {"service", "embeddings"}


def test_engine_imports_no_http() -> None:
    """The write and search engines take checked values and raise ``service.problems``:
    neither aiohttp nor the HTTP shell (its errors, bodies, statuses) is in them."""
    for name, path in MODULES.items():
        if name.startswith(("service.write", "service.retrieval")):
            http = {m for m in imports(path) if m.startswith("service.http")}
            assert not http, f"{name} imports {sorted(http)}"
            assert "aiohttp" not in third_party_imports(path), f"{name} imports aiohttp"


# What the HTTP shell may take of the service: the leaves, the SQL of the key check, and
# of ops/ the metrics it records. Never the engines, the faces, the jobs or the app's keys.
HTTP_MAY_IMPORT = (
    "service.http",
    "service.decoding",
    "service.ids",
    "service.problems",
    "service.queries",
    "service.settings",
    "service.times",
    "service.ops.metrics",
)


def test_http_shell_loads_no_engine() -> None:
    """``service/http/`` serves any app: it reads its own keys (``http/keys.py``), so
    importing it loads neither the engines nor the jobs (``app_keys`` would)."""
    for name, path in MODULES.items():
        if name.startswith("service.http"):
            deps = imports(path) | imports(path, top_level=False)
            bad = {m for m in deps if not m.startswith(HTTP_MAY_IMPORT)}
            assert not bad, f"{name} imports {sorted(bad)}"


def test_http_check_sees_an_aiohttp_import(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import asyncio\nfrom aiohttp import web\nfrom service.ids import new_id\n")
    assert third_party_imports(source) == {"asyncio", "aiohttp"}
