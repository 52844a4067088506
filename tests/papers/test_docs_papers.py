"""docs/papers.md's papers table against the rooms: one row per shipped room (fedbench/papers/), and every
make target a row names (`reproduce-<paper>-<target>`, then `-<target>` for the same paper) is a target of
that room. A room kept outside the repository (FEDBENCH_ROOMS) needs no row."""

from __future__ import annotations

import re
from pathlib import Path

from fedbench import rooms
from fedbench.papers import reproduce as rp

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "papers.md"


def table_rows(text: str) -> dict[str, list[str]]:
    """Each row's paper (from its first `reproduce-<paper>`) → the target names it lists."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        first = re.search(r"`reproduce-([a-z0-9_]+)(?:-([A-Za-z0-9_.]+))?`", line)
        if line.startswith("|") and first:
            paper = first.group(1)
            named = re.findall(rf"`(?:reproduce-{paper})?-([A-Za-z0-9_.]+)`", line)
            rows.setdefault(paper, []).extend(named)
    return rows


def shipped_rooms() -> list[str]:
    return [p for p in rooms.paper_names() if rooms.room_dir(p).parent == rooms.SHIPPED]


def mismatches(text: str) -> list[str]:
    """What the page's table gets wrong about the shipped rooms (nothing when it agrees)."""
    rows, wrong = table_rows(text), []
    for paper in shipped_rooms():
        if paper not in rows:
            wrong.append(f"no row for the room {paper} (fedbench/papers/{paper}/)")
            continue
        known = {t.name for t in rp.room(paper).targets}
        wrong += [
            f"{paper}: no target {t!r} (known: {', '.join(sorted(known))})" for t in rows[paper] if t not in known
        ]
    wrong += [f"a row for {p}, which has no room" for p in rows if p not in shipped_rooms()]
    return wrong


def test_the_papers_table_matches_the_rooms() -> None:
    assert set(table_rows(PAGE.read_text())) == {"cflag", "fedcams", "fedmim", "fedqvr", "gradma"}
    assert mismatches(PAGE.read_text()) == []


def test_a_wrong_table_is_caught() -> None:
    text = PAGE.read_text().replace("`-fig2`", "`-fig9`")
    text = "\n".join(line for line in text.splitlines() if "`reproduce-cflag-" not in line)
    assert mismatches(text) == [
        "no row for the room cflag (fedbench/papers/cflag/)",
        "fedmim: no target 'fig9' (known: fig2, table1, table2, table3)",
    ]
