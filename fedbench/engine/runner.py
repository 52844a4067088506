"""The round loop shared by every algorithm, with recording, divergence detection and resume.

One round (1-based t): sample S clients from the ``("sampling", t)`` stream, let the algorithm
broadcast, train the clients locally (η_l = lr·decay^(t−1)), let the algorithm aggregate and
update the server, evaluate the global model on the whole test set every ``eval.every``
rounds, and commit the round's metrics to the store. A checkpoint every ``checkpoint_every``
rounds lets an interrupted run resume with identical numbers.

With a ``wireless`` block (FedQVR Sec. V) the sampled devices' channel is drawn right after
sampling (:mod:`fedbench.wireless`): an ``adaptive_bits`` algorithm (FedQVR-E) gets the
allocation of Eq. (30) — devices below B̲ are removed before training, the others' bit widths
go to ``ctx.bits`` — and every upload is then checked against the deadline τ at its
bandwidth (W_total/m for fixed-bit algorithms); only those that arrive enter ``server_update``.
``bits_up`` counts every upload sent, lost ones included (they used the channel).

With a ``continual`` block the rounds walk through a task stream (:mod:`fedbench.engine.continual`):
task switches, per-task learning rates, memory gradients / per-step replay, the accuracy-matrix
row ``task_acc`` after each task's last round, and ``Algorithm.end_task``.
"""

from __future__ import annotations

import math
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

from fedbench.algorithms.base import RoundContext
from fedbench.algorithms.client_table import from_checkpoint, to_checkpoint
from fedbench.compress import BITS_PER_FLOAT, Compressed, bound_bits
from fedbench.engine.checkpoint import resume_point, save_checkpoint
from fedbench.engine.batched import run_clients_batched
from fedbench.engine.continual import ContinualLoop, no_memory
from fedbench.models.flat import average_buffers
from fedbench.engine.local import LocalConfig, LocalResult, full_local_gradients, run_clients_sequential
from fedbench.engine.setup import DataCache, RunSetup, build_run
from fedbench.engine.threads import DEFAULT_THREADS, pinned_threads
from fedbench.scenario import RunSpec, run_id_of, run_record
from fedbench.seeding import numpy_stream, torch_seed
from fedbench.store import ResultsStore

if TYPE_CHECKING:
    from fedbench.wireless import RoundRadio

RoundCallback = Callable[[int, dict[str, float | None]], None]


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: ``finished``, ``diverged``, ``failed`` or ``skipped`` (already done)."""

    run_id: str
    status: str
    error: str | None = None


def sample_clients(num: int, per_round: int, seed: int, round_: int, device: torch.device) -> torch.Tensor:
    """S distinct clients, uniformly without replacement, sorted (the ``("sampling", t)`` stream)."""
    chosen = numpy_stream(seed, "sampling", round_).choice(num, size=per_round, replace=False)
    return torch.as_tensor(sorted(chosen.tolist()), dtype=torch.int64, device=device)


def upload_bits(uploads: dict[str, torch.Tensor | Compressed]) -> float:
    """Bits the round's clients sent: compressed entries at their reported size, others at 32
    bits per float; entries named ``_…`` stay on the client and cost nothing."""
    return float(client_upload_bits(uploads).sum())


def client_upload_bits(uploads: dict[str, torch.Tensor | Compressed]) -> torch.Tensor:
    """Bits each of the round's clients sent ``[S]`` (float64; :func:`upload_bits` is their sum)."""
    rows = len(decoded(uploads)[next(iter(uploads))])
    total = torch.zeros(rows, dtype=torch.float64)
    for name, value in uploads.items():
        if not name.startswith("_"):
            total += value.bits.double().cpu() if isinstance(value, Compressed) else value[0].numel() * BITS_PER_FLOAT
    return total


def decoded(uploads: dict[str, torch.Tensor | Compressed]) -> dict[str, torch.Tensor]:
    """What the server reconstructs from the clients' messages."""
    return {k: v.value if isinstance(v, Compressed) else v for k, v in uploads.items()}


