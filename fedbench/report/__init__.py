"""Reports from the results store.

- :mod:`fedbench.report.tables`: ``summarize``, ``format_table`` (Markdown, LaTeX, CSV),
  ``rich_table`` and ``write_tables``;
- :mod:`fedbench.report.plots`: ``plot_curves`` and ``plot_both`` (accuracy vs rounds / bits).

Submodules are imported on demand, so ``fedbench table`` does not pay for matplotlib.
"""
