"""The examples of docs/integrations/*.md, run as written against a running
``mneme serve`` (issue 47: "an example that CI runs as written"). The Python pages' here;
the JavaScript one (vercel-ai.md) by the TypeScript SDK's suite
(clients/typescript/test/readme.test.ts, run by tests/test_typescript_sdk.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.common import Server
from tests.helpers import BOOTSTRAP_KEY, repo_root

pytestmark = pytest.mark.slow

PAGES = sorted((repo_root() / "docs" / "integrations").glob("*.md"))
JS_PAGES = ["vercel-ai"]  # run by clients/typescript/test/readme.test.ts
PY_PAGES = [p for p in PAGES if p.stem not in JS_PAGES]


@pytest.fixture(scope="module")
def server(mneme_serve: Server) -> Server:
    return mneme_serve


def blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.S)


def test_each_page_has_one_example_in_its_language() -> None:
    assert {p.stem for p in PAGES} >= set(JS_PAGES)
    for page in PAGES:
        language = "js" if page.stem in JS_PAGES else "python"
        assert len(blocks(page, language)) == 1, f"{page.name}: one ```{language} example"
    readme = (repo_root() / "clients" / "typescript" / "test" / "readme.test.ts").read_text()
    assert all(f"docs/integrations/{stem}.md" in readme for stem in JS_PAGES)


@pytest.mark.parametrize("page", PY_PAGES, ids=[p.stem for p in PY_PAGES])
def test_the_pages_example_runs_as_written(page: Path, server: Server, tmp_path: Path) -> None:
    [example] = blocks(page, "python")  # one example a page
    script = tmp_path / "example.py"
    script.write_text(example)
    env = {**os.environ, "MNEME_URL": server.base, "MNEME_API_KEY": BOOTSTRAP_KEY}
    env.pop("OPENAI_API_KEY", None)  # offline: an example's model call runs only with one
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the example prints what it did"
