"""What the round loop hands its plug-ins and input providers: the clients' data at a stage of the run
(:class:`Federation`) and a request for engine inputs (:class:`InputRequest`). Both are plain values
below the loop, the plug-ins and the run's setup, so that none of them imports another to name them.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fedbench.data.base import ArraySplit
from fedbench.engine.batches import ClientBatcher
from fedbench.engine.local import LocalConfig
from fedbench.engine.pending import to_device
from fedbench.models.flat import Buffers, FlatModel


@dataclass(frozen=True)
class Federation:
    """The clients' data at one stage of a run (a continual run has one per task): each client's
    training indices ``parts``, their sample counts n_i ``sizes`` ``[N]`` (the aggregation weights'),
    the minibatch ``batcher`` over them, the partition's ``info`` (logged) and the logit mask of the
    stage's heads (``label_mask``, continual; None: every class). The round loop holds the current one;
    a round plug-in that changes it returns a new one (:meth:`~fedbench.engine.plugins.RoundPlugin.stage`)."""

    parts: tuple[torch.Tensor, ...]
    sizes: torch.Tensor
    batcher: ClientBatcher
    info: dict[str, float | int]
    label_mask: torch.Tensor | None = None

    @functools.cached_property
    def owners(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The clients' training samples end to end, each one's client, and the clients' sample counts (float32),
        on the parts' device: made once a stage, for per-client means without a loop over the clients."""
        device = self.parts[0].device
        sizes = torch.tensor([len(p) for p in self.parts])
        owner = torch.repeat_interleave(torch.arange(len(self.parts)), sizes)
        return torch.cat(self.parts), to_device(owner, device), to_device(sizes.to(torch.float32), device)


def accuracy_spreads(hits: torch.Tensor, feds: Sequence[Federation]) -> list[torch.Tensor]:
    """The std over its clients of each run's accuracy on its clients' training samples (0-d tensors, unread):
    ``hits`` ``[R, n]`` each run's correctness on the training set, ``feds[r]`` its clients' data. Every run's
    per-client means are one ``index_add`` over the runs' clients (:attr:`Federation.owners`: counts of 0/1, exact,
    divided by the client's, as ``mean`` divides), each run's std alone."""
    n, sizes = hits.shape[1], [len(fed.parts) for fed in feds]
    starts = itertools.accumulate(sizes[:-1], initial=0)  # each run's first client among all the runs'
    bins = torch.cat([fed.owners[1] + start for fed, start in zip(feds, starts)])
    index = torch.cat([fed.owners[0] + r * n for r, fed in enumerate(feds)])
    counts = torch.cat([fed.owners[2] for fed in feds])
    means = torch.zeros(len(counts), dtype=torch.float32, device=hits.device)
    means.index_add_(0, bins, hits.flatten()[index].float())
    return [m.std(correction=0) for m in (means / counts).split(sizes)]


@dataclass(frozen=True)
class Gradients:
    """An engine input its provider (or a plug-in) leaves to the engine to compute
    (:func:`~fedbench.engine.inputs.resolve`): ``[S, P]``, zero but for ``rows``, row ``rows[j]`` the gradient over
    the samples ``parts[j]`` at the request's point (:mod:`~fedbench.engine.full_gradient`'s convention, finished
    with the run's clipping and weight decay), its dropout keyed by the row's client's ``("dropout", t, i)``
    stream where ``dropout``, else by zero keys. Deferred so that a population computes its runs' together."""

    rows: tuple[int, ...]
    parts: tuple[torch.Tensor, ...]
    dropout: bool = False


@dataclass(frozen=True)
class InputRequest:
    """What an input provider (:mod:`fedbench.engine.inputs`, :meth:`RoundPlugin.provide
    <fedbench.engine.plugins.RoundPlugin.provide>`) may read: the round, its clients ``[S]``, the
    broadcast model x_t ``[P]``, the global buffers, the run's local-work settings (and seed) and
    minibatch size, the model and training data, the clients' data at this stage, the input names
    wanted, the clients on the host ``ids`` and the rows its executor holds at once (``rows``: gradients over
    samples are computed as many rows a call at least)."""

    round: int
    clients: torch.Tensor
    point: torch.Tensor
    buffers: Buffers
    cfg: LocalConfig
    batch_size: int
    model: FlatModel
    train: ArraySplit
    fed: Federation
    wanted: frozenset[str]
    ids: tuple[int, ...]
    rows: int = 0  # local-step rows the run's batched executor holds at once (at most S; 0: one client at a time)
