"""Sweeps: grids of scenarios expanded into runs and executed locally (a process pool) or on Ray.

``grid``: grid files → points (scenarios) → runs; it imports no engine module, so expanding a
sweep (``--dry-run``, ``fedbench reproduce --list``) never loads the trainer. ``driver``: skip what
is done, execute, summarise. ``local`` / ``ray_executor``: the two executors. ``worker``: one run
inside a worker process. Import what you need from those modules.
"""
