"""The run options: how runs execute, shared by ``run``, ``sweep``, ``tune``, ``reproduce``,
``validate --estimate`` and :func:`fedbench.api.run` (issue 25 item 3: one vocabulary, one model).

None of them changes a run's identity (its spec hash): they say where the data is, which device
trains, how the S clients of a round are executed, and which trackers get a copy of each run. The vocabulary:

    --device        auto | cpu | cuda | cuda:N | mps      where runs train
    --data-dir      folder                                 where real datasets are (docs/datasets.md)
    --download      flag                                   fetch a missing torchvision dataset there
    --executor      auto | sequential | batched            the client executor (docs/commands.md)
    --chunk         N                                      batched: clients per vmapped chunk
    --compile       auto | on | off | graphs               batched: the step through torch.compile, or CUDA graphs
    --client-state  device | host                          per-client [N, P] tables on the device or in host memory
    --threads       N                                      torch CPU threads per run
    --population    auto | off | N                         runs trained together as one batched computation
    --log           tensorboard[:DIR] | mlflow[:URI]       also copy each run to a tracker when it ends (repeatable)

Process placement is a different word: ``--backend local|ray`` (``sweep``, ``tune``, ``reproduce``).
A :class:`RunOptions` is checked when built, so every one that exists is valid; the check names the
option and the value (``ValueError``, one line). Torch is not imported here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

from fedbench.engine.threads import DEFAULT_THREADS
from fedbench.trackers import LogTarget, parse_log

EXECUTORS = ("auto", "sequential", "batched")  # the client executor (fedbench.engine.executor)
COMPILE_CHOICES = ("auto", "on", "off", "graphs")  # the batched step: torch.compile or CUDA graphs (engine.compiled)
CLIENT_STATES = ("device", "host")  # where per-client [N, P] tables live (fedbench.algorithms.client_table)
BACKENDS = ("local", "ray")  # process placement of sweep, tune and reproduce (fedbench.sweeps)
DEVICE_PATTERN = r"auto|cpu|cuda(:\d+)?|mps"


def _one_of(option: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{option}: expected one of {', '.join(allowed)}, got {value!r}")


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True)
class RunOptions:
    """How runs execute (the table above); built once per command and passed down as one object
    to :func:`fedbench.runs.run_scenario`, the sweep workers and
    :func:`fedbench.engine.runner.execute_run`."""

    device: str = "auto"
    data_dir: Path = Path("data")
    download: bool = False
    executor: str = "auto"
    chunk: int | None = None  # None: sized to free GPU memory, 16 on a CPU (fedbench.engine.executor)
    compile_step: str = "auto"
    client_state: str = "device"
    threads: int = DEFAULT_THREADS
    population: str = "auto"  # auto | off | N (runs per population; fedbench.engine.population)
    log: tuple[LogTarget, ...] = ()  # trackers each run is copied to from the store (fedbench.trackers)

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        if self.executor in BACKENDS:
            raise ValueError(
                f"--executor {self.executor}: process placement is --backend {self.executor} (sweep, "
                f"tune, reproduce); --executor is the client executor: {', '.join(EXECUTORS)}"
            )
        _one_of("--executor", self.executor, EXECUTORS)
        _one_of("--compile", self.compile_step, COMPILE_CHOICES)
        _one_of("--client-state", self.client_state, CLIENT_STATES)
        if not isinstance(self.device, str) or not re.fullmatch(DEVICE_PATTERN, self.device):
            raise ValueError(f"--device {self.device}: expected auto, cpu, cuda, cuda:N or mps")
        for option, value in (("--chunk", self.chunk), ("--threads", self.threads)):
            if (value is not None or option == "--threads") and not _positive(value):
                raise ValueError(f"{option}: expected a positive integer, got {value!r}")
        population = str(self.population)
        if population not in ("auto", "off") and not (population.isdigit() and int(population) >= 1):
            raise ValueError(f"--population: expected auto, off or a positive number of runs, got {self.population!r}")
        object.__setattr__(self, "population", population)
        object.__setattr__(self, "log", parse_log(self.log))  # strings, repeated or comma-separated
        if not isinstance(self.download, bool):
            raise ValueError(f"--download: expected true or false, got {self.download!r}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The field names, in the order of the table above."""
        return tuple(f.name for f in fields(cls))
