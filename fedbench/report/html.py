"""One self-contained HTML page of a results store or of a paper's tables and figures (``fedbench report``).

A page is a header saying what it covers, a table of contents and sections, each a list of blocks: a
table with the notes under it, or a figure. The CSS is inline and every PNG is embedded as a base64
data URI, so the single file opens offline anywhere; nothing on it depends on when it was written,
so the same inputs give the same bytes. Every text from a store or a file is escaped.

- a store (``--out``): one section per scenario, in creation order: its summary table (the cells and
  notes of ``fedbench table``, :mod:`fedbench.report.tables`), then the PNGs of the figures folder
  whose names start with the scenario's file stem and ``_`` (a figure belongs to the scenario with the
  longest such stem). The store is opened read-only (:meth:`ResultsStore.read_only`).
- a paper (``--paper P --scale S``): built from the same blocks by :mod:`fedbench.papers.page`, which
  knows the paper rooms (the report sits below them and imports none).

Nothing is created but the page: a missing store is a ValueError naming it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from pathlib import Path

from fedbench.report import NothingToWrite, empty_store_line
from fedbench.report.mdhtml import split_title, to_html
from fedbench.report.tables import SUMMARY_NOTE, _cells, _right, file_stem, summarize, summary_notes
from fedbench.store import ResultsStore

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 80em; padding: 0 1em; color: #1b1b1b; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; display: block; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: .25em .6em; vertical-align: top; }
th { background: #f3f3f3; } tbody tr:nth-child(even) { background: #fafafa; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; } img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption, p.src, p.missing { color: #555; font-size: .85em; } p.missing { color: #8a4b00; }
code { background: #f3f3f3; padding: 0 .2em; } nav ol { padding-left: 1.5em; }
"""


@dataclass(frozen=True)
class Block:
    """A table with its notes, or a figure; ``title`` and ``body`` are HTML."""

    anchor: str
    title: str
    body: str


@dataclass(frozen=True)
class Section:
    """A scenario of a store, or a target of a paper; ``title`` and ``intro`` are HTML."""

    anchor: str
    title: str
    intro: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Page:
    title: str  # plain text
    covers: str  # HTML
    sections: tuple[Section, ...]


def slug(text: str) -> str:
    """An id for an anchor: runs of characters other than letters, digits, ``.``, ``_``, ``-`` become ``-``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"


def _unique(anchor: str, seen: set[str]) -> str:
    out, k = anchor, 2
    while out in seen:
        out, k = f"{anchor}-{k}", k + 1
    seen.add(out)
    return out


def render(page: Page) -> str:
    """The page as one HTML document (anchors made unique in page order)."""
    seen: set[str] = {"contents"}
    ids = [(_unique(s.anchor, seen), [_unique(b.anchor, seen) for b in s.blocks]) for s in page.sections]
    toc, body = [], []
    for s, (sid, bids) in zip(page.sections, ids):
        sub = "".join(f'<li><a href="#{b}">{blk.title}</a></li>' for blk, b in zip(s.blocks, bids))
        toc.append(f'<li><a href="#{sid}">{s.title}</a>' + (f"<ol>{sub}</ol>" if sub else "") + "</li>")
        body.append(f'<section id="{sid}">\n<h2>{s.title}</h2>\n{s.intro}')
        body += [f'<article id="{b}">\n<h3>{blk.title}</h3>\n{blk.body}</article>' for blk, b in zip(s.blocks, bids)]
        body.append("</section>")
    return (
        "\n".join(
            [
                "<!DOCTYPE html>",
                '<html lang="en">',
                "<head>",
                '<meta charset="utf-8">',
                '<meta name="viewport" content="width=device-width, initial-scale=1">',
                f"<title>{escape(page.title)}</title>",
                f"<style>{_CSS}</style>",
                "</head>",
                "<body>",
                f"<header>\n<h1>{escape(page.title)}</h1>\n{page.covers}</header>",
                '<nav id="contents">\n<h2>Contents</h2>\n<ol>\n' + "\n".join(toc) + "\n</ol>\n</nav>",
                "<main>",
                *body,
                "</main>",
                "</body>",
                "</html>",
            ]
        )
        + "\n"
    )


def grid(headers: list[str], rows: list[list[str]], right: list[bool]) -> str:
    """An HTML table of plain-text cells (each escaped); ``right`` marks the numeric columns."""
    cls = [' class="num"' if r else "" for r in right]
    head = "".join(f"<th{c}>{escape(h)}</th>" for h, c in zip(headers, cls))
    body = "\n".join("<tr>" + "".join(f"<td{c}>{escape(v)}</td>" for v, c in zip(row, cls)) + "</tr>" for row in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>\n"


def figure_block(path: Path) -> Block:
    """A PNG embedded as a data URI, captioned with its path."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    body = (
        f'<figure><img src="data:image/png;base64,{data}" alt="{escape(path.name)}">'
        f"<figcaption>{escape(str(path))}</figcaption></figure>\n"
    )
    return Block(slug(path.stem), escape(path.stem), body)