def aggregation_weights(spec: RunSpec, sizes: torch.Tensor) -> torch.Tensor:
    """n_i/Σn over the sampled clients (``samples``) or 1/S (``uniform``)."""
    if spec.server.weighting == "uniform":
        return torch.full_like(sizes, 1.0 / len(sizes))
    return sizes / sizes.sum()


def local_consistency(final: torch.Tensor) -> float:
    """(1/S)Σ_i ‖x_{i,K} − x̄‖² with x̄ = (1/S)Σ_i x_{i,K}: the dispersion of the clients' final
    local models (FedMIM Fig. 2b; lower means more consistent local updates)."""
    return float(((final - final.mean(0)) ** 2).sum(1).mean())


EXECUTORS = ("auto", "sequential", "batched")
CLIENT_STATES = ("device", "host")


def choose_executor(executor: str, has_buffers: bool, on_gpu: bool, batchable: bool = True) -> bool:
    """True for the batched client path: ``batched``, or ``auto`` on a GPU with a model without
    buffers. BatchNorm's per-client running statistics take the sequential path; so does ``auto``
    on a CPU, where the vmapped step measured slower than the per-client loop (README, Speed).
    Algorithms with ``batchable = False`` (their own local loss: MOON, FedMLB) always run
    sequentially, even under ``batched``, so that one suite can mix them with the others."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if not batchable:
        return False
    if executor == "batched" and has_buffers:
        raise ValueError("the batched executor needs a model without buffers (BatchNorm); use sequential or auto")
    return executor == "batched" or (executor == "auto" and on_gpu and not has_buffers)


class RoundLoop:
    """Executes the rounds of one run on a prepared :class:`RunSetup`."""

    def __init__(self, spec: RunSpec, seed: int, setup: RunSetup, executor: str = "auto"):
        self.spec, self.seed, self.s = spec, seed, setup
        self.state = setup.algorithm.init_state(setup.x0)
        self.buffers = setup.buffers0
        self.cl = None if spec.continual is None else ContinualLoop(spec, seed, setup)
        self.task_log: dict = {}
        replay = self.cl is not None and (spec.continual.memory.replay == "per_step" or setup.algorithm.caps.replay_per_step)
        self.local_cfg = LocalConfig(
            spec.local.weight_decay, spec.local.clip_grad_norm, spec.local.augment, seed, self.cl.replay if replay else None,
            setup.algorithm.caps.replay_apart,
        )
        self.batched = choose_executor(
            executor, bool(setup.buffers0), setup.x0.device.type == "cuda", setup.algorithm.caps.batchable
        )
        self.uplink, self.adaptive = None, False
        if spec.wireless is not None:  # FedQVR-E's channel (cvxpy is imported only for these runs)
            from fedbench.wireless import Uplink

            model = setup.model  # payload d(B+1) + μ, μ = 2·32 bits per parameter tensor (+ fp32 BN buffers)
            overhead = bound_bits(len(model.numels)) + BITS_PER_FLOAT * model.buffer_numel()
            self.uplink = Uplink(spec.wireless, spec.clients.num, seed, model.dim, overhead)
            self.adaptive = setup.algorithm.caps.adaptive_bits

    def steps_of(self, clients: list[int], t: int) -> list[int]:
        """Local steps K_i of each sampled client in round t: fixed iterations, ⌈E·n_i/B⌉ for
        epochs, or ⌈E_i·n_i/B⌉ with E_i drawn from the client's ``("local_epochs", t, i)`` stream."""
        local = self.spec.local
        if local.iterations is not None:
            return [local.iterations] * len(clients)
        if local.random_epochs is not None:
            low, high = local.random_epochs
            epochs = [int(numpy_stream(self.seed, "local_epochs", t, c).integers(low, high + 1)) for c in clients]
            return [self.s.batcher.steps_for_epochs(c, e) for c, e in zip(clients, epochs)]
        return [self.s.batcher.steps_for_epochs(c, local.epochs) for c in clients]

    def round(self, t: int) -> tuple[dict[str, float | None], dict]:
        """Run round t; return (metrics, extra logs). Dropout masks (the only draws from torch's
        global generators) come from the ``("dropout", t)`` stream: the generators are seeded for
        the round and restored afterwards, so a resumed run draws what an uninterrupted one did."""
        device = self.s.x0.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(torch_seed(self.seed, "dropout", t))
            return self._round(t)

    def _round(self, t: int) -> tuple[dict[str, float | None], dict]:
        spec, s = self.spec, self.s
        start = time.perf_counter()
        self.task_log = {} if self.cl is None else self.cl.begin_round(t)
        clients = sample_clients(spec.clients.num, spec.clients.per_round, self.seed, t, s.x0.device)
        lr = spec.local.lr * spec.local.lr_decay ** (t - 1) if self.cl is None else self.cl.lr(t)
        radio = None if self.uplink is None else self.uplink.round(t, clients.cpu().numpy(), self.adaptive)
        if radio is not None:  # FedQVR-E Alg. 2 line 6: devices allocated < B̲ bits neither train nor upload
            clients = clients[torch.as_tensor(radio.kept, device=clients.device)]
            if len(clients) == 0:
                return self.idle_round(t, start, lr, radio)
        steps = self.steps_of(clients.tolist(), t)
        algo = s.algorithm
        ctx = RoundContext(
            clients, lr, torch.tensor(steps, dtype=s.x0.dtype, device=s.x0.device),
            algo.broadcast(self.state, clients), algo.client_state(self.state, clients), t,
        )
        if radio is not None and radio.bits is not None:
            ctx.bits = torch.as_tensor(radio.bits[radio.kept], dtype=torch.int64, device=clients.device)
        if algo.caps.full_gradient:
            ctx.full_grad = full_local_gradients(
                s.model, self.buffers, s.data.train, [s.parts[c] for c in clients.tolist()],
                ctx.broadcast["x"], spec.local.batch_size, self.local_cfg,
            )
        if algo.caps.memory_gradient:  # ∇f_i†(x_t) on a memory draw; zeros for an empty memory (task 0)
            grads, sizes = (
                no_memory(len(clients), ctx.broadcast["x"]) if self.cl is None
                else self.cl.memory_gradients(self.buffers, clients.tolist(), ctx.broadcast["x"], t, self.local_cfg)
            )
            ctx.memory_grad, ctx.memory_size = grads, sizes
        algo.prepare_round(self.state, ctx, aggregation_weights(spec, s.client_sizes[clients]))
        if self.batched:
            result = run_clients_batched(algo, ctx, steps, s.model, s.data.train, s.batcher, self.local_cfg)
        else:
            result = run_clients_sequential(algo, ctx, steps, s.model, self.buffers, s.data.train, s.batcher, self.local_cfg)
        extra = self.aggregate(ctx, result, radio)
        n = len(clients)
        buffer_bits = n * s.model.buffer_numel() * BITS_PER_FLOAT
        metrics: dict[str, float | None] = {
            "train_loss": float(result.losses.mean()),
            "bits_up": upload_bits(result.uploads) + buffer_bits,
            "bits_down": n * sum(v.numel() for v in ctx.broadcast.values()) * BITS_PER_FLOAT + buffer_bits,
            "consistency": local_consistency(result.final),
            "test_acc": None,
            "test_loss": None,
        }
        return self._finish(t, start, lr, metrics, extra)

    def _finish(self, t: int, start: float, lr: float, metrics: dict[str, float | None], extra: dict) -> tuple[dict, dict]:
        """Evaluate on schedule, time the round, add the once-per-run logs."""
        spec, s = self.spec, self.s
        due = t % spec.eval.every == 0 or t == spec.rounds
        task_end = self.cl is not None and self.cl.task_ends(t)
        if self.cl is not None and (due or task_end):  # seen tasks' test samples; the matrix row at a task's end
            acc, loss, row = self.cl.evaluate(self.state["x"], self.buffers)
            metrics["test_acc"], metrics["test_loss"] = acc, loss
            if task_end:
                extra = {**extra, "task_acc": row, **self.cl.end_task(s.algorithm, self.state, self.buffers, self.local_cfg)}
        elif due:
            acc, loss = s.model.evaluate(self.state["x"], self.buffers, s.data.test, spec.eval.batch_size)
            metrics["test_acc"], metrics["test_loss"] = acc, loss
        if due and spec.eval.client_spread:
            metrics["client_acc_std"] = self.client_accuracy_spread()
        metrics["wall_s"] = time.perf_counter() - start
        if t == 1:  # once per run: the partition's sizes and label skew, the server state's size
            state_mb = sum(v.numel() * v.element_size() for v in self.state.values()) / 2**20
            extra = {
                **extra, "partition": s.partition_info, "server_state_mb": state_mb, "executor": self.executor_note(),
                "threads": torch.get_num_threads(),
            }
        return metrics, {"lr": lr, **extra, **self.task_log}

    def aggregate(self, ctx: RoundContext, result: LocalResult, radio: RoundRadio | None) -> dict:
        """``server_update`` on the uploads that reach the server: all of them on an ideal uplink;
        under ``wireless`` those meeting τ (Eq. 28), with weights renormalised over them or, for
        ``zero_fill``, the sampled set's (FedQVR N/m). Lost clients are left out of ``server_update``,
        so their per-client state (c_i, error memory) does not move; with none received the model stays."""
        spec, s, algo = self.spec, self.s, self.s.algorithm
        uploads, buffers = decoded(result.uploads), result.buffers
        weights = buffer_weights = aggregation_weights(spec, s.client_sizes[ctx.clients])
        logs: dict = {}
        if radio is not None:
            ok = radio.deliver((client_upload_bits(result.uploads) + s.model.buffer_numel() * BITS_PER_FLOAT).numpy())
            radio.log["server_update"] = "done" if ok.any() else "skipped: no upload arrived"
            logs["wireless"] = radio.log
            if not ok.any():
                return logs
            zero_fill = spec.wireless.outage_aggregation == "zero_fill"
            if not ok.all() or (zero_fill and not radio.kept.all()):
                rows = torch.as_tensor(ok.nonzero()[0], device=ctx.clients.device)
                ctx, uploads = ctx.select(rows), {k: v[rows] for k, v in uploads.items()}
                buffers = [buffers[i] for i in rows.tolist()]
                if zero_fill:  # the sampled set's weights, lost and removed devices counting as zero
                    sampled = torch.as_tensor(radio.clients, device=ctx.clients.device)
                    kept = torch.as_tensor(radio.kept, device=ctx.clients.device)
                    weights = aggregation_weights(spec, s.client_sizes[sampled])[kept][rows]
                    buffer_weights = weights / weights.sum()
                else:
                    weights = buffer_weights = aggregation_weights(spec, s.client_sizes[ctx.clients])
        extra = algo.server_update(self.state, ctx, uploads, weights)
        self.buffers = average_buffers(buffers, buffer_weights)
        return {**extra, **logs}

    def idle_round(self, t: int, start: float, lr: float, radio: RoundRadio) -> tuple[dict, dict]:
        """A round in which the allocation removed every sampled device: nothing trains or is sent."""
        radio.log.update(received=[], lost=[], server_update="skipped: every device was removed")
        metrics: dict[str, float | None] = {
            "train_loss": None, "bits_up": 0.0, "bits_down": 0.0, "consistency": None, "test_acc": None, "test_loss": None,
        }
        return self._finish(t, start, lr, metrics, {"wireless": radio.log})

    def executor_note(self) -> str:
        """Which client executor ran, and why the batched one did not when it was not used."""
        if self.batched:
            return "batched"
        if not self.s.algorithm.caps.batchable:
            return "sequential (the algorithm's local loss runs client by client)"
        if self.s.buffers0:
            return "sequential (BatchNorm running statistics are per client)"
        return "sequential"

    def client_accuracy_spread(self) -> float:
        """Std over all N clients of the global model's accuracy on each client's training data."""
        s = self.s
        correct, _ = s.model.per_sample(self.state["x"], self.buffers, s.data.train, self.spec.eval.batch_size)
        per_client = torch.stack([correct[p].float().mean() for p in s.parts])
        return float(per_client.std(correction=0))

    def diverged(self, metrics: dict[str, float | None]) -> bool:
        values = [metrics["train_loss"], metrics["test_loss"]]
        bad = any(v is not None and not math.isfinite(v) for v in values)
        return bad or not bool(torch.isfinite(self.state["x"]).all())

    def checkpoint(self, t: int) -> dict:
        state, hosted = to_checkpoint(self.state)
        payload = {"round": t, "state": state, "hosted": hosted, "buffers": self.buffers,
                   "batcher": self.s.batcher.state_dict()}
        return payload if self.cl is None else {**payload, "continual": self.cl.state_dict()}

    def restore(self, payload: dict) -> int:
        self.state = from_checkpoint(payload["state"], payload.get("hosted", []), self.s.x0.device)
        self.buffers = payload["buffers"]
        if self.cl is not None:  # first the checkpointed task (its batcher), then that batcher's cursor
            self.cl.load_state_dict(payload["continual"])
        self.s.batcher.load_state_dict(payload["batcher"])
        return int(payload["round"])


