"""The scenario file's typed schema: one pydantic model per block, unknown keys rejected.

A scenario file describes one experiment table: a dataset, a model, a client population and
its partition, the local work, the number of rounds, and a list of algorithms to compare over
several seeds. Registered components (dataset, model, partition, algorithm, compressor) take
their parameters inline (``partition: {kind: dirichlet, omega: 0.1}``); those are validated
against the chosen entry's own schema when the scenario is resolved (:mod:`.resolve`).
Every key is documented in docs/scenarios.md.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from fedbench.optim.spec import ServerSpec
from fedbench.scenario.tunespec import EntryTuneField, ScenarioTune, TuneSpec, merge_tune
from fedbench.strict import Seed, StrictModel, check_order

if TYPE_CHECKING:
    from fedbench.scenario.runspec import RunSpec


class Strict(StrictModel):
    """Base of every schema block: unknown keys, booleans for numbers and non-finite floats are errors."""


class InlineParams(BaseModel):
    """A block whose unknown keys are the chosen registry entry's parameters (validated later
    against that entry's own schema, so errors still name their YAML path)."""

    model_config = ConfigDict(extra="allow", strict=True)

    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class Component(InlineParams):
    """A registered component chosen by ``name`` with its parameters inline."""

    name: str


class PartitionSpec(InlineParams):
    """How the training set is split across clients: ``kind`` plus that kind's parameters."""

    kind: str = "iid"


class AvailabilitySpec(Strict):
    """Which clients can be sampled in round t (``clients.availability``; FLGo's availability modes, the MIFA
    paper's unavailable devices). ``always``: every client (plain FL). ``bernoulli``: client i is available
    with probability p_i, independently every round. ``markov``: client i's on/off state follows a two-state
    Markov chain (it stays on with ``stay_on``, stays off with ``stay_off``; round 1 starts from the chain's
    stationary distribution). ``diurnal``: available with p_i(t) = p_i·(1 + amplitude·sin(2πt/period)), clipped
    to [0, 1]. p_i is ``p`` for every client or, with ``p_range: [lo, hi]``, drawn once per client uniformly
    in it. Every draw comes from the run's seeded streams (``availability_p``, ``availability`` t)."""

    kind: Literal["always", "bernoulli", "markov", "diurnal"] = Field(description="availability model")
    p: float | None = Field(default=None, gt=0, le=1, description="bernoulli, diurnal: p_i of every client")
    p_range: tuple[float, float] | None = Field(
        default=None, description="bernoulli, diurnal: each client's p_i drawn uniformly in [lo, hi] ⊂ (0, 1]"
    )
    stay_on: float | None = Field(default=None, ge=0, le=1, description="markov: P(on at t+1 | on at t)")
    stay_off: float | None = Field(default=None, ge=0, lt=1, description="markov: P(off at t+1 | off at t)")
    period: int | None = Field(default=None, ge=1, description="diurnal: rounds per cycle")
    amplitude: float | None = Field(default=None, ge=0, le=1, description="diurnal: relative swing of p_i(t)")

    @model_validator(mode="after")
    def _fields_of_kind(self) -> AvailabilitySpec:
        needs = {
            "always": (),
            "bernoulli": ("p|p_range",),
            "markov": ("stay_on", "stay_off"),
            "diurnal": ("p|p_range", "period", "amplitude"),
        }[self.kind]
        for need in needs:
            names = need.split("|")
            given = [n for n in names if getattr(self, n) is not None]
            if len(given) != 1:
                what = " or ".join(names) if len(names) > 1 else names[0]
                raise ValueError(f"kind {self.kind} needs {'exactly one of ' if len(names) > 1 else ''}{what}")
        allowed = {n for need in needs for n in need.split("|")}
        extra = [n for n in ("p", "p_range", "stay_on", "stay_off", "period", "amplitude") if n not in allowed]
        extra = [n for n in extra if getattr(self, n) is not None]
        if extra:
            raise ValueError(f"kind {self.kind} takes no {', '.join(extra)}")
        if self.p_range is not None:
            lo, hi = self.p_range
            if not 0 < lo <= hi <= 1:
                raise ValueError(f"p_range must satisfy 0 < lo ≤ hi ≤ 1, got [{lo}, {hi}]")
        return self


