"""The validation score of a tuning trial as a round plug-in (the ``validation`` protocol of
docs/tuning.md): the global model is scored on the union of the clients' held-out samples
(:mod:`fedbench.data.holdout`) whenever the test set is.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from fedbench.algorithms.base import Logs
from fedbench.data.base import ArraySplit
from fedbench.engine.local import LocalConfig
from fedbench.engine.plugins import RoundPlugin
from fedbench.models.flat import Buffers

if TYPE_CHECKING:
    from fedbench.engine.setup import RunSetup
    from fedbench.scenario import RunSpec


class ValidationScore(RoundPlugin):
    """Scores the global model on every client's validation set when the test set is scored;
    logs ``val_acc`` (sample-weighted over the clients: correct over all validation samples) and
    ``val_loss``. The test-set evaluation is left as it is."""

    name = "validation"

    def __init__(self, spec: RunSpec, seed: int, setup: RunSetup):
        self.spec, self.model = spec, setup.model
        assert setup.validation is not None, "a run with a validation block gets its split from build_run"
        rows = torch.cat(setup.validation)
        self.split = ArraySplit(setup.data.train.x[rows], setup.data.train.y[rows])

    def after_evaluation(self, t: int, state: Any, buffers: Buffers, cfg: LocalConfig) -> tuple[Any, Logs]:
        spec = self.spec
        if not (t % spec.eval.every == 0 or t == spec.rounds) or len(self.split) == 0:
            return state, {}
        acc, loss = self.model.evaluate(state.x, buffers, self.split, spec.eval.batch_size)
        return state, {"val_acc": acc, "val_loss": loss if math.isfinite(loss) else None}
