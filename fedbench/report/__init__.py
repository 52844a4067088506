"""Reports from the results store.

- :mod:`fedbench.report.tables`: ``summarize``, ``format_table`` (Markdown, LaTeX, CSV),
  ``rich_table`` and ``write_tables``;
- :mod:`fedbench.report.plots`: ``plot_curves`` and ``plot_both`` (any per-round metric vs
  rounds / bits), ``curves`` (their lines as a table);
- :mod:`fedbench.report.reference`: the papers' published numbers as data (each paper room's
  ``reference.yaml``, found by name through :mod:`fedbench.rooms`);
- :mod:`fedbench.report.paper`: *paper vs reproduced* tables in the paper's layout;
- :mod:`fedbench.report.claims`: the framework of the papers' claims (each paper's own are in its room);
- :mod:`fedbench.report.bits`: communication-bit tables from a model's size, without training;
- :mod:`fedbench.report.html`: one self-contained HTML page of a store (``fedbench report``; a paper's
  page is built from its blocks by :mod:`fedbench.papers.page`), its Markdown converted by
  :mod:`fedbench.report.mdhtml`.

The report imports no paper room and nothing of :mod:`fedbench.papers` (which sits above it).

Submodules are imported on demand, so ``fedbench table`` does not pay for matplotlib.
"""


class NothingToWrite(Exception):
    """A report of a store that holds no runs: the command says so in one line and writes nothing
    (exit 0, as ``fedbench table``)."""


def empty_store_line(out_dir) -> str:
    """The one line of a reading command on a store without runs."""
    return f"no runs in the store at {out_dir}/: nothing written"
