"""Per-client state tables ``[N, P]`` (SCAFFOLD's c_i, FedDyn's ∇L_i, FedCAMS's error memory, …),
on the device (:class:`DeviceTable`) or in host memory, pinned when CUDA is present
(:class:`HostTable`, ``fedbench run --client-state host``) for runs whose per-client state does
not fit on the device.

An algorithm uses a table through four operations, each returning the table to keep in its new
state: read rows ``table[clients]``; ``table.write(clients, rows)``; ``table.add(clients, rows,
alpha)`` (rows added); ``table.plus(full)`` (a whole ``[N, P]`` or ``[P]`` addend, EWC). A table is
*donated* to the operation, as a buffer passed to a JAX function with ``donate_argnums``: the
returned table may reuse its storage (here it always does), so an algorithm keeps only the table it
got back, the one in the state its hook returns. This keeps an ``[N, P]`` table from being copied
every round; every other piece of state is a new tensor per update. A host table moves only the S
rows of a round between host and device, so both kinds give the same numbers.
"""

from __future__ import annotations

import torch


class ClientTable:
    """An ``[N, P]`` table of per-client rows; ``data`` is the whole table."""

    data: torch.Tensor

    def __init__(self, data: torch.Tensor, device: torch.device):
        self.data, self.device = data, torch.device(device)

    @property
    def shape(self) -> torch.Size:
        return self.data.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    def numel(self) -> int:
        return self.data.numel()

    def element_size(self) -> int:
        return self.data.element_size()

    def _here(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` where the table lives, in its dtype."""
        return t.detach().to(self.data.device, dtype=self.data.dtype)

    def __getitem__(self, clients: torch.Tensor) -> torch.Tensor:
        """The rows of ``clients`` ``[S, P]``, on the run's device."""
        return self.data[clients.to(self.data.device)].to(self.device, non_blocking=True)

    def write(self, clients: torch.Tensor, rows: torch.Tensor) -> ClientTable:
        """The table with the rows of ``clients`` replaced by ``rows`` (donated, see the module docstring)."""
        self.data[clients.to(self.data.device)] = self._here(rows)
        return self

    def add(self, clients: torch.Tensor, rows: torch.Tensor, alpha: float = 1) -> ClientTable:
        """The table with α·``rows`` added to the rows of ``clients`` (donated)."""
        self.data.index_add_(0, clients.to(self.data.device), self._here(rows), alpha=alpha)
        return self

    def plus(self, addend: torch.Tensor) -> ClientTable:
        """The table plus ``addend`` ``[N, P]`` (or one row for all, ``[P]``) (donated)."""
        self.data += self._here(addend)
        return self

    def clone(self) -> ClientTable:
        return type(self)(self.data.clone(), self.device)

    @classmethod
    def restore(cls, data: torch.Tensor, device: torch.device) -> ClientTable:
        """A table of this kind holding ``data`` (a checkpoint's), rows read onto ``device``."""
        return cls(data.to(device), device)


class DeviceTable(ClientTable):
    """A table on the run's device."""

    @classmethod
    def zeros(cls, rows: int, like: torch.Tensor) -> DeviceTable:
        return cls(like.new_zeros((rows, like.numel())), like.device)


class HostTable(ClientTable):
    """A table in (pinned) host memory whose rows are read onto ``device``."""

    @classmethod
    def zeros(cls, rows: int, like: torch.Tensor) -> HostTable:
        pin = torch.cuda.is_available()
        return cls(torch.zeros((rows, like.numel()), dtype=like.dtype, pin_memory=pin), like.device)

    @classmethod
    def restore(cls, data: torch.Tensor, device: torch.device) -> HostTable:
        data = data.cpu()
        return cls(data.pin_memory() if torch.cuda.is_available() else data, device)
