"""Continual-learning baselines that are FedAvg plus the engine's continual machinery (C-FLAG Sec. 7).

* ``fine_fl`` (Fine-FL): FedAvg fine-tuned task after task, nothing against forgetting. With the
  paper's clients, set ``local.optimizer: adam`` (Adam reset every round) in the scenario.
* ``er_fl`` (Ering): FedAvg with experience replay: every local minibatch is joined by
  ``continual.memory.replay_batch`` samples drawn from the client's replay memory (the engine's
  ``replay_per_step``; notes §8.14: batch 50, 400 samples per task). On task 0, or outside a
  continual scenario, the memory is empty and Ering is FedAvg.

Both route their local step through ``local.optimizer`` (registered with ``local_optimizer``).
"""

from fedbench.algorithms.base import ALGORITHMS, Algorithm


@ALGORITHMS.register(
    "fine_fl",
    "Fine-FL: FedAvg fine-tuning on each task in turn (continual baseline)",
    label="Fine-FL",
    compression=True,
    local_optimizer=True,
    vmap_server=True,
)
class FineFL(Algorithm):
    """FedAvg (:class:`~fedbench.algorithms.base.Algorithm`) under the label Fine-FL."""


@ALGORITHMS.register(
    "er_fl",
    "Ering: FedAvg with a replay-memory batch joined to every local minibatch (continual baseline)",
    label="Ering",
    compression=True,
    local_optimizer=True,
    replay_per_step=True,
    vmap_server=True,
)
class ERing(Algorithm):
    """FedAvg whose local minibatches are current-task samples plus a memory draw (experience replay)."""
