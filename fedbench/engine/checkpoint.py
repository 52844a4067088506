"""Atomic, resumable checkpoints of a run's complete state."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically (temporary file + rename), so a crash never
    leaves a half-written checkpoint behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path, device: torch.device) -> dict[str, Any] | None:
    """The checkpoint at ``path`` mapped to ``device``, or None if there is none."""
    if not path.exists():
        return None
    return torch.load(path, map_location=device, weights_only=True)
