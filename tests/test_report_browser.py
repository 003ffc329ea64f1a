"""report.html in a real headless Chromium: the script runs without errors, sorts, the figures decode.

The page is loaded with a probe script added (one before the report's script to catch errors, one
after it to drive the sort through the exposed function, a click and a key press, and to record
what the page then shows) and read back with --dump-dom. Skipped when Chromium is not installed
(experiments/env.sh installs it with apt when run as root).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from atnat.experiments.reporting.report import write_report
from tests import fixtures_results as fx

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium not found on PATH: `apt-get install chromium` (experiments/env.sh does "
    "this when run as root) to check report.html in a browser")  # fmt: skip

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")  # fmt: skip

# Before the report's script: every uncaught error lands on <html data-js-errors>.
CATCH = """<script>addEventListener("error", function (e) { var h = document.documentElement;
  h.setAttribute("data-js-errors", (h.getAttribute("data-js-errors") || "") + e.message + "\\n"); });</script>"""

# After it: sort the `copy` overview (the first table) four ways, recording the row order after
# each step; sort the environment table by text; once loaded, record every image's decoded width.
PROBE = """<script>(function () {
  var out = {steps: {}}, tables = document.querySelectorAll("table");
  function column(table, name) {
    return Array.prototype.findIndex.call(table.tHead.rows[0].cells, function (th) {
      return th.textContent === name; });
  }
  function order(table) {
    return Array.prototype.map.call(table.tBodies[0].rows, function (r) {
      return r.cells[0].textContent + " / " + r.cells[1].textContent; });
  }
  function record(name, table, header) {
    out.steps[name] = {order: order(table), sort: table.tHead.rows[0].cells[column(table, header)]
      .getAttribute("aria-sort")};
  }
  try {
    var copy = document.querySelector("#overview table"), env = document.querySelector("#environment table");
    window.atnatReport.sortTable(copy, column(copy, "Latency ms (b=1)"), false);
    record("api_latency_ascending", copy, "Latency ms (b=1)");
    var p = copy.tHead.rows[0].cells[column(copy, "p vs AT beam5 (Holm)")];
    p.click();
    record("click_p_first", copy, "p vs AT beam5 (Holm)");
    p.click();
    record("click_p_second", copy, "p vs AT beam5 (Holm)");
    copy.tHead.rows[0].cells[column(copy, "BLEU")].dispatchEvent(
      new KeyboardEvent("keydown", {key: "Enter", bubbles: true}));
    record("enter_bleu", copy, "BLEU");
    var made = document.createElement("div");  // the sort keys themselves, on a table made here
    made.innerHTML = "<table><thead><tr><th>v</th><th>t</th></tr></thead><tbody>" +
      "<tr><td data-v='10'>x</td><td>2.5</td></tr><tr><td data-v='9'>z</td><td>10.25</td></tr>" +
      "<tr><td data-v='100'>y</td><td>\u2013</td></tr><tr><td data-v=''>w</td><td>10.3</td></tr></tbody></table>" +
      "<table><thead><tr><th>d</th></tr></thead><tbody><tr><td>-1.08 [-2.13, -0.02]</td></tr><tr><td>+0.34 [-0.5, +1.2]</td></tr>" +
      "<tr><td>-11.56 [-13.0, -10.1]</td></tr><tr><td>2.59\u00d7 [1.93, 3.48]</td></tr><tr><td>AT 3+3</td></tr></tbody></table>";
    var keys = made.firstChild, cells = function (j) {
      return Array.prototype.map.call(keys.tBodies[0].rows, function (r) { return r.cells[j].textContent; }); };
    window.atnatReport.sortTable(keys, 0, false);
    out.by_data_v = cells(0);
    window.atnatReport.sortTable(keys, 1, true);
    out.by_number_text = cells(1);
    var signed = made.children[1];
    window.atnatReport.sortTable(signed, 0, false);
    out.by_signed_text = Array.prototype.map.call(signed.tBodies[0].rows, function (r) { return r.cells[0].textContent; });
    env.tHead.rows[0].cells[0].click();
    out.environment = Array.prototype.map.call(env.tBodies[0].rows, function (r) {
      return r.cells[0].textContent; });
  } catch (e) { out.error = String(e); }
  var overview = document.querySelector("#overview table"), heads = overview.tHead.rows[0].cells;
  out.best = Array.prototype.map.call(overview.querySelectorAll("td.best"), function (td) {
    var row = td.parentElement;
    return [row.cells[0].textContent + " / " + row.cells[1].textContent, heads[td.cellIndex].textContent,
            getComputedStyle(td.firstElementChild || td).fontWeight];
  });
  function shown(table) {
    return Array.prototype.filter.call(table.tHead.rows[0].cells, function (th) {
      return getComputedStyle(th).display !== "none"; }).length;
  }
  out.window_width = window.innerWidth;
  out.overview_width = overview.getBoundingClientRect().width;
  out.overview_columns = shown(overview);
  var more = document.querySelector("#overview div.folded-columns > button.more-columns");
  if (more) { more.click(); out.overview_columns_all = shown(overview); more.click();
              out.overview_columns_again = shown(overview); }
  addEventListener("load", function () {
    out.images = Array.prototype.map.call(document.images, function (img) { return img.naturalWidth; });
    var pre = document.createElement("pre");
    pre.id = "probe";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  });
})();</script>"""


def load(page: str, tmp_path: Path, fragment: str = "", probe_script: str = PROBE, size: str = "1400,1000") -> str:
    """The DOM of page (HTML text) after Chromium ran its scripts in a window of `size` pixels, with the
    probes added."""
    assert "<head>" in page and "</body>" in page
    page = page.replace("<head>", "<head>" + CATCH, 1).replace("</body>", probe_script + "</body>", 1)
    path = tmp_path / "probe.html"
    path.write_text(page, encoding="utf-8")
    profile = tmp_path / "chromium-profile"
    cmd = [CHROMIUM, *FLAGS, f"--window-size={size}", f"--user-data-dir={profile}", "--dump-dom",
           path.as_uri() + fragment]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "</html>" in done.stdout, done.stderr[-2000:]
    return done.stdout


def probe(dom: str) -> dict:
    match = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert match, "the probe did not report: the page never finished loading"
    return json.loads(match.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


class _Tags(HTMLParser):
    """Start tags as (tag, attributes), and the rows of the overview's first <table> as cell texts."""

    def __init__(self):
        super().__init__()
        self.tags, self.rows, self.in_first, self.cell, self.in_overview = [], [], None, None, False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if dict(attrs).get("id") == "overview":
            self.in_overview = True
        if tag == "table" and self.in_first is None and self.in_overview:
            self.in_first = True
        elif tag == "tr" and self.in_first:
            self.rows.append([])
        elif tag in ("td", "th") and self.in_first:
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "table" and self.in_first:
            self.in_first = False
        elif tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def parse(dom: str) -> _Tags:
    tags = _Tags()
    tags.feed(dom)
    return tags


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    root = fx.build_results(tmp_path_factory.mktemp("browser"))
    return write_report(root)[1].read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def dom(page, tmp_path_factory) -> str:
    return load(page, tmp_path_factory.mktemp("chromium"), fragment="#environment")


