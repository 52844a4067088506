"""Per-client replay memories (C-FLAG Sec. 2 ℳ^i; notes §8.6, §8.9).

When task j ends, every client keeps ``per_task`` of its samples of that task (all of them if it
has fewer): the quota is split as evenly as possible over the classes it actually holds — a
class with too few samples gives its unused share to the others (water-filling), and the
``per_task mod k`` leftover units go to classes in a random order — and each class's samples are
drawn uniformly without replacement. All draws come from the ``("memory", client, task)``
stream. The memory holds training-set indices, grows by one slot per finished task, and is never
changed while a task trains (ℳ_t^i = ℳ_0^i).
"""

from __future__ import annotations

import numpy as np
import torch

from fedbench.seeding import numpy_stream


def balanced_quota(available: np.ndarray, total: int, rng: np.random.Generator) -> np.ndarray:
    """Samples to keep per class: Σ = min(total, Σ available), each ≤ its availability, as equal
    as possible (water-filling); the indivisible remainder goes to classes in a random order."""
    available = np.asarray(available, dtype=np.int64)
    quota = np.zeros_like(available)
    left = min(int(total), int(available.sum()))
    order = rng.permutation(len(available))
    while left > 0:
        live = order[quota[order] < available[order]]
        share = left // len(live)
        if share == 0:  # fewer units than open classes: one each, in the random order
            quota[live[:left]] += 1
            break
        add = np.minimum(share, available[live] - quota[live])
        quota[live] += add
        left -= int(add.sum())
    return quota


def select_memory(indices: np.ndarray, labels: np.ndarray, per_task: int, rng: np.random.Generator) -> np.ndarray:
    """A class-balanced draw of ``per_task`` of ``indices`` (whose labels are ``labels``), sorted."""
    indices, labels = np.asarray(indices), np.asarray(labels)
    classes = np.unique(labels)
    quota = balanced_quota(np.array([(labels == c).sum() for c in classes]), per_task, rng)
    kept = [rng.choice(indices[labels == c], size=q, replace=False) for c, q in zip(classes, quota) if q]
    return np.sort(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)


class ReplayMemory:
    """Every client's memory: one slot of training-set indices per finished task."""

    def __init__(self, num_clients: int, per_task: int, seed: int):
        self.per_task, self.seed = per_task, seed
        self.slots: list[list[np.ndarray]] = [[] for _ in range(num_clients)]

    def fill(self, task: int, parts: list[np.ndarray], train_labels: np.ndarray) -> None:
        """Add task ``task``'s slot for every client from its indices ``parts[i]`` of that task."""
        for client, part in enumerate(parts):
            if len(self.slots[client]) != task:
                raise ValueError(
                    f"client {client}'s memory holds {len(self.slots[client])} tasks; cannot add task {task}"
                )
            rng = numpy_stream(self.seed, "memory", client, task)
            part = np.asarray(part)
            self.slots[client].append(select_memory(part, train_labels[part], self.per_task, rng).astype(np.int64))

    def indices(self, client: int) -> np.ndarray:
        """All of the client's memory, task slots in order."""
        slots = self.slots[client]
        return np.concatenate(slots) if slots else np.zeros(0, dtype=np.int64)

    def size(self, client: int) -> int:
        return sum(len(s) for s in self.slots[client])

    def draw(self, client: int, count: int, rng: np.random.Generator) -> np.ndarray:
        """``min(count, size)`` memory indices drawn uniformly without replacement (sorted)."""
        memory = self.indices(client)
        if len(memory) <= count:
            return memory
        return np.sort(memory[rng.choice(len(memory), size=count, replace=False)])

    def state_dict(self) -> list[list[torch.Tensor]]:
        return [[torch.as_tensor(s) for s in slots] for slots in self.slots]

    def load_state_dict(self, state: list[list[torch.Tensor]]) -> None:
        self.slots = [[s.cpu().numpy().astype(np.int64) for s in slots] for slots in state]