class StragglerSpec(Strict):
    """Clients that do not finish their local work (``clients.stragglers``): each round a ``fraction`` of the
    sampled clients, drawn from the ``("stragglers", t)`` stream, either complete only part of it (``partial``:
    ⌈u·K_i⌉ of their K_i steps, u uniform in ``work``) or miss the round (``drop``: they train nothing and
    send nothing)."""

    fraction: float = Field(gt=0, le=1, description="share of the sampled clients that straggle each round")
    mode: Literal["partial", "drop"] = Field(default="partial", description="partial work, or a missed round")
    work: tuple[float, float] = Field(
        default=(0.1, 0.9), description="partial: the fraction u of K_i a straggler completes, uniform in [lo, hi]"
    )

    @model_validator(mode="after")
    def _work_in_unit(self) -> StragglerSpec:
        lo, hi = self.work
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"work must satisfy 0 < lo ≤ hi ≤ 1, got [{lo}, {hi}]")
        return self


class ClientsSpec(Strict):
    """The client population: N clients, S of them sampled uniformly without replacement each round (from
    the available ones under ``availability``); ``stragglers`` may not finish their local work."""

    num: int = Field(ge=1, description="number of clients N")
    per_round: int = Field(ge=1, description="clients sampled per round S (≤ N)")
    availability: AvailabilitySpec | None = Field(default=None, description="which clients can be sampled each round")
    stragglers: StragglerSpec | None = Field(default=None, description="sampled clients that do not finish")

    @model_validator(mode="after")
    def _s_le_n(self) -> ClientsSpec:
        if self.per_round > self.num:
            raise ValueError(f"per_round ({self.per_round}) must be ≤ num ({self.num})")
        return self

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: Any) -> dict[str, Any]:
        """Absent ``availability`` and ``stragglers`` are left out of the JSON (and the spec hash), so specs
        written before they existed keep their hash."""
        data = handler(self)
        for block in ("availability", "stragglers"):
            if getattr(self, block) is None:
                data.pop(block, None)
        return data


class AugmentSpec(Strict):
    """Training-minibatch augmentation for image datasets (off by default)."""

    flip: bool = Field(default=False, description="random horizontal flip with probability ½")
    crop_padding: int = Field(default=0, ge=0, description="random crop of the image zero-padded by this many pixels")


