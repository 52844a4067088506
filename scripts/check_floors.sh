#!/usr/bin/env bash
# The floors of pyproject.toml are versions that work: a fresh venv with the LOWEST version that every direct
# dependency admits (uv's --resolution lowest-direct; transitive ones resolve as usual), then a smoke subset of
# the suite (the CLI, scenarios, one round loop per executor, update rules, reports; not the byte-for-byte
# output tests, whose numbers the lock pins). Needs a network (PyPI). `make check-floors` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${FLOORS_VENV:-.floors}
python=${PYTHON:-python3}
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet uv
"$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --resolution lowest-direct -e ".[test]"
echo "floors installed:"
"$venv/bin/uv" pip list --python "$venv/bin/python" 2>/dev/null \
  | grep -i -E '^(torch|torchvision|numpy|scipy|pydantic|pyyaml|typer|rich|pandas|matplotlib|jinja2|tabulate|scikit-learn|mnist1d|cvxpy|pytest|ray) '
"$venv/bin/python" -m pytest -q -p no:cacheprovider -m "not outputs and not gpu" \
  tests/test_cli.py tests/test_scenario.py tests/test_bad_input.py tests/test_store.py tests/test_api.py \
  tests/test_versions.py tests/engine/test_runner.py tests/engine/test_batched.py tests/engine/test_full_gradient.py \
  tests/algorithms tests/report tests/data tests/wireless/test_allocation.py \
  -k "not repository_lock" "$@"  # the venv is not the lock's by design
