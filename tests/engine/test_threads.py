"""A run trains with a fixed number of torch threads, whatever the process's own setting."""

import json

import pytest
import torch

from fedbench.engine.runner import execute_run
from fedbench.engine.setup import DataCache
from fedbench.engine.threads import pinned_threads
from fedbench.options import RunOptions
from fedbench.scenario import resolve_runs
from fedbench.store import ResultsStore
from tests.engine.test_runner import COLS, scenario


def test_pinned_threads_restores_the_process_setting():
    before = torch.get_num_threads()
    with pinned_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="positive"):
        with pinned_threads(0):
            pass


@pytest.mark.parametrize("threads", [1, 2])
def test_a_run_trains_with_its_own_thread_count_and_logs_it(tmp_path, threads):
    """Started from a process set to 2 threads (or 1), every round runs with ``threads``; rows are identical."""
    spec = resolve_runs(scenario())[0]
    frames, before = [], torch.get_num_threads()
    for process_threads in (1, 2):
        torch.set_num_threads(process_threads)
        seen: list[int] = []
        store = ResultsStore(tmp_path / f"p{process_threads}")
        cache = DataCache(tmp_path / "data", False, torch.device("cpu"))
        outcome = execute_run(
            spec,
            0,
            store,
            cache,
            "h",
            lambda t, m: seen.append(torch.get_num_threads()),  # noqa: B023
            RunOptions(threads=threads),
        )
        assert outcome.status == "finished" and set(seen) == {threads}
        assert torch.get_num_threads() == process_threads  # restored afterwards
        rows = store.metrics([outcome.run_id])
        assert json.loads(rows["extra"].iloc[0])["threads"] == threads
        frames.append(rows[COLS])
    torch.set_num_threads(before)
    assert frames[0].equals(frames[1])
