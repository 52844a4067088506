"""Help-text conventions typer does not follow by itself: a flag shows no value type (typer prints
``--quiet <bool>`` although ``--quiet true`` is refused) and a required argument's usage reads
``SCENARIO`` as click writes it, not ``{scenario}``. Applied once, when :mod:`fedbench.cli` loads."""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperOption


def _option_type(self: TyperOption, ctx: Any) -> str | None:
    return "" if self.is_flag else _plain_option_type(self, ctx)


def _argument_usage(self: TyperArgument) -> str:
    name = (self.metavar or self.name or "").upper() + ("..." if self.nargs != 1 else "")
    return name if self.required else f"[{name}]"


_plain_option_type = TyperOption.display_type_rich


def apply() -> None:
    """Install both conventions (idempotent)."""
    TyperOption.display_type_rich = _option_type  # type: ignore[method-assign]
    TyperArgument._usage_display_name = _argument_usage  # type: ignore[method-assign]