def execute_run(
    spec: RunSpec,
    seed: int,
    store: ResultsStore,
    cache: DataCache,
    scenario_hash: str,
    on_round: RoundCallback | None = None,
    executor: str = "auto",
    client_state: str = "device",
    threads: int = DEFAULT_THREADS,
) -> RunOutcome:
    """Run (or resume, or skip) one (spec, seed); never raises for a failing run: records it.
    ``client_state: host`` keeps per-client ``[N, P]`` tables in (pinned) host memory (same numbers);
    the run trains with ``threads`` torch threads (:mod:`fedbench.engine.threads`)."""
    run_id = run_id_of(spec, seed)
    status = store.status(run_id)
    if status in ("finished", "diverged"):
        return RunOutcome(run_id, "skipped")
    with pinned_threads(threads):
        return _train(spec, seed, store, cache, scenario_hash, on_round, executor, client_state, run_id)


def _train(
    spec: RunSpec, seed: int, store: ResultsStore, cache: DataCache, scenario_hash: str,
    on_round: RoundCallback | None, executor: str, client_state: str, run_id: str,
) -> RunOutcome:
    """The body of :func:`execute_run` for a run that is not done yet."""
    record = run_record(spec, seed, scenario_hash)
    store.start_run(record)
    ckpt_path = store.checkpoint_path(run_id)
    try:
        if client_state not in CLIENT_STATES:
            raise ValueError(f"client_state must be one of {', '.join(CLIENT_STATES)}, got {client_state!r}")
        loop = RoundLoop(spec, seed, build_run(spec, seed, cache, client_state == "host"), executor)
        payload = resume_point(ckpt_path, cache.device, store, run_id)
        done = loop.restore(payload) if payload else 0
        store.truncate_after(run_id, done)
        warned = False
        for t in range(done + 1, spec.rounds + 1):
            metrics, extra = loop.round(t)
            store.record_round(run_id, t, metrics, extra)
            if extra.get("qp_fallbacks") and not warned:  # once per run; the tables footnote the total
                warned = True
                warnings.warn(f"{spec.scenario} / {spec.label} seed {seed}: {extra['qp_fallbacks']} QP projection block(s) "
                              f"fell back (left unprojected) at round {t}; the round logs count every later one", RuntimeWarning)
            if on_round:
                on_round(t, metrics)
            if loop.diverged(metrics):
                store.finish_run(run_id, "diverged", f"non-finite loss or model at round {t}")
                ckpt_path.unlink(missing_ok=True)
                return RunOutcome(run_id, "diverged")
            if t % spec.checkpoint_every == 0 and t < spec.rounds:
                save_checkpoint(ckpt_path, loop.checkpoint(t))
    except Exception as exc:  # a crashed run is recorded and never stops the suite
        store.finish_run(run_id, "failed", "".join(traceback.format_exception(exc)))
        return RunOutcome(run_id, "failed", f"{type(exc).__name__}: {exc}")
    store.finish_run(run_id, "finished")
    ckpt_path.unlink(missing_ok=True)
    return RunOutcome(run_id, "finished")
