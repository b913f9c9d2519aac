"""Schemathesis's command line (``python -m schemathesis.cli``), with one crash of the
tool itself kept out of the way.

Hypothesis describes the lambdas in a strategy's repr by parsing their source with
``ast.parse``; under CPython 3.11 that parse sometimes raises ``SystemError: AST
constructor recursion depth mismatch`` when called deep in a recursive draw, which
Schemathesis reports as a runtime error of the run (seen once in three runs of CI's
fixed seed). Hypothesis already answers "lambda: <unknown>" for any source it cannot
parse; this makes that one error count as such. Nothing the service answers is touched.
"""

from __future__ import annotations

from typing import Any

from hypothesis.internal import lambda_sources

_describe = lambda_sources.lambda_description


def _lambda_description(f: Any) -> str:
    try:
        description: str = _describe(f)  # type: ignore[no-untyped-call]
    except SystemError:
        return "lambda: <unknown>"
    return description


lambda_sources.lambda_description = _lambda_description

if __name__ == "__main__":
    import schemathesis.cli

    schemathesis.cli.schemathesis()
