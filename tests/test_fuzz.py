"""Schemathesis over every operation of /openapi.json, against a real `mneme serve`.

Zero 5xx, every status, content type, header and body as documented, schema-valid
requests accepted and schema-violating ones refused (with the exceptions in
tests/schemathesis.toml), and no error in the service's log. A fixed seed: the same cases
every run; `python -m bench.fuzz` explores further with random seeds.
"""

from __future__ import annotations

import pytest

from bench.fuzz import fuzz
from service.routes import ROUTES

pytestmark = pytest.mark.slow  # pyproject.toml: markers


def test_schemathesis_finds_nothing_in_over_a_thousand_cases() -> None:
    outcome = fuzz(examples=30, seed=1)
    assert outcome.generated >= 1000
    assert outcome.operations == len(ROUTES)  # every one of them
    assert outcome.ok, outcome.output[-20000:] + "\n".join(outcome.service_errors[:5])
