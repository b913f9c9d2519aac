"""docs/architecture.md held to the code. Its three generated tables (the routes, what
each package imports, where SQL lives) must be what the code makes of them, and every
module it names must exist. On a difference, the failure shows the block to paste, or
run ``MNEME_WRITE_DOCS=1 .venv/bin/pytest tests/test_architecture_doc.py`` to rewrite it.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from tests.test_layout import MODULES, ROOT, SERVICE, imports, module_name

DOC = ROOT / "docs" / "architecture.md"


def unit(module: str) -> str:
    """A package of ``service/`` (``write/``) or one of its top-level modules (``app``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "service"
    inner = SERVICE.joinpath(*parts[1:2])
    return f"{parts[1]}/" if inner.is_dir() else parts[1]


def imports_table() -> str:
    """Each package and top-level module, and what else of ``service/`` it imports."""
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        if name == "service":
            continue
        edges.setdefault(unit(name), set()).update(
            unit(dep) for dep in imports(path) | imports(path, top_level=False)
        )
    lines = []
    for source in sorted(edges):
        targets = sorted(edges[source] - {source, "service"})
        named = ", ".join(f"`{t}`" for t in targets) or "nothing of `service/`"
        lines.append(f"- `{source}` imports {named}")
    return "\n".join(lines)


# A statement as this code writes one: an upper-case keyword, then more.
SQL_WORDS = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|LOCK|DO) \S")


def holds_sql(path: Path) -> bool:
    """Whether a module writes SQL of its own: a ``NamedSQL(...)``, or a module-level
    string constant that starts like a statement."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "NamedSQL":
            return True
    constants = [
        n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign | ast.AnnAssign) and isinstance(n.value, ast.Constant)
    ]
    return any(isinstance(c, str) and SQL_WORDS.match(c) for c in constants)


def sql_table() -> str:
    found = [
        str(p.relative_to(ROOT))
        for n, p in sorted(MODULES.items())
        if n != "service.queries.named" and holds_sql(p)
    ]
    grouped: dict[str, list[str]] = {}
    for path in found:
        folder = path.rsplit("/", 1)[0] + "/"
        grouped.setdefault(folder, []).append(path.rsplit("/", 1)[1])
    return "\n".join(f"- `{folder}`: {', '.join(names)}" for folder, names in grouped.items())


def routes_table() -> str:
    from service.routes import ROUTES

    rows = ["| method | path | scope | handler |", "|---|---|---|---|"]
    for r in ROUTES:
        handler = f"{r.handler.__module__.removeprefix('service.')}.{r.handler.__name__}"
        rows.append(f"| {r.method} | `{r.path}` | {r.scope or '—'} | `{handler}` |")
    return "\n".join(rows)


TABLES = {"routes": routes_table, "imports": imports_table, "sql": sql_table}


def block(text: str, name: str) -> re.Match[str]:
    match = re.search(rf"<!-- {name}:begin -->\n(.*?)\n?<!-- {name}:end -->", text, re.S)
    assert match, f"docs/architecture.md has no <!-- {name}:begin/end --> block"
    return match


@pytest.mark.parametrize("name", sorted(TABLES))
def test_generated_tables_are_the_codes(name: str) -> None:
    text = DOC.read_text()
    want = TABLES[name]()
    if os.environ.get("MNEME_WRITE_DOCS") == "1":
        found = block(text, name)
        text = text[: found.start(1)] + want + "\n" + text[found.end(1) :].lstrip("\n")
        DOC.write_text(text)
    assert block(text, name).group(1) == want, f"paste into the {name} block:\n{want}"


def test_modules_the_doc_names_exist() -> None:
    """Every ``package/module.py`` the page names is a file of ``service/`` (or of the
    repository, for ``embeddings/``, ``sql/``, ``tests/``)."""
    named = set(re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)", DOC.read_text()))
    missing = [n for n in sorted(named) if not (SERVICE / n).exists() and not (ROOT / n).exists()]
    assert named and not missing, missing


def test_sql_detector_sees_sql(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text('Q = """\nSELECT 1 FROM t\n"""\nWORD = "select"\n')
    assert holds_sql(source)
    source.write_text('def f() -> None:\n    """Create, dedupe or upsert."""\nX = "DELETE"\n')
    assert not holds_sql(source)


def test_units_name_packages_and_modules() -> None:
    assert unit(module_name(SERVICE / "write" / "engine.py")) == "write/"
    assert unit(module_name(SERVICE / "app.py")) == "app"
