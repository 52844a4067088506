"""fedbench/cli_style.py patches typer internals only where they exist (issue 24: `import fedbench.cli`
raised AttributeError with a typer that has no ``TyperOption.display_type_rich``)."""

from __future__ import annotations

from fedbench.cli_style import apply


def test_a_typer_without_the_patched_methods_is_left_as_it_is():
    class Option:  # typer 0.12 / 0.27: neither method
        pass

    class Argument:
        pass

    apply(Option, Argument)
    assert not hasattr(Option, "display_type_rich") and not hasattr(Argument, "_usage_display_name")


def test_flags_lose_their_type_and_applying_twice_changes_nothing():
    class Option:
        def __init__(self, is_flag: bool):
            self.is_flag = is_flag

        def display_type_rich(self, ctx):
            return "<bool>" if self.is_flag else "<int>"

    class Argument:
        metavar, name, nargs, required = None, "scenario", 1, True

        def _usage_display_name(self):
            return "{scenario}"

    apply(Option, Argument)
    apply(Option, Argument)  # no wrapper around the wrapper
    assert Option(True).display_type_rich(None) == "" and Option(False).display_type_rich(None) == "<int>"
    assert Argument()._usage_display_name() == "SCENARIO"
