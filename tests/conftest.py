"""Suite-wide guard: a GradMA QP projection that falls back (a block left unprojected, counted in
``fedbench.algorithms.projection.fallbacks``) fails the test that caused it, unless the test is
marked ``allow_qp_fallback`` because it exercises the fallback path on purpose. Fallbacks are
counted in this process only (not in sweep worker subprocesses)."""

from __future__ import annotations

import sys

import pytest


def _fallbacks() -> int:
    module = sys.modules.get("fedbench.algorithms.projection")  # not imported: nothing was projected
    return 0 if module is None else module.fallbacks


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    before = _fallbacks()
    result = yield
    grew = _fallbacks() - before
    if grew and item.get_closest_marker("allow_qp_fallback") is None:
        pytest.fail(
            f"{grew} GradMA QP projection block(s) fell back (left unprojected) in this test; fix the solver, "
            "or mark the test @pytest.mark.allow_qp_fallback if it exercises the fallback on purpose",
            pytrace=False,
        )
    return result
