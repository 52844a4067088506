"""Atomic, checksummed checkpoints of a run's complete state, and the decision to resume from one.

A checkpoint file is one header line ``fedbench-checkpoint sha256 <hex>`` followed by the
``torch.save`` bytes it covers, written to a temporary file, flushed and renamed into place, so a
crash never leaves a half-written file and a damaged one (truncated, zeroed, one flipped bit)
never passes for a good one. Each checkpoint carries the identity of its run (:func:`run_identity`:
run id, spec hash, seed) beside its round. A checkpoint is resumed only when it is intact, belongs
to the run being resumed and the store holds the rounds it claims; otherwise it is set aside with
a warning (``<run>.pt.corrupt``, ``.foreign``, ``.unverified`` or ``.orphan``) and the run restarts
from round 1, with the numbers of an uninterrupted run. A checkpoint written before checkpoints
carried an identity cannot be told from another run's, so it is set aside as ``.unverified``:
such a run restarts once, from round 1.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

MAGIC = b"fedbench-checkpoint sha256 "


class CorruptCheckpoint(Exception):
    """A checkpoint that cannot be trusted: unreadable, without its checksum, or not matching it."""


class RoundIndex(Protocol):
    """What :func:`resume_point` asks of a store: the highest round it holds for a run."""

    def last_round(self, run_id: str) -> int | None: ...


LAYOUT = 2
"""The checkpoint layout written today: the algorithm state as the leaves of its typed pytree
(:func:`~fedbench.algorithms.state.flatten_state`). A checkpoint of another layout (1: the state as a
tensor dict, before 2026-11-26) is set aside as ``.outdated`` and the run restarts from round 1."""


def run_identity(run_id: str, spec_hash: str, seed: int) -> dict[str, str | int]:
    """What a checkpoint says about the run it belongs to (saved under ``"identity"``)."""
    return {"run_id": run_id, "spec_hash": spec_hash, "seed": int(seed)}


def _described(identity: Mapping[str, Any]) -> str:
    return f"run {identity.get('run_id')} (spec {str(identity.get('spec_hash'))[:16]}…, seed {identity.get('seed')})"


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` with its checksum to ``path`` atomically (temporary file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getvalue()
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n" + data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path, device: torch.device) -> dict[str, Any] | None:
    """The checkpoint at ``path`` mapped to ``device``, None if there is none; raises
    :class:`CorruptCheckpoint` when it is unreadable or its checksum does not match."""
    if not path.exists():
        return None
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise CorruptCheckpoint(f"unreadable ({exc.strerror or exc})") from None
    if not blob.startswith(MAGIC):
        raise CorruptCheckpoint("no checksum header (damaged, or written before checkpoints carried one)")
    digest, _, data = blob[len(MAGIC) :].partition(b"\n")
    if hashlib.sha256(data).hexdigest().encode() != digest:
        raise CorruptCheckpoint("its content does not match its checksum")
    try:
        return torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except Exception as exc:  # a checksummed file torch cannot read is still no checkpoint
        raise CorruptCheckpoint(f"unreadable ({type(exc).__name__}: {exc})") from None


def set_aside(path: Path, why: str) -> Path:
    """Rename ``path`` to ``<path>.<why>`` (replacing an older one) and return the new path."""
    aside = path.with_suffix(path.suffix + f".{why}")
    os.replace(path, aside)
    return aside


def resume_point(
    path: Path, device: torch.device, store: RoundIndex, run_id: str, identity: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The checkpoint to resume ``run_id`` (whose :func:`run_identity` is ``identity``) from, or None
    to start at round 1. A corrupt checkpoint, one of another run or without an identity, or one
    claiming rounds the store does not hold (the store was deleted or replaced), is set aside with a
    warning naming both paths."""
    try:
        payload = load_checkpoint(path, device)
    except CorruptCheckpoint as exc:
        aside = set_aside(path, "corrupt")
        warnings.warn(
            f"checkpoint {path} is corrupt: {exc}; moved to {aside}; the run restarts from round 1",
            RuntimeWarning,
            stacklevel=1,
        )
        return None
    if payload is None:
        return None
    own = payload.get("identity")
    own = own if isinstance(own, dict) else None
    if own != dict(identity):
        why = "unverified" if own is None else "foreign"
        whose = (
            "carries no run identity (written by an older fedbench)"
            if own is None
            else f"belongs to {_described(own)}, not {_described(identity)}"
        )
        aside = set_aside(path, why)
        warnings.warn(
            f"checkpoint {path} {whose}; moved to {aside}; the run restarts from round 1", RuntimeWarning, stacklevel=1
        )
        return None
    if payload.get("layout", 1) != LAYOUT:
        aside = set_aside(path, "outdated")
        warnings.warn(
            f"checkpoint {path} has layout {payload.get('layout', 1)}, this fedbench reads {LAYOUT}; moved to "
            f"{aside}; the run restarts from round 1",
            RuntimeWarning,
            stacklevel=1,
        )
        return None
    held = store.last_round(run_id) or 0
    if held < int(payload["round"]):
        aside = set_aside(path, "orphan")
        warnings.warn(
            f"checkpoint {path} is at round {payload['round']} but the store holds {held} round(s) of the run; "
            f"moved to {aside}; the run restarts from round 1",
            RuntimeWarning,
            stacklevel=1,
        )
        return None
    return payload
