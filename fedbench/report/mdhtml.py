"""The Markdown our report writers produce, as HTML: enough of GitHub Markdown for the tables, claims and
notes in ``tables/`` (no new dependency), every piece of text escaped with :func:`html.escape`.

Blocks (separated by blank lines or by a change of kind)::

    # heading … ###### heading      <h1>…<h6>, shifted by ``shift`` levels (at most <h6>)
    | a | b |  then  |---|--:|      a table; the separator row's colons align columns (right, center)
    - item  /  * item  /  1. item   a list (indented items stay in the same flat list)
    ```  …  ```                     preformatted text
    anything else                   a paragraph (its lines joined by newlines)

Inline: `code`, **bold**, _italic_ / *italic* (not inside words, so file_names_stay), [text](link).
"""

from __future__ import annotations

import html
import re

_HEADING = re.compile(r"(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"\s*(?:[-*+]|(\d+)[.)])\s+(.*)")
_TABLE_SEP = re.compile(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*")
_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_ITALIC = re.compile(r"(?<![\w*])([_*])(?![\s_*])(.+?)(?<![\s_*])\1(?![\w*])")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def _link(m: re.Match[str]) -> str:
    """``[text](target)`` (already escaped) as a link; a ``javascript:`` target stays plain text."""
    target = html.unescape(m.group(2))
    if target.strip().lower().startswith("javascript:"):
        return m.group(0)
    return f'<a href="{html.escape(target)}">{m.group(1)}</a>'


def inline(text: str) -> str:
    """One line of Markdown text as escaped HTML with its code spans, emphasis and links."""
    codes: list[str] = []

    def keep(m: re.Match[str]) -> str:
        codes.append(f"<code>{html.escape(m.group(1))}</code>")
        return f"\x00{len(codes) - 1}\x00"

    out = html.escape(_CODE.sub(keep, text), quote=False)
    out = _LINK.sub(_link, out)
    out = _BOLD.sub(r"<strong>\1</strong>", out)
    out = _ITALIC.sub(r"<em>\2</em>", out)
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], out)


def _cells(line: str) -> list[str]:
    """A table row's cells (``\\|`` is a literal bar)."""
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def _align(sep: str) -> str:
    sep = sep.strip()
    if sep.startswith(":") and sep.endswith(":"):
        return ' style="text-align:center"'
    return ' style="text-align:right"' if sep.endswith(":") else ""


def _padded_right(lines: list[str], column: int) -> bool:
    """Without colons in the separator: a column that tabulate padded on the left (its text ends at the
    right edge of every cell, and starts after the left edge in some) holds numbers."""
    raw = [re.split(r"(?<!\\)\|", line.strip().strip("|")) for line in lines]
    cells = [r[column] for r in raw if column < len(r)]
    return any(c.startswith("  ") for c in cells) and not any(c.endswith("  ") for c in cells)


def table(lines: list[str]) -> str:
    """A GitHub Markdown table (header, separator, rows) as an HTML table."""
    head, aligns = _cells(lines[0]), [_align(s) for s in _cells(lines[1])]
    if ":" not in lines[1]:
        rows = [lines[0], *lines[2:]]
        aligns = [_align("-:") if _padded_right(rows, j) else "" for j in range(len(head))]
    aligns += [""] * (len(head) - len(aligns))
    rows = [_cells(line) for line in lines[2:]]
    header = "".join(f"<th{a}>{inline(c)}</th>" for c, a in zip(head, aligns))
    out = ["<table>", f"<thead><tr>{header}</tr></thead>", "<tbody>"]
    out += [
        "<tr>"
        + "".join(f"<td{a}>{inline(c)}</td>" for c, a in zip(row + [""] * (len(head) - len(row)), aligns))
        + "</tr>"
        for row in rows
    ]
    return "\n".join([*out, "</tbody>", "</table>"])


def _is_table(lines: list[str], i: int) -> bool:
    return lines[i].lstrip().startswith("|") and i + 1 < len(lines) and bool(_TABLE_SEP.fullmatch(lines[i + 1].strip()))


def split_title(text: str) -> tuple[str | None, int, str]:
    """(the first line's heading as HTML, its level, the rest of ``text``), or (None, 0, ``text``) when
    the text does not start with a heading."""
    first, _, rest = text.partition("\n")
    m = _HEADING.fullmatch(first)
    return (inline(m.group(2)), len(m.group(1)), rest) if m else (None, 0, text)


def to_html(text: str, shift: int = 0) -> str:
    """Markdown ``text`` as an HTML fragment; headings move ``shift`` levels down (``#`` → ``<h3>`` for 2)."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            out.append("<pre><code>" + html.escape("\n".join(lines[i + 1 : end])) + "</code></pre>")
            i = end + 1
        elif m := _HEADING.fullmatch(line):
            level = min(6, len(m.group(1)) + shift)
            out.append(f"<h{level}>{inline(m.group(2))}</h{level}>")
            i += 1
        elif _is_table(lines, i):
            end = next((j for j in range(i + 2, len(lines)) if not lines[j].lstrip().startswith("|")), len(lines))
            out.append(table(lines[i:end]))
            i = end
        elif m := _ITEM.fullmatch(line):
            tag = "ol" if m.group(1) else "ul"
            items = []
            while i < len(lines) and (m := _ITEM.fullmatch(lines[i])):
                items.append(f"<li>{inline(m.group(2))}</li>")
                i += 1
            out.append(f"<{tag}>\n" + "\n".join(items) + f"\n</{tag}>")
        else:
            para = []
            while (
                i < len(lines)
                and lines[i].strip()
                and not _HEADING.fullmatch(lines[i])
                and not _is_table(lines, i)
                and not _ITEM.fullmatch(lines[i])
                and not lines[i].startswith("```")
            ):
                para.append(inline(lines[i].strip()))
                i += 1
            out.append("<p>" + "\n".join(para) + "</p>")
    return "\n".join(out) + ("\n" if out else "")
