"""The examples of docs/integrations/*.md, run as written against a running
``mneme serve`` (issue 47: "an example that CI runs as written")."""

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


@pytest.fixture(scope="module")
def server(mneme_serve: Server) -> Server:
    return mneme_serve


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_the_pages_example_runs_as_written(page: Path, server: Server, tmp_path: Path) -> None:
    [example] = python_blocks(page)  # one example a page
    script = tmp_path / "example.py"
    script.write_text(example)
    env = {**os.environ, "MNEME_URL": server.base, "MNEME_API_KEY": BOOTSTRAP_KEY}
    env.pop("OPENAI_API_KEY", None)  # offline: an example's model call runs only with one
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the example prints what it did"
