"""Help-text conventions typer does not follow by itself: a flag shows no value type (typer prints
``--quiet <bool>`` although ``--quiet true`` is refused) and a required argument's usage reads
``SCENARIO`` as click writes it, not ``{scenario}``. Applied once, when :mod:`fedbench.cli` loads.

Each convention replaces one typer method, and only where the installed typer has it: these are
typer internals (``TyperOption.display_type_rich`` exists in the lock's typer, not in 0.12 or 0.27),
so a typer without one keeps its own rendering of that piece of help and everything else works.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperOption


def _argument_usage(self: TyperArgument) -> str:
    name = (self.metavar or self.name or "").upper() + ("..." if self.nargs != 1 else "")
    return name if self.required else f"[{name}]"


def apply(option: type = TyperOption, argument: type = TyperArgument) -> None:
    """Install both conventions on typer's option and argument classes where they have the method each
    replaces (idempotent)."""
    plain = getattr(option, "display_type_rich", None)
    if plain is not None and not getattr(plain, "flags_typeless", False):

        def display_type_rich(self: Any, ctx: Any) -> str | None:
            return "" if self.is_flag else plain(self, ctx)

        display_type_rich.flags_typeless = True  # type: ignore[attr-defined]
        option.display_type_rich = display_type_rich  # type: ignore[attr-defined]
    if hasattr(argument, "_usage_display_name"):
        argument._usage_display_name = _argument_usage  # type: ignore[attr-defined]
