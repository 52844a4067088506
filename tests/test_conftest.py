"""tests/conftest.py: a test during which GradMA's QP projection falls back fails, unless marked."""

import pytest
import torch

from fedbench.algorithms import projection
from tests import conftest


class _Item:
    def __init__(self, marked: bool):
        self.marked = marked

    def get_closest_marker(self, name: str):
        return pytest.mark.allow_qp_fallback if self.marked and name == "allow_qp_fallback" else None


def _run(item: _Item, fall_back: bool) -> None:
    """Drive the hook wrapper around a 'test' that makes one block fall back (or not)."""
    hook = conftest.pytest_runtest_call(item)
    next(hook)
    p, M = torch.ones(1, 4, dtype=torch.float64), torch.zeros(1, 2, 4, dtype=torch.float64)
    M[0, 0] = -1.0  # violated
    if fall_back:
        p[0, 0] = float("nan")  # unsolvable: left unprojected and counted
    assert projection.project(p, M, (4,))[1].tolist() == [int(fall_back)]
    with pytest.raises(StopIteration):
        hook.send(None)


@pytest.mark.allow_qp_fallback  # the fallbacks made inside count for this test too
def test_a_fallback_fails_an_unmarked_test_and_passes_a_marked_one():
    _run(_Item(marked=False), fall_back=False)
    _run(_Item(marked=True), fall_back=True)
    with pytest.raises(pytest.fail.Exception, match="1 GradMA QP projection block"):
        _run(_Item(marked=False), fall_back=True)