def _systems(*rows: int) -> list[str]:
    """'cell / strategy' of the `copy` task's fixture rows by their index in fx.ROWS."""
    return [f"{fx.ROWS[i]['cell'].removesuffix('-s1')} / {fx.ROWS[i]['strategy']}" for i in rows]


def test_script_ran_without_errors(dom):
    tags = parse(dom)
    html_attrs = next(a for t, a in tags.tags if t == "html")
    body_attrs = next(a for t, a in tags.tags if t == "body")
    assert "data-js-errors" not in html_attrs, html_attrs["data-js-errors"]
    assert body_attrs.get("data-report-ready") == "1"
    assert "error" not in probe(dom)
    headers = [a for t, a in tags.tags if t == "th"]
    assert headers and all(a.get("tabindex") == "0" for a in headers)  # reachable by keyboard


def test_sorts_by_number_with_missing_values_last(dom):
    steps = probe(dom)["steps"]
    # latency 1.9 < 3.2 < 4.1 < 12.34 < 30.1 (as text, "12.3" would come before "3.20")
    assert steps["api_latency_ascending"] == {"order": _systems(4, 2, 3, 0, 1), "sort": "ascending"}
    # p vs AT is not ranked: first click ascending (shown "<0.001" is 0.0004); "–" last both ways
    assert steps["click_p_first"] == {"order": _systems(3, 4, 2, 1, 0), "sort": "ascending"}
    assert steps["click_p_second"] == {"order": _systems(1, 2, 4, 3, 0), "sort": "descending"}
    # BLEU is higher-is-better: its first sort (Enter on the header) puts the best first
    assert steps["enter_bleu"] == {"order": _systems(1, 0, 2, 3, 4), "sort": "descending"}


def test_sort_keys_are_the_numbers_behind_the_cells(dom):
    result = probe(dom)
    assert result["by_data_v"] == ["z", "x", "y", "w"]  # data-v 9 < 10 < 100, then the empty one
    assert result["by_number_text"] == ["10.3", "10.25", "2.5", "–"]  # as numbers, not digit runs
    # a value with its interval sorts by its leading signed number (text collation ignored the sign)
    assert result["by_signed_text"] == ["-11.56 [-13.0, -10.1]", "-1.08 [-2.13, -0.02]", "+0.34 [-0.5, +1.2]",
                                        "2.59× [1.93, 3.48]", "AT 3+3"]


