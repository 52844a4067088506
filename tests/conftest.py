"""Suite-wide fixtures and guard.

Fixtures: ``tiny_raw`` (a fresh raw scenario dict of the tests' tiny federation) and ``tiny_run_spec``
(its resolved FedAvg run), from :mod:`tests.factories`, which module-level constants import directly.

Marker ``gpu``: the test needs a CUDA device; where torch sees none it is skipped with that reason.

Guard: a GradMA QP projection that falls back (a block left unprojected, counted in
``fedbench.algorithms.projection.fallback_total()``) fails the test that caused it, unless the test is
marked ``allow_qp_fallback`` because it exercises the fallback path on purpose. Fallbacks are
counted in this process only (not in sweep worker subprocesses)."""

from __future__ import annotations

import os
import sys

import pytest

from tests.factories import tiny_scenario, tiny_spec

# The suite reads command output as a run without a terminal prints it, whatever shell runs the suite: rich takes
# its width and colours from these variables, and `COLUMNS=40 make test` wrapped the tables the tests read.
TERMINAL_VARIABLES = ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CLICOLOR_FORCE")
for _name in TERMINAL_VARIABLES:
    os.environ.pop(_name, None)


@pytest.fixture
def tiny_raw() -> dict:
    """A fresh raw scenario dict: digits, MLP 64-16-10, 8 clients (3 per round), 3 local steps, 3 rounds, FedAvg."""
    return tiny_scenario()


@pytest.fixture
def tiny_run_spec():
    """The resolved run spec of :func:`tiny_raw`'s FedAvg entry."""
    return tiny_spec()


def _fallbacks() -> int:
    module = sys.modules.get("fedbench.algorithms.projection")  # not imported: nothing was projected
    return 0 if module is None else module.fallback_total()


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``outputs`` tests first, then the ``slow`` ones (make test hands tests to its pytest-xdist workers a
    few at a time, in this order, so the minutes-long ones start at once and the short ones fill in around
    them); skip the ``gpu``-marked tests, with the reason, where torch sees no CUDA device."""
    items.sort(key=lambda item: (item.get_closest_marker("outputs") is None, item.get_closest_marker("slow") is None))
    marked = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not marked:
        return
    import torch  # only when a gpu test was collected

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (marker gpu); torch sees none here")
    for item in marked:
        item.add_marker(skip)
