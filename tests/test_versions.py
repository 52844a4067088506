"""fedbench.versions (issue 24 item 3): the versions a run trains with, stored in its record."""

import json
import platform
from pathlib import Path

import numpy
import pytest
import torch

import fedbench
from fedbench.versions import LOCK_FILE, lock_id, versions
from tests.engine.test_runner import run, scenario


def test_versions_name_fedbench_torch_numpy_python_and_the_lock():
    v = versions()
    assert list(v) == ["fedbench", "torch", "numpy", "python", "lock"]
    assert (v["fedbench"], v["torch"], v["numpy"]) == (fedbench.__version__, torch.__version__, numpy.__version__)
    assert v["python"] == platform.python_version() and v["lock"] == lock_id(LOCK_FILE)
    assert LOCK_FILE.parent == Path(fedbench.__file__).resolve().parents[1]  # the source tree's root


@pytest.mark.parametrize("text, expected", [
    ("# lock: 2026-11-27-cpu\ntorch==2.5.1\n", "2026-11-27-cpu"),
    ("#lock:abc123\n", "abc123"),
    ("torch==2.5.1\n# lock: late\n", "none"),  # only the first line names the lock
    ("", "none"),
    (None, "none"),  # no file
])
def test_the_lock_id_is_the_first_lines_comment(tmp_path, text, expected):
    path = tmp_path / "requirements.lock"
    if text is not None:
        path.write_text(text)
    assert lock_id(path) == expected


def test_a_run_records_the_versions_it_trained_with(tmp_path):
    store, outcome, _ = run(tmp_path, scenario(), "v")
    assert outcome.status == "finished"
    assert json.loads(store.runs()["versions"].item()) == [versions()]
