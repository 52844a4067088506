"""Strict values for every scenario block and every component's parameters: a number is given as a
number (``rounds: '3'``, ``rounds: 3.0`` and ``lr: '0.05'`` are errors, not 3 and 0.05), a boolean as a
boolean (``client_spread: 'yes'`` or ``1`` is an error), numbers are not booleans, floats are finite,
and unknown keys are errors. Pydantic's strict mode, with two allowances: an integer fills a float
(``lr: 1``), and a YAML list fills a tuple (``betas: [0.9, 0.99]``)."""

from __future__ import annotations

import math
import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

BOOL_AS_NUMBER = "expected a number, not a boolean"
MAX_SEED = 2**63 - 1  # the store's ``seed INTEGER`` column (SQLite: signed 64-bit); the seeded streams take any
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]  # a run's seed


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


def is_tuple(annotation: Any) -> bool:
    """True for a ``tuple[...]`` annotation (also inside Optional/Union/Annotated)."""
    origin = typing.get_origin(annotation)
    if annotation is tuple or origin is tuple:
        return True
    if origin is typing.Annotated or origin in (typing.Union, types.UnionType):
        return any(is_tuple(a) for a in typing.get_args(annotation))
    return False


def strict_input(annotation: Any, value: Any) -> Any:
    """``value`` as strict validation of ``annotation`` should see it: a boolean given for a number is
    an error (strict mode's own message would not say why), a list given for a tuple becomes one."""
    if isinstance(value, bool) and is_numeric(annotation):
        raise ValueError(BOOL_AS_NUMBER)
    if isinstance(value, list) and is_tuple(annotation):
        return tuple(value)
    return value


class StrictModel(BaseModel):
    """Base of every scenario block: unknown keys, strings or floats given for integers, anything but
    a boolean for a boolean, booleans given for numbers and non-finite floats are errors."""

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_inputs(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        return value if field is None else strict_input(field.annotation, value)


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


def strict_params(schema: type[BaseModel], params: dict[str, Any]) -> BaseModel:
    """A component's inline parameters validated in strict mode against its own model (lists fill
    tuples); raises pydantic's ``ValidationError``."""
    fields = schema.model_fields
    given = {k: strict_input(fields[k].annotation, v) if k in fields else v for k, v in params.items()}
    return schema.model_validate(given, strict=True)
