"""SIGTERM is Ctrl-C (issue 24 item 8): it raises Terminated, a KeyboardInterrupt, and commands exit 143."""

import os
import signal

import pytest
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.signals import INTERRUPTED_EXIT, TERMINATED_EXIT, Terminated, exit_code, sigterm_as_interrupt


def test_sigterm_raises_terminated_within_the_block_only():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        with sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before
    assert isinstance(Terminated(), KeyboardInterrupt)
    assert (
        (exit_code(Terminated()), exit_code(KeyboardInterrupt())) == (TERMINATED_EXIT, INTERRUPTED_EXIT) == (143, 130)
    )


@pytest.mark.parametrize("raised, code", [(Terminated, 143), (KeyboardInterrupt, 130)])
def test_reproduce_exits_as_interrupted_runs_do(monkeypatch, raised, code):
    from fedbench.papers import reproduce as rp

    def interrupted(*args):
        raise raised()

    monkeypatch.setattr(rp, "check", lambda paper, targets, opts: [])
    monkeypatch.setattr(rp, "reproduce", interrupted)
    result = CliRunner().invoke(app, ["reproduce", "fedmim", "--scale", "tiny"])
    assert result.exit_code == code, result.output
    assert "run the same command to resume" in result.output and "Traceback" not in result.output
