"""The Ray executor: each run, or each population of runs (``--population``), a Ray task with resource
requests; only the driver writes the store.

A task computes its run in memory (:func:`~fedbench.sweeps.worker.compute`) and returns the
rounds' metrics and extra logs and the final status; the driver commits each result as it
arrives. A task whose worker dies (a killed process, a lost node) is resubmitted up to
``max_retries`` times, then recorded as failed; a run that raises is recorded as failed by the
run itself (a deterministic error is not retried). Ray is imported only here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from fedbench.engine.runner import RunOutcome
from fedbench.options import RunOptions
from fedbench.store import ResultsStore
from fedbench.sweeps.grid import SweepError, SweepRun
from fedbench.sweeps.worker import RunResult, commit, compute, compute_group, failed_result, population_groups

OnDone = Callable[[SweepRun, RunOutcome], None]
Task = Callable[[SweepRun, RunOptions, str], RunResult]
GroupTask = Callable[[list[SweepRun], RunOptions, str], list[RunResult]]


def import_ray():
    try:
        import ray
    except ImportError:
        raise SweepError("--backend ray needs Ray: pip install 'fedbench[ray]' (ray>=2.9,<3)") from None
    return ray


def ray_device(options: RunOptions, gpus_per_run: float) -> str:
    """The device Ray's tasks train on: ``--device``, or under ``auto`` CUDA when tasks get GPUs."""
    return options.device if options.device != "auto" else ("cuda" if gpus_per_run > 0 else "cpu")


def run_ray(
    runs: list[SweepRun],
    out: Path,
    options: RunOptions,
    on_done: OnDone,
    address: str | None = None,
    num_cpus: int | None = None,
    cpus_per_run: float = 1.0,
    gpus_per_run: float = 0.0,
    max_retries: int = 2,
    task: Task = compute,
    group_task: GroupTask = compute_group,
) -> list[RunOutcome]:
    """Submit every run as a task (``num_cpus=cpus_per_run``, ``num_gpus=gpus_per_run``), or every
    population of runs (``--population``, :mod:`fedbench.engine.population`) as one task, and commit
    the results in completion order. Uses the running Ray instance if there is one, else connects
    to ``address`` or starts a local instance with ``num_cpus`` CPUs (and shuts down what it started)."""
    ray = import_ray()
    store = ResultsStore(out)
    started = not ray.is_initialized()
    if started:
        with warnings.catch_warnings():  # Ray's notice about a future default for CUDA_VISIBLE_DEVICES
            warnings.simplefilter("ignore", FutureWarning)
            ray.init(
                address=address, num_cpus=None if address else num_cpus, include_dashboard=False, log_to_driver=False
            )
    device = ray_device(options, gpus_per_run)
    resources = {"num_cpus": cpus_per_run, "num_gpus": gpus_per_run, "max_retries": max_retries}
    remote = ray.remote(task).options(**resources, retry_exceptions=False)
    remote_group = ray.remote(group_task).options(**resources, retry_exceptions=False)
    groups, _ = population_groups(runs, options, torch.device(device))
    outcomes = []
    try:
        pending = {
            (remote.remote(g[0], options, device) if len(g) == 1 else remote_group.remote(g, options, device)): g
            for g in groups
        }
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            group = pending.pop(done[0])
            try:
                returned = ray.get(done[0])
                results = [returned] if len(group) == 1 else returned
            except Exception as exc:  # ray.exceptions.WorkerCrashedError, NodeDiedError, …: retries spent
                lost = f"task lost after {max_retries} retries: {type(exc).__name__}: {exc}"
                results = [failed_result(run, lost) for run in group]
            for run, result in zip(group, results):
                outcomes.append(commit(store, result))
                on_done(run, outcomes[-1])
    finally:
        if started:
            ray.shutdown()
    return outcomes
