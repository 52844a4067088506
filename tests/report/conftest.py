"""Fixtures shared by the report tests."""

from __future__ import annotations

import pytest

from fedbench.store import ResultsStore
from tests.report.test_paper import build_paper_store


@pytest.fixture(scope="session")
def paper_store(tmp_path_factory: pytest.TempPathFactory) -> ResultsStore:
    """test_paper.py's synthetic store, built once per session; tests only read it."""
    return build_paper_store(tmp_path_factory.mktemp("paper_store"))
