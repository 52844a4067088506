"""The Markdown subset of the report files as HTML (fedbench.report.mdhtml), against hand-written HTML."""

from __future__ import annotations

from fedbench.report.mdhtml import inline, split_title, to_html
from fedbench.report.tables import markdown_grid


def test_inline_escapes_then_formats() -> None:
    assert inline("a < b & **bold** _it_ *it2* `x_<y>_z` [t](a.md?x=1&y=2)") == (
        "a &lt; b &amp; <strong>bold</strong> <em>it</em> <em>it2</em> <code>x_&lt;y&gt;_z</code> "
        '<a href="a.md?x=1&amp;y=2">t</a>'
    )
    assert inline("fedmim_tableI_tiny and x_i,K stay") == "fedmim_tableI_tiny and x_i,K stay"
    assert inline("[x](javascript:alert(1))") == "[x](javascript:alert(1))"


def test_blocks() -> None:
    text = "# Title\n\nline one\nline two\n\n- a\n- b <c>\n\n1. first\n\n## Sub\n\n```\nraw <x>\n```\n"
    assert to_html(text, 2) == (
        "<h3>Title</h3>\n<p>line one\nline two</p>\n<ul>\n<li>a</li>\n<li>b &lt;c&gt;</li>\n</ul>\n"
        "<ol>\n<li>first</li>\n</ol>\n<h4>Sub</h4>\n<pre><code>raw &lt;x&gt;</code></pre>\n"
    )
    assert to_html("###### deep", 3) == "<h6>deep</h6>\n" and to_html("") == ""


def test_tables_keep_alignment() -> None:
    explicit = "| a | b | c |\n|:---|---:|:-:|\n| 1 | 2 \\| 3 | x |\n"
    assert to_html(explicit) == (
        '<table>\n<thead><tr><th>a</th><th style="text-align:right">b</th><th style="text-align:center">c</th>'
        '</tr></thead>\n<tbody>\n<tr><td>1</td><td style="text-align:right">2 | 3</td>'
        '<td style="text-align:center">x</td></tr>\n</tbody>\n</table>\n'
    )
    # tabulate's github tables carry no colons: the left padding of a numeric column says "right"
    rows = [["FedAvg", "81.20 ± 0.30"], ["SCAFFOLD-long-name", "9.00 ± 1.00"]]
    md = markdown_grid(["Algorithm", "Top acc. (%)"], rows)
    html = to_html(md)
    assert "<th>Algorithm</th>" in html and '<th style="text-align:right">Top acc. (%)</th>' in html
    assert '<td>SCAFFOLD-long-name</td><td style="text-align:right">9.00 ± 1.00</td>' in html


def test_split_title() -> None:
    assert split_title("## A _b_\n\nrest\n") == ("A <em>b</em>", 2, "\nrest\n")
    assert split_title("no heading\n# later") == (None, 0, "no heading\n# later")
