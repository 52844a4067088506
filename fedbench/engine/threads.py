"""CPU threads of a run: fixed, so that the same scenario and seed give the same numbers everywhere.

On a CPU, torch splits the reductions of a matmul or convolution over its intra-op threads, so the
rounding — and after a few hundred rounds the accuracy — depends on how many threads there are
(one tiny MNIST table: 92.56 ± 2.67 % final accuracy with one thread, 92.67 ± 0.94 % with two).
Every run therefore trains with a fixed thread count, ``DEFAULT_THREADS`` unless ``--threads`` says
otherwise, whatever ``OMP_NUM_THREADS`` or the machine's core count is; the count is logged in round 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_THREADS = 1  # the committed outputs (tables/, figures/, README numbers) are made with one thread


@contextmanager
def pinned_threads(threads: int) -> Iterator[None]:
    """Run the block with ``threads`` torch intra-op threads, then restore the process's setting."""
    import torch  # here, so that the CLI reads DEFAULT_THREADS without importing torch

    if threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads}")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
