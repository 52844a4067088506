#!/usr/bin/env bash
# Writes the lock (pip constraints, `# lock: <date>` first) from a fresh resolution of pyproject.toml and its
# test extras in a scratch venv: what `make install` would install today without a lock. After `make lock`,
# reinstall (`rm -rf .venv && make install`), regenerate the committed outputs (`make check-outputs`) and commit
# the lock with them: the lock names the versions the outputs were made with.
set -euo pipefail
cd "$(dirname "$0")/.."
lock=${1:-requirements.lock}
python=${PYTHON:-python3}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$python" -m venv "$scratch/venv"
"$scratch/venv/bin/python" -m pip install --quiet $("$python" scripts/torch_index.py) -e ".[test]"
{
  echo "# lock: $(date -u +%Y-%m-%d)"
  echo "# The exact versions the test suite and the committed outputs (tables/, figures/, README numbers) were made with:"
  echo "# pip constraints, made by \`make lock\` (scripts/lock.sh) on Python $("$scratch/venv/bin/python" -c 'import platform; print(platform.python_version())'), $(uname -s) $(uname -m)."
  echo "# \`make install\` installs with \`-c requirements.lock\`; after \`make lock\`, regenerate the outputs."
  echo "# torch's nvidia-*/cuda-*/triton pins apply only where PyPI's CUDA build of torch is installed; the CPU build"
  echo "# (torch==X+cpu, which these pins admit) needs none of them."
  "$scratch/venv/bin/python" -m pip freeze --exclude-editable
} > "$lock"
echo "wrote $lock"
