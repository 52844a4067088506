"""fedbench.versions (issue 24 item 3): the versions a run trains with, stored in its record."""

import json
import platform
from importlib import metadata
from pathlib import Path

import numpy
import pytest
import torch

import fedbench
from fedbench.versions import LOCK_FILE, lock_differences, lock_id, lock_pins, versions
from tests.engine.test_runner import run, scenario


def test_versions_name_fedbench_torch_numpy_python_and_the_lock():
    v = versions()
    assert list(v) == ["fedbench", "torch", "numpy", "python", "lock"]
    assert (v["fedbench"], v["torch"], v["numpy"]) == (fedbench.__version__, torch.__version__, numpy.__version__)
    assert v["python"] == platform.python_version() and v["lock"] == lock_id(LOCK_FILE)
    assert LOCK_FILE.parent == Path(fedbench.__file__).resolve().parents[1]  # the source tree's root


@pytest.mark.parametrize(
    "text, expected",
    [
        ("# lock: 2026-11-27-cpu\ntorch==2.5.1\n", "2026-11-27-cpu"),
        ("#lock:abc123\n", "abc123"),
        ("torch==2.5.1\n# lock: late\n", "none"),  # only the first line names the lock
        ("", "none"),
        (None, "none"),  # no file
    ],
)
def test_the_lock_id_is_the_first_lines_comment(tmp_path, text, expected):
    path = tmp_path / "requirements.lock"
    if text is not None:
        path.write_text(text)
    assert lock_id(path) == expected


def test_a_run_records_the_versions_it_trained_with(tmp_path):
    store, outcome, _ = run(tmp_path, scenario(), "v")
    assert outcome.status == "finished"
    assert json.loads(store.runs()["versions"].item()) == [versions()]


def test_lock_differences_name_installed_packages_off_the_lock_only(tmp_path):
    installed = {"numpy": numpy.__version__, "torch": torch.__version__}
    path = tmp_path / "requirements.lock"
    path.write_text(
        "# lock: t\n# a comment\n"
        f"numpy=={installed['numpy']}\n"
        f"Torch=={installed['torch'].split('+')[0]}+cpu\n"  # another build label of the same version
        "no-such-package-installed==1.0\n"  # pinned, not installed (CUDA wheels beside a CPU torch)
        "PyYAML==0.0.1\n"
    )
    assert lock_differences(path) == [f"pyyaml {metadata.version('pyyaml')} (lock 0.0.1)"]


def test_the_repository_lock_pins_what_the_suite_runs_with():
    """`make install` installs with -c requirements.lock: a difference here means the venv was made otherwise."""
    assert lock_id() != "none" and lock_pins()["torch"].startswith("2.")
    assert lock_differences() == []


def test_fedbench_version_prints_the_versions_and_the_lock():
    from typer.testing import CliRunner

    from fedbench.cli import app

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0] == f"fedbench {fedbench.__version__}" and lines[1].startswith(f"torch {torch.__version__}")
    assert lines[2].startswith(f"lock {lock_id()}: ")  # whether the packages are the lock's: the test above
