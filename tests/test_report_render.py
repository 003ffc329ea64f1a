"""The report's rendering: best values marked from the numbers, page order, folding, anchors, contents.

Runs on blocks and on the fixture folder's overview tables, without drawing figures (the browser
test and tests/test_report.py render whole reports).
"""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from atnat.experiments.reporting import figures, report
from atnat.experiments.reporting import html as report_html
from atnat.experiments.reporting.blocks import Block, best_cells
from atnat.experiments.reporting.html import FOLD_ROWS, html_table, render_html
from atnat.experiments.reporting.markdown import markdown_table, render_markdown
from atnat.experiments.reporting.report import build_document
from atnat.experiments.reporting.results import load_results
from tests import fixtures_results as fx

NAN = math.nan


def numbers_block(values: dict[str, list[float]], better: tuple[str, ...]) -> Block:
    frame = pd.DataFrame({k: ["–" if math.isnan(v) else f"{v:g}" for v in vs] for k, vs in values.items()})
    return Block("table", frame=frame, values=pd.DataFrame(values), better=better)


def test_best_cells_follow_each_columns_direction_with_ties():
    block = numbers_block({"hi": [1.0, 3.0, 3.0], "lo": [2.0, NAN, 0.5], "free": [9.0, 1.0, 5.0]},
                          ("higher", "lower", ""))  # fmt: skip
    assert best_cells(block) == {(1, 0), (2, 0), (2, 1)}


def test_no_best_in_a_column_of_one_number_or_equal_numbers_or_without_numbers():
    block = numbers_block({"one": [NAN, 4.0, NAN], "same": [1.0, 1.0, 1.0], "none": [NAN, NAN, NAN]},
                          ("higher", "lower", "higher"))  # fmt: skip
    assert best_cells(block) == set()
    assert best_cells(Block("table", frame=pd.DataFrame({"a": ["1", "2"]}))) == set()


