"""The local executor: a pool of worker processes on this machine, each writing its own runs.

Workers run whole runs through :func:`~fedbench.sweeps.worker.execute` against the output
folder's SQLite store (WAL mode; every call its own short connection, safe across processes), so
each round is committed as it finishes and an interrupted sweep resumes every run from its
checkpoint. Workers are spawned (not forked: CUDA and OpenMP state do not survive a fork); on a
machine with CUDA each takes one GPU (``cuda:<worker slot>``). ``jobs=1`` runs in this process.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

import torch

from fedbench.engine.runner import RunOutcome
from fedbench.store import ResultsStore
from fedbench.sweeps.grid import SweepRun
from fedbench.options import RunOptions
from fedbench.sweeps.worker import execute, record_failure

MAX_JOBS = 16
OnDone = Callable[[SweepRun, RunOutcome], None]


def default_jobs(device: str, cpus_per_run: float = 1.0) -> int:
    """One worker per GPU with CUDA (one for an explicit ``cuda:N``); else CPU count / CPUs per
    run, at most :data:`MAX_JOBS`."""
    if device != "cpu" and torch.cuda.is_available():
        return torch.cuda.device_count() if device in ("auto", "cuda") else 1
    return max(1, min(int((os.cpu_count() or 1) // cpus_per_run), MAX_JOBS))


_WORKER: dict[str, Any] = {}


def _init_worker(slots: Any, options: RunOptions, out: Path) -> None:
    """Pool initializer: take a worker slot (its GPU with CUDA) and open the store."""
    slot = slots.get()
    device = options.device
    if device in ("auto", "cuda") and torch.cuda.is_available():
        device = f"cuda:{slot % torch.cuda.device_count()}"
    _WORKER.update(store=ResultsStore(out), options=options, device=device)


def _task(run: SweepRun) -> RunOutcome:
    return execute(run, _WORKER["store"], _WORKER["options"], _WORKER["device"])


def run_local(runs: list[SweepRun], out: Path, options: RunOptions, jobs: int, on_done: OnDone) -> list[RunOutcome]:
    """Execute ``runs`` with ``jobs`` worker processes; a worker that dies fails its run (and, as
    the pool breaks, the runs still queued), which the next sweep resumes."""
    store = ResultsStore(out)
    outcomes = []
    jobs = min(jobs, len(runs))
    if jobs <= 1:
        for run in runs:
            outcomes.append(execute(run, store, options))
            on_done(run, outcomes[-1])
        return outcomes
    ctx = mp.get_context("spawn")
    slots = ctx.Queue()
    for slot in range(jobs):
        slots.put(slot)
    with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_init_worker, initargs=(slots, options, out)) as pool:
        futures = {pool.submit(_task, run): run for run in runs}
        try:
            for future in as_completed(futures):
                run = futures[future]
                try:
                    outcome = future.result()
                except Exception as exc:  # the worker process died: BrokenProcessPool
                    outcome = record_failure(store, run, f"worker process lost: {type(exc).__name__}: {exc}")
                outcomes.append(outcome)
                on_done(run, outcome)
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return outcomes
