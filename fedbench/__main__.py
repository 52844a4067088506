"""``python -m fedbench``: the command line (as the ``fedbench`` console script)."""

from fedbench.cli import app

app()
