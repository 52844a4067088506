"""Strict values for every scenario block: numbers are not booleans, floats are finite, unknown
keys are errors (YAML's ``true`` would otherwise pass as 1 and ``.inf`` as a learning rate)."""

from __future__ import annotations

import math
import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

BOOL_AS_NUMBER = "expected a number, not a boolean"


def is_numeric(annotation: Any) -> bool:
    """True for int/float annotations (also inside Optional/Union/Annotated), false once bool is allowed."""
    if annotation in (int, float):
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return is_numeric(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return bool not in args and any(is_numeric(a) for a in args)
    return False


class StrictModel(BaseModel):
    """Base of every scenario block: unknown keys, booleans given for numbers and non-finite floats are errors."""

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and is_numeric(field.annotation):
            raise ValueError(BOOL_AS_NUMBER)
        return value


def check_order(block: BaseModel, low: str, high: str) -> None:
    """A block's optional upper bound ``high`` (None: none) is not below its lower bound ``low``."""
    lo, hi = getattr(block, low), getattr(block, high)
    if hi is not None and hi < lo:
        raise ValueError(f"{high} ({hi}) must be ≥ {low} ({lo})")


def param_problems(schema: type[BaseModel], params: dict[str, Any], path: str) -> list[str]:
    """The same rules for a registered component's inline parameters (its schema is its own
    model): ``path.key: …`` for a boolean given for a number or a non-finite float."""
    problems = []
    for key, value in params.items():
        field = schema.model_fields.get(key)
        if isinstance(value, bool) and field is not None and is_numeric(field.annotation):
            problems.append(f"{path}.{key}: {BOOL_AS_NUMBER}, got {value!r}")
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{path}.{key}: Input should be a finite number, got {value!r}")
    return problems