def test_sorted_order_is_what_the_page_shows(dom):
    header, *rows = parse(dom).rows
    assert [f"{r[0]} / {r[1]}" for r in rows] == _systems(1, 0, 2, 3, 4)
    assert rows[0][header.index("BLEU")] == "38.05 [36.70, 39.40]"


def test_text_columns_sort_as_text(dom):
    assert probe(dom)["environment"] == sorted(fx.ENVIRONMENT)


def test_every_figure_decoded(dom):
    widths = probe(dom)["images"]
    from atnat.experiments.reporting.figures import FIGURES

    assert len(widths) == len(FIGURES) and min(widths) > 100  # the fixture has data for every figure


def test_the_first_screen_fits_a_1400_px_window_and_shows_every_column_on_request(dom):
    """The overview's secondary columns are folded behind a button; the figure is wide."""
    found = probe(dom)
    assert found["window_width"] == 1400
    assert found["overview_width"] <= 1400 - 32  # inside the page's margins
    assert found["overview_columns"] < found["overview_columns_all"] == len(
        parse(dom).rows[0])  # every column exists; the button shows them all
    assert found["overview_columns_again"] == found["overview_columns"]  # and folds them again
    assert found["images"][0] >= 900  # the headline figure: quality against speed


def test_best_values_marked_bold(dom):
    (beam, length_beam, ctc) = _systems(1, 3, 4)
    expected = {(beam, "BLEU"), (beam, "Tok. BLEU"), (beam, "chrF"), (beam, "Exact %"), (length_beam, "Length exact / ±1 %")}
    expected |= {(ctc, h) for h in ("Latency ms (b=1)", "Speed-up × vs AT greedy (b=1)", "Throughput sent/s", "Thr. speed-up ×",
                                    "Passes", "Repetition %")}  # fmt: skip
    best = probe(dom)["best"]
    assert {(system, header) for system, header, _ in best} == expected and len(best) == len(expected)
    assert all(int(weight) >= 600 for _, _, weight in best)


def test_samples_and_environment_folded(dom):
    tags = parse(dom)
    details = {a["id"]: "open" in a for t, a in tags.tags if t == "details" and "id" in a}
    assert details == {"sample-outputs": False, "environment": True}  # opened by the #environment address


def test_a_broken_script_is_caught(page, tmp_path):
    broken = page.replace("function sortBy(th) {", "function sortBy(th) {{", 1)
    assert broken != page
    tags = parse(load(broken, tmp_path))
    html_attrs = next(a for t, a in tags.tags if t == "html")
    assert "SyntaxError" in html_attrs.get("data-js-errors", "")
    assert "data-report-ready" not in next(a for t, a in tags.tags if t == "body")


def test_a_broken_sort_or_image_is_caught(page, tmp_path):
    broken = page.replace("keyed.sort(", "keyed.srot(", 1)
    broken = re.sub(r'(src="data:image/png;base64,)iVBOR', r"\1AAAA", broken, count=1)
    result = probe(load(broken, tmp_path))
    assert "srot" in result["error"]
    assert result["images"][0] == 0 and min(result["images"][1:]) > 100


# The first screen: where the verdict, the headline tables and the headline figure are, and whether any
# table is wider than the window.
LAYOUT = """<script>addEventListener("load", function () {
  var out = {height: window.innerHeight, width: window.innerWidth};
  function box(el) { var r = el.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, right: r.right}; }
  out.verdict = box(document.querySelector("#verdict p"));
  var heads = Array.prototype.filter.call(document.querySelectorAll("#verdict table"), function (t) { return true; });
  out.headline = heads.map(box);
  out.figure = box(document.querySelector("figure img"));
  out.wide = Array.prototype.filter.call(document.querySelectorAll("table"), function (t) {
    return t.getBoundingClientRect().right > window.innerWidth + 1; }).length;
  var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""


def test_the_first_screen_at_1366_by_768_is_the_verdict_the_headline_table_and_the_figure(page, tmp_path):
    """The verdict, the headline tables and the top of the quality-vs-speed figure lie within a laptop's
    first screen (1366 x 768), and no table of the report is wider than the window."""
    found = probe(load(page, tmp_path, probe_script=LAYOUT, size="1366,768"))
    assert found["width"] == 1366 and found["height"] <= 768
    assert 0 < found["verdict"]["top"] < found["height"]
    assert found["headline"] and all(b["bottom"] <= found["height"] for b in found["headline"])
    assert found["headline"][-1]["bottom"] <= found["figure"]["top"] < found["height"]
    assert found["wide"] == 0
