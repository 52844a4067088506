"""Reports from the results store.

- :mod:`fedbench.report.tables`: ``summarize``, ``format_table`` (Markdown, LaTeX, CSV),
  ``rich_table`` and ``write_tables``;
- :mod:`fedbench.report.plots`: ``plot_curves`` and ``plot_both`` (any per-round metric vs
  rounds / bits);
- :mod:`fedbench.report.reference`: the papers' published numbers as data;
- :mod:`fedbench.report.paper`: *paper vs reproduced* tables in the paper's layout;
- :mod:`fedbench.report.claims`: the papers' claims as checkable statements;
- :mod:`fedbench.report.bits`: communication-bit tables from a model's size, without training.

Submodules are imported on demand, so ``fedbench table`` does not pay for matplotlib.
"""
