"""A paper's HTML page (``fedbench report --paper P --scale S``), and the ``fedbench report`` command's
entry for both kinds of page (a store's page: :func:`fedbench.report.html.store_page`).

One section per target of the paper's room, in the room's order, with the Markdown tables (converted
by :mod:`fedbench.report.mdhtml`) and PNGs its steps write (``Step.report_files``), each file once, at
its first target, and the ones not written yet named; then "Other files": the room's other
``tables/P_*.md`` and ``figures/P_*.png`` of that scale. The page's blocks and rendering are
:mod:`fedbench.report.html`'s.

Nothing is created but the page: a missing store, an unknown paper or a paper without any file at
that scale is a ValueError naming it.
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

from rich.console import Console

from fedbench.papers import check_paper, paper_part
from fedbench.papers.targets import SCALES, Context, PaperRoom
from fedbench.report.html import Page, Section, file_block, pngs, slug, store_page, write_page

_SCALE_TOKEN = re.compile(r"(?<![A-Za-z0-9])(paper|small|tiny)(?![A-Za-z0-9])")


def _scale_of(name: str) -> set[str]:
    return set(_SCALE_TOKEN.findall(name))


def _paper_files(paper: str, scale: str, tables_dir: Path, figures_dir: Path) -> list[Path]:
    """``tables_dir/<paper>_*.md`` and ``figures_dir/<paper>_*.png`` of ``scale``: those whose names carry
    the scale (``…_tiny.md``, ``….tiny_acc_vs_rounds.png``); at the paper scale also those carrying none."""
    md = sorted(tables_dir.glob(f"{paper}_*.md")) if tables_dir.is_dir() else []
    files = [*md, *(p for p in pngs(figures_dir) if p.name.startswith(f"{paper}_"))]
    return [p for p in files if scale in _scale_of(p.stem) or (scale == "paper" and not _scale_of(p.stem))]


def _target_files(room: PaperRoom, paper: str, scale: str, tables_dir: Path, figures_dir: Path):
    """(target, its files in step order, the error of a step that could not name its files) per target."""
    for target in room.targets:
        ctx = Context(paper, scale, Path("."), tables_dir, figures_dir, Console(), target.runs, room.run_files)
        files, errors = [], []
        for step in target.steps:
            try:
                files += step.report_files(ctx)
            except (OSError, ValueError) as exc:  # a scenario file not found from this folder
                errors.append(
                    f"{type(step).__name__}: {' '.join(str(exc).split())} (the rooms name their scenario "
                    "files from the repository root)"
                )
        yield target, list(dict.fromkeys(files)), errors


def paper_page(paper: str, scale: str | None, tables_dir: Path, figures_dir: Path) -> Page:
    """A paper's tables, claims and figures at ``scale``, target by target (see the module docstring)."""
    check_paper(paper)
    scale = _check_scale(paper, scale, tables_dir)
    room = paper_part(paper, "room").ROOM
    shown: set[Path] = set()
    sections = []
    for target, files, errors in _target_files(room, paper, scale, tables_dir, figures_dir):
        files = [p for p in files if p not in shown]
        shown.update(files)
        missing = [p for p in files if not p.is_file()]
        if not files and not errors:
            continue
        intro = "".join(f'<p class="missing">not written yet: <code>{escape(str(p))}</code></p>\n' for p in missing)
        intro += "".join(f'<p class="missing">files not known: {escape(e)}</p>\n' for e in errors)
        blocks = tuple(file_block(p) for p in files if p.is_file())
        sections.append(
            Section(f"target-{slug(target.name)}", f"{escape(target.name)}: {escape(target.help)}", intro, blocks)
        )
    others = [p for p in _paper_files(paper, scale, tables_dir, figures_dir) if p not in shown]
    if others:
        sections.append(
            Section(
                "other-files",
                f"Other files of {escape(paper)} at the {escape(scale)} scale",
                "<p>Named by no step of the room's targets (an older target, or one renamed).</p>\n",
                tuple(file_block(p) for p in others),
            )
        )
    if not any(s.blocks for s in sections):
        raise ValueError(
            f"no table or figure of paper {paper} at the {scale} scale in {tables_dir}/ or "
            f"{figures_dir}/; `fedbench reproduce {paper} --scale {scale}` writes them"
        )
    covers = (
        f"<p>Paper <strong>{escape(room.title)}</strong> (room <code>fedbench/papers/{escape(paper)}/</code>) "
        f"at the <strong>{escape(scale)}</strong> scale: its paper / ours tables, claims and figures as "
        f"<code>fedbench reproduce {escape(paper)} --scale {escape(scale)}</code> writes them, read from "
        f"<code>{escape(str(tables_dir))}/</code> and <code>{escape(str(figures_dir))}/</code>, one section per "
        "target in the room's order.</p>\n"
    )
    return Page(f"fedbench report: {paper}, {scale} scale", covers, tuple(sections))


def _check_scale(paper: str, scale: str | None, tables_dir: Path) -> str:
    if scale in SCALES:
        return scale
    have = [s for s in SCALES if (tables_dir / f"{paper}_claims_{s}.md").is_file()]
    where = f"; claims written in {tables_dir}/ at: {', '.join(have)}" if have else ""
    got = f"--paper {paper} needs --scale" if scale is None else f"--scale: got {scale!r}"
    raise ValueError(f"{got}; expected one of {', '.join(SCALES)}{where}")


def default_path(out: Path | None, paper: str | None, scale: str | None) -> Path:
    """``<out>/report.html`` for a store, ``reports/<paper>_<scale>.html`` for a paper."""
    return Path("reports") / f"{paper}_{scale}.html" if paper else Path(out or "results") / "report.html"


def write_report(
    out: Path | None,
    paper: str | None,
    scale: str | None,
    tables_dir: Path,
    figures_dir: Path,
    html: Path | None = None,
) -> Path:
    """Build the page of the store ``out`` (default ``results``) or of ``paper`` at ``scale``, then write it
    (UTF-8) to ``html`` or :func:`default_path`; nothing is written when a ValueError is raised."""
    if paper is not None and out is not None:
        raise ValueError(
            "--out and --paper exclude each other: a paper's page reads its files in --tables-dir "
            "and --figures-dir, a store's page reads the store"
        )
    if paper is None and scale is not None:
        raise ValueError("--scale goes with --paper (a store's page shows every scenario it holds)")
    if paper is not None:
        page = paper_page(paper, scale, tables_dir, figures_dir)
    else:
        page = store_page(out or Path("results"), figures_dir)
    return write_page(page, html or default_path(out, paper, scale))