def markdown_block(path: Path) -> Block:
    """A Markdown report file: its first heading is the block's title, the rest its body (headings below <h3>)."""
    title, level, rest = split_title(path.read_text(encoding="utf-8"))
    body = f'<p class="src">{escape(str(path))}</p>\n' + to_html(rest, 3 - level if title else 3)
    return Block(slug(path.stem), title or escape(path.name), body)


def file_block(path: Path) -> Block:
    return figure_block(path) if path.suffix == ".png" else markdown_block(path)


def pngs(folder: Path) -> list[Path]:
    """The PNGs of ``folder``, sorted (none when it does not exist)."""
    return sorted(folder.glob("*.png")) if folder.is_dir() else []


def _figures_by_scenario(names: Iterable[str], figures_dir: Path) -> dict[str, list[Path]]:
    """Each scenario's PNGs: those whose name starts with its file stem and ``_`` (the longest stem wins)."""
    names = list(names)
    stems = {file_stem(n): n for n in names}
    out: dict[str, list[Path]] = {n: [] for n in names}
    for png in pngs(figures_dir):
        owners = [s for s in stems if png.name.startswith(s + "_")]
        if owners:
            out[stems[max(owners, key=len)]].append(png)
    return out


def _counts(values: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in counts.items())


def store_page(out: Path, figures_dir: Path) -> Page:
    """Every scenario of the store in ``out``: summary table, notes, figures."""
    try:
        store = ResultsStore(out, read_only=True)
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from None
    every = store.runs()
    if every.empty:
        raise NothingToWrite(empty_store_line(out))
    names = list(dict.fromkeys(every["scenario"]))
    figures = _figures_by_scenario(names, figures_dir)
    sections = []
    for name in names:
        runs = store.runs(name)
        metrics = store.metrics(runs["run_id"])
        headers, rows = _cells(summarize(runs, metrics), pm="±", pct="%")
        notes = "".join(
            f'<p class="note"><em>{escape(n)}</em></p>\n' for n in (SUMMARY_NOTE, *summary_notes(runs, metrics))
        )
        table = Block(
            slug(file_stem(name)) + "-table",
            "Accuracy, rounds and bits to target",
            grid(headers, rows, [_right(h) for h in headers]) + notes,
        )
        intro = (
            f"<p>{len(runs)} run(s): {escape(_counts(runs['status']))}; "
            + (
                f"{len(figures[name])} figure(s) from {escape(str(figures_dir))}/"
                if figures[name]
                else f"no figure in {escape(str(figures_dir))}/ (<code>fedbench plot --scenario</code> draws them)"
            )
            + ".</p>\n"
        )
        sections.append(
            Section(slug(file_stem(name)), escape(name), intro, (table, *(figure_block(p) for p in figures[name])))
        )
    covers = (
        f"<p>Every scenario of the results store <code>{escape(str(store.db_path))}</code>: {len(names)} "
        f"scenario(s), {len(every)} run(s) ({escape(_counts(every['status'])) or 'none'}). Each summary "
        "table is the one <code>fedbench table</code> writes; the figures are the PNGs of "
        f"<code>{escape(str(figures_dir))}/</code> named after the scenario, embedded.</p>\n"
    )
    covers += "" if names else "<p>No runs in the store yet.</p>\n"
    return Page(f"fedbench report: {out}", covers, tuple(sections))


def write_page(page: Page, path: Path) -> Path:
    """Write ``page`` (UTF-8) to ``path``, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(render(page).encode("utf-8"))
    return path
