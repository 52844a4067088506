"""The local executor: a pool of worker processes on this machine, each writing its own runs.

Workers run whole runs, or populations of runs trained together (``--population``,
:mod:`fedbench.engine.population`), through :func:`~fedbench.sweeps.worker.execute_group` against the output
folder's SQLite store (WAL mode; every call its own short connection, safe across processes), so
each round is committed as it finishes and an interrupted sweep resumes every run from its
checkpoint. Workers are spawned (not forked: CUDA and OpenMP state do not survive a fork); on a
machine with CUDA each takes one GPU (``cuda:<worker slot>``). ``jobs=1`` runs in this process.

Ending (:mod:`fedbench.signals`): a worker exits when the driver does, even after ``kill -9``
(it gets SIGTERM). SIGTERM or Ctrl-C stops a worker's run as Ctrl-C stops ``fedbench run`` (lease
released, rounds and checkpoint kept) and ends the worker (exit 143 or 130); an idle worker
exits at once. A driver interrupted by SIGTERM or Ctrl-C sends its workers SIGTERM, waits for
them, and re-raises.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import torch

from fedbench.engine.runner import RunOutcome
from fedbench.engine.setup import resolve_device
from fedbench.options import RunOptions
from fedbench.signals import INTERRUPTED_EXIT, TERMINATED_EXIT, Terminated, die_with_parent, exit_code
from fedbench.store import ResultsStore
from fedbench.sweeps.grid import SweepRun
from fedbench.sweeps.worker import execute_group, population_groups, record_failure

MAX_JOBS = 16
OnDone = Callable[[SweepRun, RunOutcome], None]


def default_jobs(device: str, cpus_per_run: float = 1.0) -> int:
    """One worker per GPU with CUDA (one for an explicit ``cuda:N``); else CPU count / CPUs per
    run, at most :data:`MAX_JOBS`."""
    if device != "cpu" and torch.cuda.is_available():
        return torch.cuda.device_count() if device in ("auto", "cuda") else 1
    return max(1, min(int((os.cpu_count() or 1) // cpus_per_run), MAX_JOBS))


_WORKER: dict[str, Any] = {"state": "idle"}  # idle | training | stopping (an interrupted run unwinds)
STOP_WAIT_S = 30.0  # how long an interrupted driver waits for a worker before killing it


def _on_signal(signum: int, frame: object) -> None:
    """A worker's SIGTERM / SIGINT: stop the run it trains as Ctrl-C does (:func:`_task` then ends the
    worker; later signals are ignored while the run unwinds), or exit at once when idle."""
    state = _WORKER["state"]
    if state == "training":
        _WORKER["state"] = "stopping"
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    if state == "idle":
        os._exit(TERMINATED_EXIT if signum == signal.SIGTERM else INTERRUPTED_EXIT)


def _init_worker(slots: Any, options: RunOptions, out: Path, parent: int) -> None:
    """Pool initializer: end with the driver (pid ``parent``) and on its signals, take a worker slot
    (its GPU with CUDA) and open the store."""
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    die_with_parent(parent)
    slot = slots.get()
    device = options.device
    if device in ("auto", "cuda") and torch.cuda.is_available():
        device = f"cuda:{slot % torch.cuda.device_count()}"
    _WORKER.update(store=ResultsStore(out), options=options, device=device)


def _task(runs: list[SweepRun]) -> list[RunOutcome]:
    """One run, or one population of runs, in a worker; an interrupted one (its leases released on the
    way out) ends the worker."""
    try:
        _WORKER["state"] = "training"
        outcomes = execute_group(runs, _WORKER["store"], _WORKER["options"], _WORKER["device"])
        _WORKER["state"] = "idle"
        return outcomes
    except KeyboardInterrupt as exc:
        os._exit(exit_code(exc))


def _stop(workers: list[Any]) -> None:
    """SIGTERM to each worker still alive, then wait for them (their runs release their leases), at
    most :data:`STOP_WAIT_S` seconds each before SIGKILL."""
    for process in workers:
        if process.is_alive():
            process.terminate()
    for process in workers:
        process.join(STOP_WAIT_S)
        if process.is_alive():
            process.kill()
            process.join()


def run_local(runs: list[SweepRun], out: Path, options: RunOptions, jobs: int, on_done: OnDone) -> list[RunOutcome]:
    """Execute ``runs`` with ``jobs`` worker processes; a worker that dies fails its run (and, as
    the pool breaks, the runs still queued), which the next sweep resumes."""
    store = ResultsStore(out)
    outcomes = []
    groups, _ = population_groups(runs, options, resolve_device(options.device))
    jobs = min(jobs, len(groups))
    if jobs <= 1:
        for group in groups:
            for run, outcome in zip(group, execute_group(group, store, options)):
                outcomes.append(outcome)
                on_done(run, outcome)
        return outcomes
    ctx = mp.get_context("spawn")
    slots = ctx.Queue()
    for slot in range(jobs):
        slots.put(slot)
    before = set(mp.active_children())
    with ProcessPoolExecutor(
        jobs, mp_context=ctx, initializer=_init_worker, initargs=(slots, options, out, os.getpid())
    ) as pool:
        futures = {pool.submit(_task, group): group for group in groups}
        workers = [p for p in mp.active_children() if p not in before]
        try:
            for future in as_completed(futures):
                group = futures[future]
                try:
                    done = future.result()
                except Exception as exc:  # the worker process died: BrokenProcessPool
                    lost = f"worker process lost: {type(exc).__name__}: {exc}"
                    done = [record_failure(store, run, lost) for run in group]
                for run, outcome in zip(group, done):
                    outcomes.append(outcome)
                    on_done(run, outcome)
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            _stop(workers)
            raise
    return outcomes