@pytest.mark.parametrize(
    "kwargs, message",
    [({"values": pd.DataFrame({"a": [1.0]})}, "shape"),
     ({"values": pd.DataFrame({"a": [1.0, 2.0]}), "better": ("higher", "lower")}, "one direction per column"),
     ({"values": pd.DataFrame({"a": [1.0, 2.0]}), "better": ("up",)}, "among")],
)  # fmt: skip
def test_block_rejects_values_and_directions_that_do_not_fit(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Block("table", frame=pd.DataFrame({"a": ["1", "2"]}), **kwargs)


@pytest.fixture(scope="module")
def overviews(tmp_path_factory) -> dict[str, Block]:
    """The fixture folder's overview table block per task."""
    table = load_results(fx.build_results(tmp_path_factory.mktemp("render"))).table
    return {task: report.overview_table(part) for task, part in table[table["status"] == "ok"].groupby("task")}


def bold_cells(markdown: str) -> set[tuple[str, str]]:
    """(cell / strategy, header) of every bold cell in a markdown table."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    marked = set()
    for line in lines[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        marked |= {(f"{cells[0]} / {cells[1]}", h) for h, c in zip(header, cells) if c.startswith("**")}
    return marked


COPY_BEST = {("copy-at / beam5", "BLEU"), ("copy-at / beam5", "Tok. BLEU"), ("copy-at / beam5", "chrF"),
             ("copy-at / beam5", "Exact %"),
             ("copy-cmlm-kd / length-beam-3", "Length exact / ±1 %")} | {
    ("copy-ctc / ctc", h) for h in ("Latency ms (b=1)", "Speed-up × vs AT greedy (b=1)", "Throughput sent/s", "Thr. speed-up ×",
                                       "Passes", "Repetition %")}  # fmt: skip


def test_markdown_marks_each_columns_best_in_bold(overviews):
    assert bold_cells(render_markdown([overviews["copy"]])) == COPY_BEST  # p vs AT is not ranked
    # dialect: the one length figure (NAT's) is not "best" of anything; mixing is lower-is-better
    dialect = bold_cells(render_markdown([overviews["dialect"]]))
    assert ("dialect-at / greedy", "Mixing %") in dialect
    assert not any(h == "Length exact / ±1 %" for _, h in dialect)
    assert "| **38.05 [36.70, 39.40]** |" in render_markdown([overviews["copy"]])


def test_overview_directions_come_from_the_better_declaration(overviews):
    block = overviews["copy"]
    directions = dict(zip(block.frame.columns, block.better))
    assert directions["BLEU"] == "higher" and directions["Latency ms (b=1)"] == "lower"
    assert directions["System"] == directions["p vs AT beam5 (Holm)"] == ""
    assert block.values["Throughput sent/s"].tolist() == [1520.0, 600.0, 4100.0, 3900.0, 5200.0]


def test_html_marks_the_same_cells_and_keys_numbers(overviews):
    page = html_table(overviews["copy"])
    rows = re.findall(r"<tr>(.*?)</tr>", page)
    header = re.findall(r"<th[^>]*>(.*?)</th>", rows[0])
    marked = set()
    for row in rows[1:]:
        cells = re.findall(r"<td([^>]*)>(.*?)</td>", row)
        system = f"{cells[0][1]} / {cells[1][1]}"
        for h, (attrs, text) in zip(header, cells):
            classes = set(re.search(r'class="([^"]*)"', attrs).group(1).split()) if "class=" in attrs else set()
            if {"num", "nw", "best"} <= classes:
                assert text.startswith("<strong>")
                marked.add((system, h))
    assert marked == COPY_BEST
    assert '<td class="num nw" data-v="0.0008">&lt;0.001</td>' in page  # sorts by the number, not the text
    assert '<td class="num nw" data-v="">–</td>' in page  # no number: sorts last
    assert '<th class="num sec" data-better="lower" title="lower is better">Latency ms (b=1)</th>' in page
    assert page.startswith('<div class="folded-columns"><button type="button" class="more-columns"')
    assert '<th>System</th>' in page and 'data-v' not in page.split("</td>")[0]  # text columns: no key


def test_long_tables_fold_short_ones_do_not():
    frame = pd.DataFrame({"#": [str(i) for i in range(FOLD_ROWS + 1)]})
    folded = html_table(Block("table", frame=frame))
    assert folded.startswith('<details class="long"><summary>Show all 26 rows</summary><table')
    assert "open" not in folded.split("<table")[0]
    assert html_table(Block("table", frame=frame.iloc[:FOLD_ROWS])).startswith("<table")


def test_sections_anchors_contents_and_folded_sections(tmp_path):
    blocks = [Block("heading", "Grid report: g", 1), Block("toc"), Block("para", "summary"),
              Block("heading", "Overview", 2), Block("heading", "Task `a`", 3), Block("para", "x"),
              Block("heading", "Samples", 2, folded=True), Block("heading", "Task `a`", 3),
              Block("heading", "Samples", 2)]  # fmt: skip
    page = render_html(blocks, tmp_path, "g")
    assert '<section id="overview"><h2>Overview</h2>' in page and '<h3 id="overview-task-a">' in page
    assert '<details class="section" id="samples"><summary><h2>Samples</h2></summary>' in page
    assert '<h3 id="samples-task-a">' in page and '<section id="samples-2">' in page  # ids stay unique
    toc = re.search(r'<nav class="toc".*?</nav>', page).group()
    assert re.findall(r'href="#([^"]+)"', toc) == ["overview", "overview-task-a", "samples", "samples-task-a",
                                                  "samples-2"]  # fmt: skip
    assert page.index("</h1>") < page.index("<nav") < page.index("<p>summary</p>")
    body = page.split("<script>")[0]
    assert body.count("<section") == body.count("</section>") == 2
    assert body.count("<details") == body.count("</details>") == 1


def test_page_order_verdict_headline_figure_summary_tables_figures_samples_environment(tmp_path, monkeypatch):
    root = fx.build_results(tmp_path)
    drawn = [(caption, source, root / "figures" / f"{stem}.png") for stem, caption, source, _ in figures.FIGURES]
    monkeypatch.setattr(figures, "draw_figures", lambda *_: drawn)  # the order, not the drawing, is tested
    blocks = build_document(load_results(root))
    md = render_markdown(blocks)
    marks = ["# Grid report", "## Verdict", "copy (1 seed", "| Task | System |", "](figures/quality_vs_speed.png)",
             "## Summary", "On `copy`", "To reproduce", "## Overview", "### Task `copy`", "## Figures",
             "](figures/position_accuracy.png)", "## Sample outputs", "## Environment"]  # fmt: skip
    positions = [md.index(m) for m in marks]
    assert positions == sorted(positions)
    assert md.count("quality_vs_speed.png") == 1  # under the headline only, not again under Figures
    page = render_html([b for b in blocks if b.kind != "figure"], root, "g")  # the contents after the first
    assert page.index('id="verdict"') < page.index("<nav") < page.index('id="summary"')  # screen: verdict, table


def test_markdown_table_bold_positions():
    frame = pd.DataFrame({"a": ["1", "2"], "b": ["x|y", "3"]})
    assert markdown_table(frame, {(0, 1), (1, 0)}).splitlines()[2:] == ["| 1 | **x\\|y** |", "| **2** | 3 |"]


def test_numbers_right_aligned_by_their_text_when_a_table_has_no_values():
    frame = pd.DataFrame({"#": ["0", "12"], "Value": ["2.13.0", "cpu (2 threads)"], "n": ["–", "37.1 [36, 38]"]})
    page = html_table(Block("table", frame=frame))
    assert re.findall(r"<th(\s[^>]*)?>", page) == [' class="num"', "", ' class="num"']
    assert report_html.NOWRAP_CHARS >= len("copy-cmlm-kd-s1")


def test_names_and_messages_in_report_md_are_text_not_html(tmp_path):
    """Table cells were escaped, paragraphs and notes were not: a task named with a tag became live HTML in a
    markdown viewer (report.html was escaped)."""
    from atnat.experiments.reporting.blocks import Block
    from atnat.experiments.reporting.markdown import render_markdown

    md = render_markdown([Block("heading", "Task <b>x</b>", 2), Block("para", "dialect<img src=x onerror=alert(1)> and `<kept>`"),
                          Block("note", "a <script>")])
    assert "\\<b>" in md and "dialect\\<img src=x" in md and "`<kept>`" in md and "a \\<script>" in md
    assert "<img" not in md.replace("\\<img", "")
