"""The continual axis as a round plug-in (scenario block ``continual``; docs/scenarios.md).

Round t (1-based) belongs to task ⌊(t−1)/R⌋, R = ``rounds_per_task``. On a task's first round the
plug-in hands the loop that task's :class:`~fedbench.engine.federation.Federation` (:meth:`ContinualStream.stage`):
its per-task partition (``("partition", task)`` stream), a fresh
:class:`~fedbench.engine.batches.ClientBatcher` (``("task_batches", task, i, e)``), the clients'
sample counts n_i of the task (the aggregation weights and ``RoundContext.sizes``) and
the task's logit mask (:meth:`~fedbench.continual.tasks.TaskStream.label_mask`, applied by
:meth:`FlatModel.masked` in training, the full-gradient passes and evaluation, on both executors).
The local learning rate is ``lr_per_task`` (task 0, later tasks) or ``local.lr``, decayed by
``lr_decay`` per round *within* the task.

After the last round of a task: the global model is scored on every task's test set (the row
``task_acc`` of the accuracy matrix, in that round's ``extra``), every client's memory gets the
task's slot (:class:`~fedbench.continual.memory.ReplayMemory`), and ``Algorithm.end_task`` runs with a
:class:`~fedbench.algorithms.base.TaskData` (gradients on the task's data, the stream, the clients' task
indices, features/logits at any point, the memories, the model with the global BatchNorm statistics);
its logs may replace the ``task_acc`` row (an algorithm's own classifier).
``test_acc``/``test_loss`` of a continual run are over the test samples of the tasks seen so far.

Memory use: the engine inputs ``memory_grad`` = ∇f_i†(x_t) on ``replay_batch`` memory samples drawn
from the ``("replay", t, i)`` stream (or the whole memory, ``memory.gradient: full``) and ``memory_size``,
for algorithms that declare them (:meth:`ContinualStream.provide`); per-step replay (ER) joins ``replay_batch`` samples drawn from the
``("replay_step", task, i, position)`` stream to every local minibatch.

Hooks (:class:`~fedbench.engine.plugins.RoundPlugin`): ``stage`` (task switch), ``begin_round`` (logs ``task``),
``learning_rate``, ``local_config`` (per-step replay), ``provide`` (memory gradients),
``evaluate`` (seen tasks; the matrix row), ``after_evaluation`` (task end: the algorithm's state after
its ``end_task``), checkpoint entry ``continual``.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedbench.algorithms.base import Algorithm, Logs, TaskData
from fedbench.continual.memory import ReplayMemory
from fedbench.engine.batches import ClientBatcher
from fedbench.engine.device_plan import hashed_choice, key_of, stream_base
from fedbench.engine.federation import Federation, Gradients, InputRequest
from fedbench.engine.full_gradient import client_gradients, full_local_gradients
from fedbench.engine.local import LocalConfig, ReplayTable
from fedbench.engine.pending import to_device
from fedbench.engine.plugins import RoundPlugin
from fedbench.models.flat import Buffers
from fedbench.seeding import numpy_stream

if TYPE_CHECKING:
    from fedbench.engine.setup import RunSetup
    from fedbench.scenario import RunSpec


class ContinualStream(RoundPlugin):
    """Task switching, memories and task-end scoring of one continual run."""

    name = "continual"

    def __init__(self, spec: RunSpec, seed: int, setup: RunSetup):
        assert spec.continual is not None and setup.tasks is not None
        self.spec, self.seed, self.s, self.cfg = spec, seed, setup, spec.continual
        self.tasks, self.stream = setup.tasks, setup.tasks.stream
        self.memory = ReplayMemory(spec.clients.num, self.cfg.memory.per_task, seed)
        self.train_labels = setup.data.train.y.cpu().numpy()
        x = setup.data.train.x
        low, high = torch.stack([x.min(), x.max()]).tolist()  # read once, at setup: no task end waits for it
        self.input_range = (float(low), float(high))
        self.masks = [
            torch.as_tensor(self.stream.label_mask(j), device=setup.x0.device) for j in range(self.stream.num_tasks)
        ]
        self.test_idx = [torch.as_tensor(i, device=setup.data.test.y.device) for i in self.stream.test]
        self.task, self.entered = -1, 0  # the current task and the round that entered it
        self.fed = setup.federation  # the current task's clients' data
        self.row: torch.Tensor | None = None  # the accuracy-matrix row of the last evaluation [T], unread
        self._table: tuple[int, ReplayTable] | None = None  # replay_table's, with its task

    # -- schedule --------------------------------------------------------------------------
    def task_of(self, t: int) -> int:
        return (t - 1) // self.cfg.rounds_per_task

    def task_ends(self, t: int) -> bool:
        return t % self.cfg.rounds_per_task == 0

    def learning_rate(self, t: int, default: float) -> float:
        """η_l of round t (in place of the loop's ``default``): the task's base rate × lr_decay^(r−1), r = round in the task."""
        local, pair = self.spec.local, self.cfg.lr_per_task
        base = local.lr if pair is None else pair[0 if self.task_of(t) == 0 else 1]
        return base * local.lr_decay ** ((t - 1) % self.cfg.rounds_per_task)

    def stage(self, t: int, fed: Federation) -> Federation:
        """Round t's task: ``fed`` while the task goes on, else the next task's partition, batcher,
        client sizes and logit mask."""
        task = self.task_of(t)
        if task == self.task:
            return fed
        tasks, local = self.tasks, self.spec.local
        parts = tasks.parts[task]
        batcher = ClientBatcher(parts, local.batch_size, self.seed, local.drop_singleton_batch, task, local.shuffle)
        sizes = torch.tensor([len(p) for p in parts], dtype=fed.sizes.dtype, device=fed.sizes.device)
        self.task, self.entered = task, t
        self.fed = Federation(tuple(parts), sizes, batcher, tasks.info[task], self.masks[task])
        return self.fed

    def begin_round(self, t: int) -> dict[str, Any]:
        """Logs the task (and its partition on the round that entered it)."""
        if self.entered != t:
            return {"task": self.task}
        return {"task": self.task, "partition": self.fed.info}

    def local_config(self, cfg: LocalConfig) -> LocalConfig:
        """Per-step replay (``memory.replay: per_step`` or the algorithm's ``replay_per_step``), drawn on the device
        too under ``local.shuffle: device`` (:meth:`replay_table`)."""
        if self.cfg.memory.replay == "per_step" or self.s.algorithm.caps.replay_per_step:
            return replace(cfg, replay=self.replay, replay_table=self.replay_table if self.hashed else None)
        return cfg

    @property
    def hashed(self) -> bool:
        """Whether per-step replay draws are hashed (``local.shuffle: device``: :func:`hashed_choice`)."""
        return self.spec.local.shuffle == "device"

    def replay_table(self) -> ReplayTable:
        """The current task's memories as a device table (:class:`~fedbench.engine.local.ReplayTable`), built once a
        task: the memories change only at a task's end (the fill, an algorithm's ``end_task``), before the next
        task enters."""
        if self._table is None or self._table[0] != self.task:
            memories = [self.memory.indices(c) for c in range(self.spec.clients.num)]
            sizes = np.array([len(m) for m in memories], dtype=np.int64)
            table = ReplayTable(
                to_device(torch.from_numpy(np.concatenate(memories)), self.s.data.train.y.device),
                np.cumsum(sizes) - sizes,
                sizes,
                self.cfg.memory.replay_batch,
                stream_base(self.seed, ("replay_step", self.task)),
            )
            self._table = (self.task, table)
        return self._table[1]

    def provide(self, request: InputRequest) -> dict[str, torch.Tensor | Gradients]:
        """``memory_grad``/``memory_size``: ∇f_i†(x_t) on a memory draw (the engine computes it) and the memory's
        size, zeros for an empty memory (task 0)."""
        if not request.wanted & {"memory_grad", "memory_size"}:
            return {}
        grads, sizes = self.memory_gradients(list(request.ids), request.round, request.point)
        return {"memory_grad": grads, "memory_size": sizes}

    # -- evaluation ------------------------------------------------------------------------
    def evaluate(
        self, t: int, due: bool, x: torch.Tensor, buffers: Buffers
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """On schedule and at a task's end: the seen tasks' test samples (the matrix row kept), unread."""
        if not (due or self.task_ends(t)):
            return None
        acc, loss, self.row = self.score(x, buffers)
        return acc, loss

    def after_evaluation(self, t: int, state: Any, buffers: Buffers, cfg: LocalConfig) -> tuple[Any, Logs]:
        """At a task's end: the algorithm's state after :meth:`end_task`, the accuracy-matrix row
        ``task_acc`` and the task end's logs."""
        if not self.task_ends(t):
            return state, {}
        state, logs = self.end_task(self.s.algorithm, state, buffers, cfg)
        return state, {"task_acc": self.row, **logs}

    def score(self, x: torch.Tensor, buffers: Buffers) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(accuracy, loss) on the test samples of the tasks seen so far, and the accuracy on each
        task's test set ``[T]`` (one pass over the test set under the current mask): float64 tensors, unread
        (the round reads them with its metrics, :func:`~fedbench.engine.pending.read_rounds`; each value exact)."""
        correct, losses = self.s.model.per_sample(x, buffers, self.s.data.test, self.spec.eval.batch_size)
        seen = torch.cat(self.test_idx[: self.task + 1])
        means = [correct[i].float().mean() for i in (seen, *self.test_idx)] + [losses[seen].mean()]
        scores = torch.stack([m.double() for m in means])
        return scores[0], scores[-1], scores[1:-1]

    # -- memory ----------------------------------------------------------------------------
    def replay(self, client: int, position: int) -> torch.Tensor | None:
        """Per-step replay: ``replay_batch`` memory indices for the minibatch at ``position``, or None: from the
        ``("replay_step", task, i, position)`` stream, or under ``local.shuffle: device`` hashed by the same key
        (:func:`~fedbench.engine.device_plan.hashed_choice`, as a plan drawn on the device draws them)."""
        if self.memory.size(client) == 0:
            return None
        count = self.cfg.memory.replay_batch
        if self.hashed:
            key = key_of(stream_base(self.seed, ("replay_step", self.task)), client, position)
            drawn = hashed_choice(self.memory.indices(client), count, key)
        else:
            drawn = self.memory.draw(client, count, numpy_stream(self.seed, "replay_step", self.task, client, position))
        return torch.as_tensor(drawn, device=self.s.data.train.y.device)

    def memory_gradients(self, clients: list[int], t: int, like: torch.Tensor) -> tuple[Gradients, torch.Tensor]:
        """∇f_i†(x_t) ``[S, P]`` as the :class:`~fedbench.engine.federation.Gradients` of each memory's draw (rows of
        an empty memory are zeros; the engine computes them, a population's runs' together) and the memory sizes
        ``[S]`` (``like``'s dtype and device)."""
        held = [self.memory.size(c) for c in clients]  # on the host: the rows are chosen without a read
        sizes = like.new_tensor([float(n) for n in held])
        device = self.s.data.train.y.device
        rows = tuple(row for row, n in enumerate(held) if n > 0)
        draws = []
        for row in rows:
            c = clients[row]
            if self.cfg.memory.gradient == "full":
                draws.append(self.memory.indices(c))
            else:
                draws.append(self.memory.draw(c, self.cfg.memory.replay_batch, numpy_stream(self.seed, "replay", t, c)))
        if not draws:
            return Gradients((), ()), sizes
        joined = to_device(torch.from_numpy(np.concatenate(draws)), device)  # one copy (int64 memory indices)
        return Gradients(rows, tuple(joined.split([len(d) for d in draws]))), sizes

    # -- task end --------------------------------------------------------------------------
    def end_task(self, algo: Algorithm, state: Any, buffers: Buffers, cfg: LocalConfig) -> tuple[Any, Logs]:
        """Fill every client's memory slot for the finished task, then ``algo.end_task``."""
        s, task = self.s, self.task
        self.memory.fill(task, self.fed.batcher.host_parts, self.train_labels)  # the parts' host copy: no read
        parts, batch_size = list(self.fed.parts), self.spec.local.batch_size

        def gradients(point: torch.Tensor, squared: bool = False) -> torch.Tensor:
            if not squared:
                return full_local_gradients(s.model, buffers, s.data.train, parts, point, batch_size, cfg)
            return client_gradients(s.model, buffers, s.data.train, parts, point, batch_size, squared=True)

        def outputs(
            point: torch.Tensor, split: str, indices: torch.Tensor | None = None
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            return split_outputs(s, buffers, point, split, indices, self.spec.eval.batch_size)

        data = TaskData(
            task,
            self.fed.sizes.clone(),
            gradients,
            self.stream,
            tuple(parts),
            outputs,
            self.memory,
            s.model,
            MappingProxyType(buffers),
            s.data.input_shape,
            self.input_range,
        )
        state, logs = algo.end_task(state, data)
        return state, {"memory_sizes": [self.memory.size(c) for c in range(self.spec.clients.num)], **logs}

    # -- resume ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"task": self.task, "memory": self.memory.state_dict()}

    def load_state_dict(self, payload: dict[str, Any]) -> None:
        """Back to the checkpointed memories; the loop then asks for the checkpoint round's :meth:`stage`
        (the checkpointed task, entered afresh) and restores its batcher's cursor."""
        self.memory.load_state_dict(payload["memory"])
        self.task = -1


@torch.no_grad()
def split_outputs(
    s: RunSetup, buffers: Buffers, point: torch.Tensor, split: str, indices: torch.Tensor | None, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(penultimate features, logits, labels) of the ``train``/``test`` samples ``indices`` (all when
    None) at ``point``, eval mode, in chunks of ``batch_size`` (models with ``stages()``)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be train or test, got {split!r}")
    data = s.data.train if split == "train" else s.data.test
    idx = (
        torch.arange(len(data.y), device=data.y.device)
        if indices is None
        else torch.as_tensor(indices, device=data.y.device)
    )
    s.model.num_stages("this algorithm's end_task (features)")
    s.model.module.eval()
    feats, logits = [], []
    for start in range(0, len(idx), batch_size):
        out = s.model.run_stages(point, buffers, data.x[idx[start : start + batch_size]])
        feats.append(out[-2])
        logits.append(out[-1])
    return torch.cat(feats), torch.cat(logits), data.y[idx]
