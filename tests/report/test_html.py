"""``fedbench report``: the HTML page of a store built by ``fedbench run`` / ``plot`` on the tiny scenario, and
the page of the committed FedMIM tables and figures at the tiny scale, read back with ``html.parser``."""

from __future__ import annotations

import base64
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fedbench.cli import app
from fedbench.store import DB_NAME
from tests.factories import tiny_scenario

runner = CliRunner()
REPO = Path(__file__).parents[2]
PNG = b"\x89PNG\r\n\x1a\n"
LABEL = "Fed<Avg> & co"  # a label that must be escaped
BROWSERS = [b for b in ("chromium", "chromium-browser", "google-chrome", "firefox") if shutil.which(b)]


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args], terminal_width=250)


class Page(HTMLParser):
    """The parts of a page the tests read: tables (rows of cell texts), image sources, ids, links, tags."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.imgs: list[str] = []
        self.ids: list[str] = []
        self.hrefs: list[str] = []
        self.tags: set[str] = set()
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        self.ids += [a["id"]] if "id" in a else []
        self.hrefs += [a["href"]] if "href" in a else []
        if tag == "img":
            self.imgs.append(a["src"])
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def check_self_contained(text: str, page: Page) -> None:
    """Offline: no script, stylesheet link or remote source; every in-page link has its anchor; PNGs decode."""
    assert text.startswith("<!DOCTYPE html>") and not {"script", "link", "iframe"} & page.tags
    assert "http://" not in text and "https://" not in text
    assert len(page.ids) == len(set(page.ids))
    assert page.hrefs and all(h.startswith("#") and h[1:] in page.ids for h in page.hrefs)
    for src in page.imgs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.removeprefix("data:image/png;base64,"), validate=True).startswith(PNG)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, Path]:
    """Two scenarios, ``tiny`` (two algorithms) and ``tiny_x`` (whose figure names also start with ``tiny_``),
    run for 2 rounds, plotted vs rounds and bits; returns (store folder, figures folder)."""
    root = tmp_path_factory.mktemp("html")
    out, figures = root / "out", root / "figures"
    scenarios = {
        "tiny": tiny_scenario(
            rounds=2, targets=[0.2], algorithms=[{"name": "fedavg", "label": LABEL}, {"name": "scaffold"}]
        ),
        "tiny_x": tiny_scenario(rounds=2, name="tiny_x"),
    }
    for name, raw in scenarios.items():
        path = root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw))
        result = invoke("run", path, "--out", out, "--quiet")
        assert result.exit_code == 0, result.output
    assert invoke("table", "--out", out, "--tables-dir", root / "tables", "--no-show").exit_code == 0
    assert invoke("plot", "--out", out, "--figures-dir", figures).exit_code == 0
    return out, figures


def test_store_page(store) -> None:
    out, figures = store
    before = sorted(p.name for p in out.iterdir())
    db_mtime = (out / DB_NAME).stat().st_mtime_ns
    result = invoke("report", "--out", out, "--figures-dir", figures)
    assert result.exit_code == 0, result.output
    html = out / "report.html"
    text = html.read_text(encoding="utf-8")
    page = Page(text)
    check_self_contained(text, page)

    assert [t[0][0] for t in page.tables] == ["Algorithm", "Algorithm"]  # one summary table per scenario
    assert [row[0] for row in page.tables[0][1:]] == [LABEL, "SCAFFOLD"]  # rows = algorithms
    assert [row[0] for row in page.tables[1][1:]] == ["FedAvg"]
    assert "Rounds to 20%" in page.tables[0][0] and page.tables[0][1][1] == "1"  # seeds column
    assert "Fed&lt;Avg&gt; &amp; co" in text and "<Avg>" not in text
    assert any("mean ± std over seeds" in t for t in page.text)  # the notes under each table
    # each scenario's own two figures (tiny_x_… belongs to tiny_x, not to tiny)
    assert len(page.imgs) == 4 and sorted(p.name for p in figures.glob("*.png")) == [
        "tiny_acc_vs_bits.png",
        "tiny_acc_vs_rounds.png",
        "tiny_x_acc_vs_bits.png",
        "tiny_x_acc_vs_rounds.png",
    ]
    assert text.index('id="tiny_acc_vs_rounds"') < text.index('id="tiny_x"') < text.index('id="tiny_x_acc_vs_rounds"')
    assert ["tiny", "tiny_x"] == [i for i in page.ids if i.startswith("tiny") and "acc" not in i and "table" not in i]

    # read-only: the store folder holds what it held (SQLite's -wal/-shm companions aside), the file is untouched
    after = sorted(p.name for p in out.iterdir() if p.name != "report.html")

    def kept(names: list[str]) -> list[str]:
        return [n for n in names if not n.endswith(("-wal", "-shm"))]

    assert kept(after) == kept(before)
    assert (out / DB_NAME).stat().st_mtime_ns == db_mtime

    first = html.read_bytes()
    assert invoke("report", "--out", out, "--figures-dir", figures).exit_code == 0
    assert html.read_bytes() == first  # byte-deterministic

    # no figures folder: tables only, nothing created
    other = out.parent / "page.html"
    result = invoke("report", "--out", out, "--figures-dir", out.parent / "nofigs", "--html", other)
    assert result.exit_code == 0 and not (out.parent / "nofigs").exists()
    assert Page(other.read_text()).imgs == [] and "no figure in" in other.read_text()


def test_missing_store_or_paper_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nowhere"
    result = invoke("report", "--out", missing)
    assert result.exit_code == 2 and f"no results store at {missing / DB_NAME}" in " ".join(result.output.split())
    assert len(result.output.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    assert invoke("report", "--out", tmp_path / "empty").exit_code == 2  # a folder without a store
    assert invoke("report").exit_code == 2  # default: results/
    result = invoke("report", "--paper", "nope", "--scale", "tiny", "--html", tmp_path / "p.html")
    assert result.exit_code == 2 and "unknown paper 'nope'" in result.output
    assert invoke("report", "--paper", "fedmim").exit_code == 2  # no --scale
    assert invoke("report", "--paper", "fedmim", "--scale", "huge").exit_code == 2
    result = invoke("report", "--paper", "fedmim", "--scale", "tiny", "--tables-dir", "t", "--figures-dir", "f")
    assert result.exit_code == 2 and "no table or figure of paper fedmim at the tiny scale" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"] and not any((tmp_path / "empty").iterdir())


def test_paper_page_from_committed_files(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # the room's scenario files are named from the repository root
    html = tmp_path / "fedmim.html"
    result = invoke("report", "--paper", "fedmim", "--scale", "tiny", "--html", html)
    assert result.exit_code == 0, result.output
    text = html.read_text(encoding="utf-8")
    page = Page(text)
    check_self_contained(text, page)
    headers = [t[0] for t in page.tables]
    assert headers[0][:2] == ["Method", "CIFAR-10 IID."] and headers.count(["id", "claim", "ours", "paper"]) == 1
    rows = {row[0]: row for t in page.tables[:1] for row in t[1:]}
    assert rows["FedMIM"][1].startswith("86.39 / ")  # paper / ours, as in tables/fedmim_tableI_tiny.md
    for table in ("I", "II", "III"):
        assert f'id="fedmim_table{table}_tiny"' in text
    # sections in the room's target order, each figure of fedmim at the tiny scale once
    order = [text.index(f'id="target-{t}"') for t in ("table1", "table2", "table3", "fig2")]
    assert order == sorted(order) and 'id="fedmim_claims_tiny"' in text
    committed = sorted(p.name for p in (REPO / "figures").glob("fedmim_*tiny*.png"))
    assert len(page.imgs) == len(committed) == 6
    assert all(f'alt="{name}"' in text for name in committed)
    assert "C1: FedMIM &gt; FedAvg in every Table I column" in text
    assert invoke("report", "--paper", "fedmim", "--scale", "tiny", "--html", tmp_path / "again.html").exit_code == 0
    assert (tmp_path / "again.html").read_bytes() == html.read_bytes()


@pytest.mark.skipif(not BROWSERS, reason="no headless Chromium or Firefox on this machine")
def test_page_loads_in_a_headless_browser(store, tmp_path: Path) -> None:
    out, figures = store
    html = tmp_path / "page.html"
    assert invoke("report", "--out", out, "--figures-dir", figures, "--html", html).exit_code == 0
    browser = BROWSERS[0]
    if browser == "firefox":
        cmd = [browser, "--headless", "--screenshot", str(tmp_path / "shot.png"), html.as_uri()]
    else:
        cmd = [browser, "--headless", "--disable-gpu", "--no-sandbox", "--dump-dom", html.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    if browser != "firefox":
        assert "tiny_acc_vs_rounds" in done.stdout and "SCAFFOLD" in done.stdout


@pytest.mark.parametrize("paper", ["cflag", "fedcams", "fedmim", "fedqvr", "gradma"])
def test_report_files_name_the_committed_outputs(paper: str, monkeypatch) -> None:
    """Each step's ``report_files`` at the tiny scale names files its writer wrote (the committed tiny outputs)."""
    from rich.console import Console

    from fedbench.papers import paper_part
    from fedbench.papers.targets import Context, Tuning

    monkeypatch.chdir(REPO)
    room = paper_part(paper, "room").ROOM
    for target in room.targets:
        ctx = Context(
            paper, "tiny", Path("unused"), Path("tables"), Path("figures"), Console(), target.runs, room.run_files
        )
        for step in target.steps:
            files = step.report_files(ctx)
            tuned_here = paper == "gradma"  # the only paper tuned at the tiny scale: its Tuning() step names a table
            assert (files or (isinstance(step, Tuning) and not tuned_here)) and all(
                f.suffix in (".md", ".png") for f in files
            )
            missing = [str(f) for f in files if not f.is_file()]
            assert not missing, f"{paper} {target.name} {type(step).__name__}: {missing}"