class LocalSpec(Strict):
    """Local work of a sampled client in one round (plain SGD steps on its own data)."""

    iterations: int | None = Field(default=None, ge=1, description="local steps I per round")
    epochs: float | None = Field(default=None, gt=0, description="local epochs E per round (steps = ⌈E·n_i/B⌉)")
    random_epochs: tuple[int, int] | None = Field(
        default=None,
        description="heterogeneous local work (FedQVR's HLU): each sampled client draws its integer epochs "
        "uniformly from [low, high] every round, from its own ('local_epochs', round, client) stream",
    )
    batch_size: int = Field(default=32, ge=1)
    lr: float = Field(default=0.01, gt=0, description="local learning rate η_l at round 1")
    lr_decay: float = Field(default=1.0, gt=0, le=1, description="η_l at round t is lr·lr_decay^(t−1)")
    weight_decay: float = Field(default=0.0, ge=0)
    clip_grad_norm: float | None = Field(default=None, gt=0, description="clip each minibatch gradient's norm")
    augment: AugmentSpec = Field(default_factory=AugmentSpec)
    data_fraction: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="each client trains on this random fraction of its samples (FedCAMS code: 0.8)",
    )
    drop_singleton_batch: bool = Field(
        default=False, description="skip an epoch's last batch when it would hold one sample (BatchNorm; GradMA code)"
    )
    precision: Literal["fp32", "bf16", "fp64"] = Field(
        default="fp32",
        description="bf16: forward passes under torch.autocast(bfloat16), float32 parameters (mixed precision); "
        "fp64: data, parameters, algorithm state and every computation in float64 (the tiny scale: the same numbers on "
        "every CPU)",
    )
    shuffle: Literal["host", "device"] = Field(
        default="host",
        description="each local epoch's order of a client's samples. host: torch.randperm from a seeded CPU generator "
        "per (client, epoch); device: a counter-based hash permutation (and hashed augment crops and flips), a whole "
        "round's plan drawn on the data's device in a few batched kernels (populations on a GPU), the same on every "
        "CPU and GPU. Other batches than host",
    )
    tf32: bool = Field(
        default=True,
        description="on a GPU, float32 matmuls and convolutions in TensorFloat-32 (training and evaluation); "
        "false: full float32 (IEEE). No effect on a CPU",
    )
    optimizer: Literal["sgd", "adam"] = Field(
        default="sgd",
        description="local optimizer: sgd (x − η_l·d) or adam (Adam on the algorithm's direction d, reset every round; "
        "only algorithms registered with local_optimizer, e.g. fedavg, fine_fl, er_fl)",
    )
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="Adam's (β1, β2) (optimizer: adam)")
    eps: float = Field(default=1e-8, gt=0, description="Adam's ε (optimizer: adam)")

    @model_validator(mode="after")
    def _one_of(self) -> LocalSpec:
        chosen = [k for k in ("iterations", "epochs", "random_epochs") if getattr(self, k) is not None]
        if len(chosen) != 1:
            raise ValueError(f"set exactly one of 'iterations', 'epochs' and 'random_epochs', got {chosen or 'none'}")
        if self.drop_singleton_batch and self.batch_size == 1:
            raise ValueError("drop_singleton_batch needs batch_size ≥ 2 (every batch of one sample would be skipped)")
        return self

    @field_validator("random_epochs")
    @classmethod
    def _low_high(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and not 1 <= value[0] <= value[1]:
            raise ValueError("expected [low, high] with 1 ≤ low ≤ high")
        return value

    @field_validator("betas")
    @classmethod
    def _unit(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in value):
            raise ValueError("expected two values in [0, 1)")
        return value

    @model_serializer(mode="wrap")
    def _omit_sgd_keys(self, handler: Any) -> dict[str, Any]:
        """Keys added after the first release are left out while they hold their default (the
        Adam keys with ``optimizer: sgd``, no ``random_epochs``, ``drop_singleton_batch: false``,
        ``precision: fp32``, ``shuffle: host``, ``tf32: true``),
        so specs written before they existed keep their JSON and their hash."""
        data = handler(self)
        if self.optimizer == "sgd":
            for key in ("optimizer", "betas", "eps"):
                data.pop(key, None)
        if self.random_epochs is None:
            data.pop("random_epochs", None)
        if not self.drop_singleton_batch:
            data.pop("drop_singleton_batch", None)
        if self.precision == "fp32":
            data.pop("precision", None)
        if self.shuffle == "host":
            data.pop("shuffle", None)
        if self.tf32:
            data.pop("tf32", None)
        return data


class EvalSpec(Strict):
    """Evaluation of the global model on the whole test set."""

    every: int = Field(default=1, ge=1, description="evaluate every k rounds (and always at the last round)")
    batch_size: int = Field(default=1024, ge=1)
    client_spread: bool = Field(
        default=True,
        description="also record the std over clients of the global model's accuracy on each client's data",
    )


class WirelessSpec(Strict):
    """FDMA uplink of FedQVR (Wang et al., Sec. V-A, VI-C) under a per-round upload deadline τ.

    Devices sit uniformly in a disk around the server (positions once per seed), with path loss
    c·dist^(−exp) and i.i.d. Rayleigh fading per round; rate W·log₂(1 + P|h|²/(Wσ²)). Algorithms
    registered with ``adaptive_bits`` (FedQVR-E) get a bandwidth/bit allocation (Eq. 30) before
    local work; the others share the band equally and lose uploads that miss τ.
    """

    tau_s: float = Field(
        default=1.0, gt=0, description="tolerable upload delay τ per round (s); paper Fig. 5c: 1.0, 5d: 0.8"
    )
    bandwidth_hz: float = Field(default=1e8, gt=0, description="total uplink bandwidth W_total (paper: 100 MHz)")
    tx_power_dbm: float = Field(default=30.0, description="device transmit power P (paper: 30 dBm)")
    noise_psd_dbm_hz: float = Field(default=-143.0, description="noise power spectral density σ² (paper: −143 dBm/Hz)")
    cell_radius_m: float = Field(
        default=3000.0, gt=0, description="cell radius (not in the paper; ASSUMPTION, notes §5.6)"
    )
    pathloss_const: float = Field(default=1e-3, gt=0, description="c in |h|² = c·dist^(−exp)·|g|² (paper: 1e-3)")
    pathloss_exp: float = Field(default=2.0, gt=0, description="path-loss exponent (paper: 2)")
    fairness_alpha: float = Field(
        default=0.5, ge=0, description="α of the α-fair objective Σ B^(1−α)/(1−α) (paper: 0.5)"
    )
    b_min: int = Field(
        default=2, ge=1, description="B̲: devices allocated fewer bits are removed (not in the paper; ASSUMPTION)"
    )
    b_max: int | None = Field(
        default=None, ge=1, description="optional cap B_i ≤ b_max inside the allocation (paper: none)"
    )
    resolve_after_drop: bool = Field(
        default=False, description="re-solve the allocation without the removed devices (paper: no)"
    )
    outage_aggregation: Literal["renormalize", "zero_fill"] = Field(
        default="renormalize",
        description="weights over the updates that arrive: renormalised over them, or the sampled set's (lost ones count as zero)",
    )

    @model_validator(mode="after")
    def _bounds(self) -> WirelessSpec:
        check_order(self, "b_min", "b_max")
        return self


class MemorySpec(Strict):
    """Each client's replay memory (C-FLAG notes §8.6): class-balanced, filled from the client's data of
    a task when that task ends, frozen while a task trains."""

    per_task: int = Field(default=400, ge=0, description="samples kept per finished task and client")
    replay_batch: int = Field(default=50, ge=1, description="samples drawn from the memory per draw")
    replay: Literal["none", "per_step"] = Field(
        default="none", description="per_step: a replay batch joins every local minibatch, for every algorithm (ER)"
    )
    gradient: Literal["batch", "full"] = Field(
        default="batch", description="memory gradient ∇f_i†(x_t) on a replay_batch draw (batch) or on the whole memory"
    )


class ContinualSpec(Strict):
    """Task streams (C-FLAG Sec. 7): the classes are split into tasks trained one after another."""

    tasks: int = Field(ge=1, description="number of tasks S")
    classes_per_task: int | None = Field(default=None, ge=1, description="null: num_classes / tasks")
    class_order: Literal["natural", "seeded"] = Field(
        default="natural", description="natural: 0, 1, 2, …; seeded: a permutation from the ('class_order',) stream"
    )
    mode: Literal["task", "class"] = Field(
        default="task",
        description="task: one head per task (logits masked to the sample's task); class: one head over the classes seen",
    )
    rounds_per_task: int = Field(ge=1, description="communication rounds per task (rounds = tasks × rounds_per_task)")
    lr_per_task: tuple[float, float] | None = Field(
        default=None, description="[η_l of task 0, η_l of every later task], replacing local.lr (C-FLAG: [5e-4, 1e-3])"
    )
    memory: MemorySpec = Field(default_factory=MemorySpec)

    @model_validator(mode="after")
    def _checks(self) -> ContinualSpec:
        if self.lr_per_task is not None and min(self.lr_per_task) <= 0:
            raise ValueError(f"lr_per_task must be two positive learning rates, got {list(self.lr_per_task)}")
        if self.memory.replay == "per_step" and self.memory.per_task == 0:
            raise ValueError("memory.replay: per_step needs memory.per_task ≥ 1 (the memory would stay empty)")
        return self


class AdaptiveClipSpec(Strict):
    """Adaptive clipping (Andrew et al. 2021, "Differentially Private Learning with Adaptive Clipping", Alg. 1):
    after each round C ← C·exp(−η_C(b̃ − γ)), b̃ the noised fraction of the round's clients whose update norm
    was at most C (noise N(0, σ_b²) on their count), so that C tracks the γ-quantile of the update norms."""

    quantile: float = Field(default=0.5, gt=0, lt=1, description="γ: the target quantile of the update norms")
    lr: float = Field(default=0.2, gt=0, description="η_C: the geometric step of C (paper: 0.2)")
    count_noise: float | None = Field(
        default=None, ge=0, description="σ_b: std of the noise on the unclipped count (null: S/20, the paper's)"
    )


class PrivacySpec(Strict):
    """Client-level differential privacy, DP-FedAvg (McMahan et al. 2018, Alg. 1 with the fixed-denominator
    estimator): each received update Δ_i clipped to norm ``clip`` C, averaged with weights 1/S, and
    N(0, (z·C/S)² I) added to the average, z = ``noise_multiplier``; an Opacus accountant (``rdp`` or
    ``prv``) gives the (ε, δ) spent after each round with sampling rate q = S/N (fedbench/privacy.py)."""

    clip: float = Field(gt=0, allow_inf_nan=True, description="C: clip norm of each client update (.inf: none)")
    noise_multiplier: float = Field(ge=0, description="z: noise std over the sensitivity C/S (0: no noise)")
    adaptive_clip: AdaptiveClipSpec | None = Field(default=None, description="move C toward a quantile of the norms")
    delta: float | None = Field(default=None, gt=0, lt=1, description="δ of the (ε, δ) guarantee (null: 1/N^1.1)")
    accountant: Literal["rdp", "prv"] = Field(default="rdp", description="Opacus accountant: RDP or PRV")

    @field_validator("clip", mode="before")
    @classmethod
    def _infinite(cls, value: Any) -> Any:
        """``inf`` (the JSON form of C = ∞, :meth:`_clip_json`) reads back as the float."""
        return math.inf if value in ("inf", "Infinity") else value

    @field_serializer("clip", when_used="json")
    def _clip_json(self, value: float) -> float | str:
        """C = ∞ is ``"inf"`` in the spec's JSON (JSON has no infinity)."""
        return "inf" if math.isinf(value) else value

    @model_validator(mode="after")
    def _checks(self) -> PrivacySpec:
        if math.isnan(self.clip):
            raise ValueError("clip must be a positive number or .inf, got nan")
        if self.adaptive_clip is not None and math.isinf(self.clip):
            raise ValueError("adaptive_clip needs a finite clip (its starting C)")
        return self


class CompressionSpec(InlineParams):
    """Uplink compressor: ``kind`` (see ``fedbench list compressors``) plus its parameters inline."""

    kind: str = "none"


class BlowupSpec(Strict):
    """When a run that finished (finite numbers) is flagged as blown up in the tables: it still counts,
    and the flag says its numbers are suspect. Reporting only: not part of the run's hash."""

    loss_factor: float = Field(
        default=1e3, gt=1, description="flag a run whose train or test loss exceeds this factor × its first value"
    )
    chance_margin: float = Field(
        default=0.05,
        ge=0,
        lt=1,
        description="flag a run whose last accuracy is within this margin of chance "
        "(1/classes) after an earlier one at least twice the margin above it (continual runs are not flagged)",
    )


class PaperRef(Strict):
    """Where a scenario's results sit in a paper's table: algorithm labels are the table's rows."""

    name: str = Field(description="paper room in fedbench/papers/, e.g. fedmim")
    table: str = Field(description="table id as the paper numbers it, e.g. I, II, III")
    column: str = Field(description="the table column this scenario reproduces")


class AlgorithmSpec(InlineParams):
    """One compared method: registry ``name``, display ``label``, ``server`` and ``compression``
    overrides of the scenario-level blocks, and the algorithm's parameters inline."""

    name: str
    label: str | None = None
    server: dict[str, Any] = Field(default_factory=dict)
    compression: CompressionSpec | None = None
    privacy: PrivacySpec | Literal[False] | None = Field(
        default=None, description="this entry's DP-FedAvg block, replacing the scenario's (false: none)"
    )
    tune: EntryTuneField | None = Field(
        default=None, description="this entry's search, laid over the scenario's `tune` (false: not tuned)"
    )


class Scenario(Strict):
    """A whole scenario file (docs/scenarios.md has every key). Built by
    :func:`~fedbench.scenario.load.parse_scenario`, it carries its resolved runs (``runs``)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$", description="used in table/figure file names")
    description: str = ""
    dataset: Component
    model: Component
    clients: ClientsSpec
    partition: PartitionSpec = Field(default_factory=PartitionSpec)
    local: LocalSpec
    rounds: int = Field(ge=1)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    server: ServerSpec = Field(default_factory=ServerSpec)
    compression: CompressionSpec = Field(default_factory=CompressionSpec)
    wireless: WirelessSpec | None = Field(
        default=None, description="uplink channel and deadline (absent: ideal uplink)"
    )
    continual: ContinualSpec | None = Field(default=None, description="task stream (absent: one task with every class)")
    privacy: PrivacySpec | None = Field(default=None, description="DP-FedAvg for every entry (absent: none)")
    algorithms: list[AlgorithmSpec] = Field(min_length=1)
    seeds: list[Seed] = Field(default_factory=lambda: [0], min_length=1)
    targets: list[float] = Field(default_factory=list, description="target test accuracies in (0, 1]")
    checkpoint_every: int = Field(default=10, ge=1, description="rounds between resumable checkpoints")
    blowup: BlowupSpec = Field(default_factory=BlowupSpec, description="thresholds of the tables' blow-up flag")
    paper: PaperRef | None = None
    tune: ScenarioTune | None = Field(
        default=None, description="search of every entry's settings (docs/tuning.md; false: none tuned)"
    )
    _runs: tuple[RunSpec, ...] | None = PrivateAttr(default=None)

    @property
    def runs(self) -> tuple[RunSpec, ...]:
        """One resolved :class:`~fedbench.scenario.runspec.RunSpec` per algorithm entry, in order
        (resolved once, when the scenario was parsed)."""
        if self._runs is None:
            raise RuntimeError(
                f"scenario {self.name!r} was not resolved; build it with parse_scenario or load_scenario"
            )
        return self._runs

    @property
    def tuned(self) -> bool:
        """True when some entry is tuned (``fedbench tune`` has work)."""
        return any(self.tune_of(i) is not None for i in range(len(self.algorithms)))

    def tune_of(self, i: int) -> TuneSpec | None:
        """The ``tune`` block of ``algorithms[i]``: its own laid over the scenario's (:func:`merge_tune`),
        None when either is ``false`` or neither exists. Raises ``ValidationError`` for a merged block
        that cannot run (resolution reports it first)."""
        own, base = self.algorithms[i].tune, self.tune
        if own is False or base is False or (own is None and base is None):
            return None
        return base if own is None else merge_tune(base or None, own)

    @model_validator(mode="after")
    def _checks(self) -> Scenario:
        bad = [t for t in self.targets if not 0 < t <= 1]
        if bad:
            raise ValueError(f"targets must lie in (0, 1] (accuracy as a fraction), got {bad}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds}")
        c = self.continual
        if c is not None and self.rounds != c.tasks * c.rounds_per_task:
            raise ValueError(
                f"rounds ({self.rounds}) must equal continual.tasks × continual.rounds_per_task = "
                f"{c.tasks} × {c.rounds_per_task} = {c.tasks * c.rounds_per_task}"
            )
        return self
