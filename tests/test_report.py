"""The grid report: numbers read back from report.md and report.html, figures, notes, errors."""

from __future__ import annotations

import base64
import json
import re
import struct
from html.parser import HTMLParser

import pandas as pd
import pytest

from atnat.core.errors import AtnatError
from atnat.experiments.reporting import judging
from atnat.experiments.reporting.figures import pareto_front
from atnat.experiments.reporting.markdown import markdown_table
from atnat.experiments.reporting.report import write_report
from atnat.experiments.reporting.results import load_results
from tests import fixtures_results as fx

FIGURES = ("quality_vs_speed", "position_accuracy", "prefix_corruption", "bleu_by_length", "iterations",
           "validation", "attention", "speed")  # fmt: skip
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def md_tables(text: str) -> list[tuple[str, list[dict[str, str]]]]:
    """Markdown tables in document order, each with the heading above it; rows as header -> cell
    (bold markers removed; tests/test_report_render.py checks the marks)."""
    tables: list[tuple[str, list[dict[str, str]]]] = []
    heading, block = "", []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            block.append([re.sub(r"^\*\*(.*)\*\*$", r"\1", c) for c in cells])
            continue
        if block:
            header, rows = block[0], block[2:]  # block[1] is the |---| separator
            tables.append((heading, [dict(zip(header, r)) for r in rows]))
            block = []
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
    return tables


class _HtmlTables(HTMLParser):
    """Collects every <table> as rows of cell texts, plus every <img src>."""

    def __init__(self):
        super().__init__()
        self.tables, self.srcs, self.cell = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = ""
        elif tag == "img":
            self.srcs.append(dict(attrs)["src"])

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def tables_under(text: str, heading: str) -> list[list[dict[str, str]]]:
    return [rows for h, rows in md_tables(text) if h == heading]


def html_content(text: str) -> _HtmlTables:
    parser = _HtmlTables()
    parser.feed(text)
    return parser


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The full fixture folder, reported once: (root, markdown text, html text)."""
    root = fx.build_results(tmp_path_factory.mktemp("full"))
    md, html = write_report(root)
    assert (md, html) == (root / "report.md", root / "report.html")
    return root, md.read_text(encoding="utf-8"), html.read_text(encoding="utf-8")


SPEED = "Speed-up × vs AT greedy (b=1)"
P_COPY = "p vs AT beam5 (Holm)"


def row_of(table: list[dict[str, str]], cell: str, strategy: str) -> dict[str, str]:
    (row,) = [r for r in table if r["System"] == cell.removesuffix("-s1") and r["Strategy"] == strategy]
    return row


def test_overview_numbers_read_back(report):
    _, md, _ = report
    copy = tables_under(md, "Task `copy`")[0]
    at = row_of(copy, "copy-at-s1", "greedy")
    assert at["BLEU"] == "37.12 [35.80, 38.44]" and at["Tok. BLEU"] == "38.62"
    assert (at["chrF"], at["Exact %"], at["Latency ms (b=1)"]) == ("61.3", "12.5", "12.3")
    assert (at[SPEED], at["Throughput sent/s"], at["Passes"]) == ("1.00 [0.90, 1.10]", "1520", "11.2")
    assert at[P_COPY] == "–"  # the baseline is not tested against itself
    cmlm = row_of(copy, "copy-cmlm-kd-s1", "mask-predict-4")
    assert (cmlm["Length exact / ±1 %"], cmlm["Repetition %"]) == ("45.0 / 80.0", "3.4")
    assert cmlm[P_COPY] == "0.080"  # Holm-adjusted, not the raw 0.040
    assert (cmlm["Latency ms (b=1)"], cmlm["Thr. speed-up ×"]) == ("3.20", "2.70")
    assert row_of(copy, "copy-cmlm-kd-s1", "length-beam-3")[P_COPY] == "<0.001"
    assert "Seeds" not in at  # one seed: no seeds column, intervals instead of spreads
    assert row_of(copy, "copy-ctc-s1", "ctc")["Length exact / ±1 %"] == "–"


def test_cpu_memory_read_as_resident_growth_is_not_shown(tmp_path):
    """A CPU memory figure without its basis is resident-size growth, ~0 for a repeated decode: no number
    (and no bold "best") in the overview, and a note saying why; with its basis the figure is shown."""
    write_report(fx.build_results(tmp_path / "new"), figures=False)
    md = (tmp_path / "new" / fx.GRID / "report.md").read_text()
    assert row_of(tables_under(md, "Task `copy`")[0], "copy-at-s1", "greedy")["Memory MiB"] == "120.0"
    assert "Memory is not shown" not in md
    write_report(fx.build_results(tmp_path / "old", drop_columns=["decode_memory_basis"]), figures=False)
    md = (tmp_path / "old" / fx.GRID / "report.md").read_text()
    assert all("Memory MiB" not in r for r in tables_under(md, "Task `copy`")[0])  # an all-empty column is left out
    assert md.count("Memory is not shown: this table's CPU memory was read as the growth") == 2  # under each task


def test_every_finished_row_appears_once_with_its_bleu_and_speedup(report):
    _, md, _ = report
    for r in fx.ROWS:
        if r["status"] != "ok":
            continue
        row = row_of(tables_under(md, f"Task `{r['task']}`")[0], r["cell"], r["strategy"])
        assert row["BLEU"].split()[0] == f"{r['bleu']:.2f}"
        assert float(row[SPEED].split()[0]) == pytest.approx(r["speedup_vs_at"], abs=0.005)


def test_at_baselines_first_and_empty_columns_left_out(report):
    _, md, _ = report
    copy, dialect = tables_under(md, "Task `copy`")[0], tables_under(md, "Task `dialect`")[0]
    assert [r["System"] for r in copy] == ["copy-at", "copy-at", "copy-cmlm-kd", "copy-cmlm-kd", "copy-ctc"]
    assert "Mixing %" not in copy[0]  # no copy cell has a mixing rate
    assert [r["Mixing %"] for r in dialect] == ["2.0", "31.5"]


def test_failed_cell_listed_with_its_message_not_in_overview(report):
    _, md, _ = report
    ((failed,),) = tables_under(md, "Failed cells")
    assert failed["Cell"] == fx.FAILED_CELL and failed["Status"] == "failed"
    assert failed["Error"] == " ".join(fx.FAILED_ERROR.split())  # pipe kept, newline flattened
    assert all(r["System"] != fx.FAILED_CELL.removesuffix("-s1") for r in tables_under(md, "Task `copy`")[0])


def summary_of(md: str) -> str:
    """The report's summary paragraph (under "## Summary", after the verdict and the headline)."""
    return md.split("## Summary\n\n")[1].split("\n\n")[0]


def test_summary_is_phrased_from_the_numbers(report):
    _, md, _ = report
    summary = summary_of(md)
    assert "the best AT system is `copy-at / beam5` (AT beam 5; 38.05 BLEU)" in summary
    # the difference's interval [-5.1, 0.2] holds 0 and reaches beyond ±1: no claim either way (it used to
    # say "tied")
    assert "the best NAT system is `copy-cmlm-kd / mask-predict-4` (CMLM, distilled, mask-predict 4; 35.50 BLEU), not resolved: -2.55 BLEU " \
           "[-5.10, +0.20] (paired 95%, one seed: the interval covers the choice of test sentences only, not training noise); " \
           "the interval holds 0 but is not inside ±1" in summary  # fmt: skip
    assert "It runs at 3.86× [3.47, 4.25] the batch-1 speed and 2.70× the large-batch throughput of our AT greedy " \
           "(one seed; 95% intervals, at least the A/A noise floor)" in summary  # no throughput interval recorded
    # dialect: [-13.0, -8.1] excludes 0; p is against greedy, Holm 0.0004
    assert "`dialect-nat / parallel` (NAT, on the references, one pass; 41.87 BLEU), 10.53 BLEU behind it: -10.53 BLEU [-13.00, -8.10] (paired 95%, one seed: " \
           "the interval covers the choice of test sentences only, not training noise), and the paired test " \
           "agrees (Holm p < 0.05)" in summary  # fmt: skip
    assert "On `dialect`: Variant mixing (sentences whose words come from more than one target variant): " \
           "AT `dialect-at / greedy` 2.0%; NAT `dialect-nat / parallel` 31.5%." in summary  # fmt: skip
    # length-beam-3 (3.01× [2.71, 3.31], 35.20) is beaten by mask-predict-4 (3.86× [3.47, 4.25], 35.50):
    # no worse in BLEU, faster beyond both intervals
    assert "Not clearly beaten in both BLEU and batch-1 speed-up over AT greedy (NAT first, fastest first): " \
           "`copy-ctc / ctc`, `copy-cmlm-kd / mask-predict-4`, `copy-at / greedy`, `copy-at / beam5`." in summary
    assert "5 of 6 cells finished; 1 failed" in summary
    assert f"To reproduce: `{fx.COMMAND}`" in md


def test_several_seeds_give_mean_and_spread_and_claims_only_beyond_it(tmp_path):
    root = fx.build_results(tmp_path)
    table = fx.with_seeds(fx.results_frame(), {2: 1.0, 3: -1.0})  # BLEU 37.12 / 38.12 / 36.12 ...
    table.to_csv(root / "results.csv", index=False)
    fx.comparisons(n_seeds=3).assign(diff_ci_low=[-4.0, -12.1], diff_ci_high=[-1.1, -9.0]).to_csv(
        root / "comparisons.csv", index=False)
    md = write_report(root, figures=False)[0].read_text(encoding="utf-8")
    copy = tables_under(md, "Task `copy`")[0]
    at = row_of(copy, "copy-at-s1", "greedy")
    assert at["Seeds"] == "3" and at["BLEU"] == "37.12 ± 1.00"
    summary = summary_of(md)
    # copy: the interval [-4.0, -1.1] excludes 0, but Holm p = 0.08 > 0.05 in a seed: not resolved, not "tied"
    assert "`copy-cmlm-kd / mask-predict-4` (CMLM, distilled, mask-predict 4; 35.50 BLEU, 3 seeds), not resolved: -2.55 BLEU [-4.00, -1.10] " \
           "(paired 95%, 3 seeds; Student's t over the seeds, test-sentence variance added); the paired test does not agree in " \
           "every seed" in summary
    assert "10.53 BLEU behind it: -10.53 BLEU [-12.10, -9.00] (paired 95%, 3 seeds; Student's t over the seeds, test-sentence " \
           "variance added), and the paired test agrees (Holm p < 0.05 in every seed)" in summary
    assert len(pd.read_csv(root / "results.csv")) == 3 * len(fx.ROWS)  # per-seed rows stay


def test_every_figure_is_a_png_linked_from_the_markdown(report):
    root, md, _ = report
    for name in FIGURES:
        path = root / "figures" / f"{name}.png"
        width, height = png_size(path.read_bytes())
        assert width > 100 and height > 100
        assert f"](figures/{name}.png)" in md
    assert "not drawn" not in md and "Note: Headline table: intervals are 95%" in md


def test_html_is_self_contained_and_shows_the_same_tables(report):
    root, md, html = report
    content = html_content(html)
    assert len(content.srcs) == len(FIGURES)
    for src in content.srcs:
        assert src.startswith("data:image/png;base64,")
        png_size(base64.b64decode(src.split(",", 1)[1]))
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|figures/)""", html)
    assert "<link" not in html and not re.search(r"<script[^>]*\bsrc", html)  # inline script only
    markdown = [rows for _, rows in md_tables(md)]
    assert len(content.tables) == len(markdown)
    for html_rows, md_rows in zip(content.tables, markdown):
        assert [dict(zip(html_rows[0], r)) for r in html_rows[1:]] == md_rows
    assert "37.12 [35.80, 38.44]" in html


def test_samples_side_by_side_first_indices_at_first(report):
    _, md, _ = report
    (copy,) = tables_under(md, "Task `copy`")[1:]
    assert [r["#"] for r in copy] == ["0", "1", "2"]
    assert list(copy[0])[:4] == ["#", "Source", "Reference", "copy-at-s1 / greedy"]
    assert copy[1]["Reference"] == "ref copy source 1"
    assert copy[2]["copy-ctc-s1 / ctc"] == "hyp copy-ctc-s1 ctc 2"


def test_samples_of_several_seeds_show_one_seeds_systems_each_decoder_before_any_gets_a_second_column():
    """The deep grid's first sample table showed 8 columns of AT seeds and hid every NAT in a note: the
    columns should compare systems. One seed's (the one with the most systems), each cell's first strategy
    before any cell's second, AT first; the other seeds after (named in the note when they do not fit)."""
    from atnat.experiments.reporting.report import MAX_SAMPLE_SYSTEMS, samples_tables
    strategies = {"at": ["greedy", "beam5"], "cmlm": ["mp1", "mp4", "mp10"], "ctc": ["ctc"]}
    cells = [("a-cmlm-s1", 1), ("a-at-s1", 1), ("a-cmlm-s2", 2), ("a-at-s2", 2), ("a-ctc-s2", 2)]
    table = pd.DataFrame([{"cell": c, "task": "a", "seed": seed, "decoder": c.split("-")[1],
                           "autoregressive": c.split("-")[1] == "at", "p_baseline": f"a-at-s{seed} / beam5"}
                          for c, seed in cells])
    samples = pd.DataFrame([{"cell": c, "strategy": st, "index": i, "source": f"s{i}", "reference": f"r{i}",
                             "hypothesis": f"{c} {st} {i}"}
                            for c, _ in cells for st in strategies[c.split("-")[1]] for i in range(3)])
    ((task, frame, hidden),) = samples_tables(samples, table)
    order = ["a-at-s2 / greedy", "a-cmlm-s2 / mp1", "a-ctc-s2 / ctc", "a-at-s2 / beam5", "a-cmlm-s2 / mp4",
             "a-cmlm-s2 / mp10", "a-at-s1 / greedy", "a-cmlm-s1 / mp1", "a-at-s1 / beam5", "a-cmlm-s1 / mp4",
             "a-cmlm-s1 / mp10"]
    assert MAX_SAMPLE_SYSTEMS == 8
    assert list(frame.columns) == ["#", "Source", "Reference", *order[:8]] and hidden == order[8:]
    assert frame["a-ctc-s2 / ctc"].tolist() == ["a-ctc-s2 ctc 0", "a-ctc-s2 ctc 1", "a-ctc-s2 ctc 2"]
    # a precision control declared last (an AT, like the baseline): after every system compared, in its round
    table = pd.concat([table, pd.DataFrame([{"cell": "a-at32-s2", "task": "a", "seed": 2, "decoder": "at",
                                             "autoregressive": True, "p_baseline": "a-at-s2 / beam5"}])])
    samples = pd.concat([samples, pd.DataFrame([{"cell": "a-at32-s2", "strategy": st, "index": i, "source": f"s{i}",
                                                 "reference": f"r{i}", "hypothesis": "x"}
                                                for st in strategies["at"] for i in range(3)])])
    ((task, frame, hidden),) = samples_tables(samples, table)
    assert list(frame.columns)[3:] == ["a-at-s2 / greedy", "a-cmlm-s2 / mp1", "a-ctc-s2 / ctc", "a-at32-s2 / greedy",
                                       "a-at-s2 / beam5", "a-cmlm-s2 / mp4", "a-at32-s2 / beam5", "a-cmlm-s2 / mp10"]


def test_environment_table(report):
    _, md, _ = report
    ((env_rows),) = tables_under(md, "Environment")
    env = {r["Field"]: r["Value"] for r in env_rows}
    assert env["torch"] == "2.13.0" and env["device"] == "cpu (2 threads)"
    assert env["wall_time_s"] == "754 s (12.6 min)"


def test_the_training_compute_is_summed_over_finished_cells(report):
    _, md, _ = report
    cells = fx.results_frame().query("status == 'ok'")["cell"].nunique()  # 42 s of training each
    assert f"Compute: training took {cells * 42 / 60:.1f} min of wall time summed over {cells} cells" in md


def test_missing_optional_files_give_notes_and_remove_stale_figures(tmp_path):
    optional = [f"curves/{name}.csv" for name in fx.CURVE_FILES] + ["samples.csv", "environment.json"]
    root = fx.build_results(tmp_path, omit=optional)
    (root / "figures").mkdir()
    (root / "figures" / "attention.png").write_bytes(PNG_MAGIC)  # from an earlier, fuller run
    md = write_report(root)[0].read_text(encoding="utf-8")
    notes = [line for line in md.splitlines() if line.startswith("> Note:")]
    assert len(notes) == len(fx.CURVE_FILES) + 1 + 2 + 1  # one per curve figure, samples, environment (+ reproduce),
    # and the headline table's note on its intervals
    for name in fx.CURVE_FILES:
        assert any(n.startswith("> Note: Figure not drawn: ") and n.endswith(f"; no data for it in curves/{name}.csv.")
                   for n in notes)
    assert sorted(p.stem for p in (root / "figures").iterdir()) == ["quality_vs_speed", "speed"]
    assert "37.12 [35.80, 38.44]" in md


def test_header_only_curve_file_counts_as_empty(tmp_path):
    others = [f"curves/{name}.csv" for name in fx.CURVE_FILES if name != "iterations"]
    root = fx.build_results(tmp_path, omit=others)
    (root / "curves" / "iterations.csv").write_text("cell,strategy,iteration,bleu\n")
    md = write_report(root)[0].read_text(encoding="utf-8")
    assert "no data for it in curves/iterations.csv." in md
    assert not (root / "figures" / "iterations.png").exists()


def test_missing_results_csv_raises(tmp_path):
    root = fx.build_results(tmp_path, omit=["results.csv"])
    with pytest.raises(AtnatError, match=r"results\.csv not found"):
        write_report(root)


@pytest.mark.parametrize("column", ["bleu", "status", "speedup_vs_at"])
def test_missing_required_column_raises_naming_it(tmp_path, column):
    root = fx.build_results(tmp_path, drop_columns=[column])
    with pytest.raises(AtnatError, match=rf"results\.csv: missing required column\(s\) {column};"):
        load_results(root)


def test_malformed_optional_file_raises_naming_it(tmp_path):
    root = fx.build_results(tmp_path)
    fx.curves()["attention"].drop(columns=["weight"]).to_csv(root / "curves" / "attention.csv", index=False)
    with pytest.raises(AtnatError, match=r"attention\.csv: missing required column\(s\) weight"):
        load_results(root)


def test_non_numeric_value_raises_naming_column_and_row(tmp_path):
    root = fx.build_results(tmp_path)
    table = fx.results_frame().astype({"bleu": object})
    table.loc[2, "bleu"] = "n/a?"
    table.to_csv(root / "results.csv", index=False)
    with pytest.raises(AtnatError, match=r"column bleu must be numeric; data row 3 has 'n/a\?'"):
        load_results(root)


def test_pareto_front_exact_points():
    df = pd.DataFrame(
        {"name": ["a", "b", "c", "d", "e", "f", "g", "h"],
         "x": [1.0, 2.0, 2.0, 3.0, 0.5, 3.0, None, 1.0],
         "y": [5.0, 4.0, 3.0, 1.0, 5.0, 1.0, 9.0, 4.0]}  # fmt: skip
    )
    front = pareto_front(df, "x", "y")
    # c < b in y at equal x; e < a in x at equal y; f duplicates d (both kept); g has no x; h < a
    assert list(front["name"]) == ["a", "b", "d", "f"]
    assert list(front.index) == [0, 1, 3, 5]  # original rows, unchanged
    assert pareto_front(df.iloc[:0], "x", "y").empty


def test_summary_without_at_baseline_or_speedups(tmp_path):
    root = fx.build_results(tmp_path)
    table = fx.results_frame()
    table = table[table["decoder"] != "at"].assign(speedup_vs_at=None, throughput_speedup_vs_at=None)
    table.to_csv(root / "results.csv", index=False)
    summary = judging.summary(load_results(root))
    assert summary.startswith("On `copy`: there is no AT baseline; the best NAT system is "
                              "`copy-cmlm-kd / mask-predict-4` (CMLM, distilled, mask-predict 4; 35.50 BLEU).")  # fmt: skip
    assert "It runs at" not in summary and "Not clearly beaten" not in summary
    assert summary.endswith("3 of 4 cells finished; 1 failed (listed below).")


def test_markdown_table_escapes_pipes_newlines_and_tags():
    frame = pd.DataFrame({"a|b": ["x | y", "<unk> z\nw"], "p": ["<0.001", "1"]})
    assert markdown_table(frame).splitlines() == [
        "| a\\|b | p |", "|---|---|", "| x \\| y | <0.001 |", "| \\<unk> z w | 1 |"]


def test_the_validation_curve_comes_from_the_training_log_latest_value_per_step(tmp_path):
    from atnat.experiments.reporting.table import validation_curve

    log = tmp_path / "metrics.csv"
    log.write_text("attempt,epoch,step,train/loss,val/bleu,val/loss\n"
                   "1,0,10,5.0,,\n1,0,20,4.0,3.5,4.5\n1,0,40,3.0,7.0,3.9\n"  # killed after step 40
                   "2,0,40,3.0,7.5,3.8\n2,0,60,2.0,9.0,3.5\n")  # resumed: step 40 validated again
    curve = validation_curve(log)
    assert curve.to_dict("list") == {"step": [20, 40, 60], "val_loss": [4.5, 3.8, 3.5], "val_bleu": [3.5, 7.5, 9.0]}
    log.write_text("attempt,epoch,step,train/loss\n1,0,10,5.0\n")
    assert validation_curve(log) is None and validation_curve(tmp_path / "absent.csv") is None


def test_environment_records_the_cpu_model_and_its_vector_instructions(tmp_path):
    import yaml

    from atnat.experiments.reporting.environment import cpu_info, environment
    from atnat.experiments.running.grid import load_grid

    fake = tmp_path / "cpuinfo"
    fake.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16\n"
                    "processor\t: 1\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16\n")
    info = cpu_info(fake)
    assert info["cpu_model"] == "AMD EPYC 9R14" and info["cpu_flags"] == "avx512f avx512_bf16 avx2 fma"
    assert info["torch_cpu_capability"] in {"DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256", ""}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({"name": "g", "base": {"task": {"name": "copy"},
                                                                            "decoder": {"name": "at"}}}))
    env = environment(load_grid(tmp_path / "g.yaml"), 12.5, "atnat run g.yaml")
    assert {"cpu_model", "cpu_flags", "torch_cpu_capability"} <= set(env) and env["wall_time_s"] == 12.5
    assert env["git_dirty"] in (True, False, None)  # None outside a git checkout
    import torch

    if not torch.cuda.is_available():  # the report writer's threads, in words ("1 threads" once)
        threads = torch.get_num_threads()
        try:
            torch.set_num_threads(1)
            assert environment(load_grid(tmp_path / "g.yaml"), 1.0, "x")["device"].endswith(", 1 thread)")
            torch.set_num_threads(2)
            assert environment(load_grid(tmp_path / "g.yaml"), 1.0, "x")["device"].endswith(", 2 threads)")
        finally:
            torch.set_num_threads(threads)


def test_curves_of_several_seeds_get_a_band_of_their_range(tmp_path):
    import pandas as pd

    from atnat.experiments.reporting.figures import iterations, seed_band, validation

    table = pd.DataFrame({"cell": ["c-s1", "c-s2"], "family": ["c", "c"], "task": ["t", "t"]})
    curve = pd.DataFrame({"cell": ["c-s1", "c-s2"] * 2, "strategy": "mask-predict-4", "iteration": [1, 1, 2, 2],
                          "bleu": [30.0, 32.0, 35.0, 36.0]})
    assert png_size(iterations(curve, table, tmp_path / "it.png").read_bytes())[0] > 100
    steps = pd.DataFrame({"cell": ["c-s1", "c-s2"] * 2, "step": [10, 10, 20, 20], "val_loss": [4.0, 4.2, 3.0, 3.1],
                          "val_bleu": float("nan")})
    assert png_size(validation(steps, table, tmp_path / "val.png").read_bytes())[0] > 100  # loss without BLEU

    one = pd.DataFrame({"cell": ["a-s1", "b-s1"], "system": ["a", "b"], "iteration": [1, 1]})
    several = pd.DataFrame({"cell": ["a-s1", "a-s2"], "system": ["a", "a"], "iteration": [1, 1]})
    assert seed_band(one, ["system", "iteration"]) is None
    assert seed_band(several, ["system", "iteration"]) == ("pi", 100)


def test_rows_timed_in_different_sessions_are_named_under_their_table(tmp_path):
    import pandas as pd

    root = fx.build_results(tmp_path)
    table = pd.read_csv(root / "results.csv")
    table["timing_session"] = "2026-11-22 20:00:00 UTC"
    table.loc[table["cell"] == "copy-ctc-s1", "timing_session"] = "2026-11-20 09:00:00 UTC"
    table.to_csv(root / "results.csv", index=False)
    md = write_report(root, figures=False)[0].read_text(encoding="utf-8")
    copy = md.split("### Task `copy`")[1].split("### Task `dialect`")[0]
    assert "Speed was measured in 2 timing sessions" in copy
    assert "(2026-11-20 09:00:00 UTC: `copy-ctc-s1`; 2026-11-22 20:00:00 UTC: `copy-" in copy
    assert "timing sessions" not in md.split("### Task `dialect`")[1]


def test_equivalent_only_when_the_whole_interval_is_inside_the_margin():
    from atnat.experiments.reporting.judging import _verdict

    nat = pd.Series({"n_seeds": 3, "bleu": 30.1, "bleu_sd": 0.35, "p_baseline": "", "strategy": "ctc"})
    at = pd.Series({"n_seeds": 3, "bleu": 30.4, "bleu_sd": 0.3, "strategy": "beam5"})
    inside = pd.Series({"bleu_diff": -0.3, "diff_ci_low": -0.8, "diff_ci_high": 0.2, "n_seeds": 3})
    wider = inside.copy()
    wider["diff_ci_low"] = -1.4
    assert _verdict(nat, at, inside, 1.0).startswith("equivalent to it within ±1 BLEU: -0.30 BLEU [-0.80, +0.20]")
    assert _verdict(nat, at, wider, 1.0).startswith("not resolved: -0.30 BLEU [-1.40, +0.20]")
    assert "tied" not in _verdict(nat, at, None, 1.0) and "not resolved" in _verdict(nat, at, None, 1.0)
    far = nat.copy()  # no paired interval, but the means' 95% intervals are disjoint: a conservative claim
    far["bleu"] = 28.0  # 28.0 +- 4.30 * 0.35 / sqrt(3) = [27.13, 28.87] against [29.66, 31.14]
    assert _verdict(far, at, None, 1.0).startswith("2.40 BLEU behind it, beyond both systems' 95% intervals of the "
                                                   "means (Student's t over seeds)")
    near = nat.copy()  # ranges [28.3, 29.5] and [30.1, 30.7] would be disjoint; 3 seeds' t intervals are not
    near[["bleu", "bleu_sd"]] = [28.9, 0.6]
    assert "not resolved" in _verdict(near, at, None, 1.0)


def test_the_mixing_sentence_stays_short_with_many_systems():
    """The quickstart's dialect summary listed the mixing of all 19 systems inline; now each
    family's range with the systems at its ends, and the rest left to the overview's column."""
    from atnat.experiments.reporting.judging import _mixing

    rates = {"nat / parallel": 0.667, "nat-kd / parallel": 0.15, "cmlm / mask-predict-10": 0.0,
             "cmlm / mask-predict-1": 0.76, "ctc / ctc": 0.007}
    rows = [{"family": "at", "strategy": "greedy", "decoder": "at", "mixing_rate": 0.0},
            {"family": "at", "strategy": "beam5", "decoder": "at", "mixing_rate": 0.0},
            {"family": "at-ga", "strategy": "greedy", "decoder": "at", "mixing_rate": 0.0}]
    rows += [{"family": k.split(" / ")[0], "strategy": k.split(" / ")[1], "decoder": k.split("-")[0].split(" ")[0],
              "mixing_rate": v} for k, v in rates.items()]
    text = _mixing(pd.DataFrame(rows).assign(autoregressive=lambda d: d.decoder == "at"))
    assert text == (" Variant mixing (sentences whose words come from more than one target variant): AT 0.0% (all 3 "
                    "systems); NAT from `cmlm / mask-predict-10` 0.0% to `cmlm / mask-predict-1` 76.0% "
                    "(5 systems) (every system: the overview's Mixing column).")


def test_a_cell_without_results_is_not_run_not_failed(tmp_path):
    """A partial grid (cells still training or not started) reports them as not run, never as failed."""
    root = fx.build_results(tmp_path)
    table = fx.results_frame()
    waiting = table.iloc[[0]].assign(cell="copy-nat-s9", status="not run", error="", strategy=None, bleu=None)
    pd.concat([table, waiting]).to_csv(root / "results.csv", index=False)
    env = json.loads((root / "environment.json").read_text())
    (root / "environment.json").write_text(json.dumps(env | {"results_rows": len(table) + 1}))
    write_report(root, figures=False)
    md = (root / "report.md").read_text()
    assert "5 of 7 cells finished; 1 failed (listed below); 1 not run yet (listed below)." in md
    ((failed,),) = tables_under(md, "Failed cells")  # the failed cell alone
    assert failed["Cell"] == fx.FAILED_CELL
    assert "### Cells not run yet" in md and "`copy-nat-s9`" in md.split("### Cells not run yet")[1]


def test_summary_names_the_nat_systems_within_reach_of_the_best_with_their_speeds(tmp_path):
    """The highest of several noisy NAT means is not a winner by itself: every other NAT whose paired
    interval against the best one holds 0 (ranking.csv, relation `reach`) is named with that difference
    and its own speed (the review's case: CMLM-10 a hair ahead of a one-pass system 9x faster); one
    clearly below when paired is not; a speed below AT greedy's reads slower, every ratio with its
    interval; a difference paired on fewer seeds than the means says so."""
    root = fx.build_results(tmp_path)
    table = fx.with_seeds(fx.results_frame(), {2: 0.5, 3: -0.5})
    slow = (table["cell"].str.startswith("copy-cmlm-kd")) & (table["strategy"] == "mask-predict-4")
    table.loc[slow, ["speedup_vs_at", "speedup_ci_low", "speedup_ci_high"]] = [0.45, 0.43, 0.47]
    table = table[~((table["cell"] == "copy-ctc-s3"))]  # CTC: 2 seeds, the AT 3
    table.to_csv(root / "results.csv", index=False)
    comparisons = pd.DataFrame([
        {"task": "copy", "system": "copy-cmlm-kd / mask-predict-4", "against": "copy-at / beam5", "n_seeds": 3,
         "bleu_diff": -2.55, "diff_ci_low": -3.1, "diff_ci_high": -2.0, "method": "3 seeds"},
        {"task": "copy", "system": "copy-cmlm-kd / length-beam-3", "against": "copy-at / beam5", "n_seeds": 3,
         "bleu_diff": -2.85, "diff_ci_low": -3.4, "diff_ci_high": -2.3, "method": "3 seeds"},
        {"task": "copy", "system": "copy-ctc / ctc", "against": "copy-at / beam5", "n_seeds": 2,
         "bleu_diff": -7.8, "diff_ci_low": -8.6, "diff_ci_high": -7.0, "method": "2 seeds"}])
    comparisons.to_csv(root / "comparisons.csv", index=False)

    def reach(against, bleu, n_seeds, diff, low, high):
        return {"task": "copy", "test_set": "main", "split_name": "test", "relation": "reach",
                "system": "copy-cmlm-kd / mask-predict-4", "against": against, "system_bleu": 35.5,
                "against_bleu": bleu, "n_seeds": n_seeds, "bleu_diff": diff, "diff_ci_low": low, "diff_ci_high": high,
                "verdict": "ahead" if low > 0 else "not resolved"}
    pd.DataFrame([reach("copy-cmlm-kd / length-beam-3", 35.2, 3, 0.3, -0.4, 1.0),
                  reach("copy-ctc / ctc", 30.5, 2, 5.0, 1.2, 8.8)]).to_csv(root / "ranking.csv", index=False)
    summary = judging.summary(load_results(root))
    copy = summary.split("On `dialect`")[0]
    assert "the best NAT system is `copy-cmlm-kd / mask-predict-4` (CMLM, distilled, mask-predict 4; 35.50 BLEU, 3 seeds)" in copy
    assert "It runs at 0.45× [" in copy and "(slower) the batch-1 speed" in copy and "(3 seeds; 95% intervals" in copy
    assert ("Within reach of the best NAT (not clearly below it: its paired 95% interval against the best NAT does "
            "not lie below 0, or, where the two are not paired, their 95% intervals overlap): `copy-cmlm-kd / length-beam-3` (35.20 BLEU, -0.30 [-1.00, +0.40] against the best NAT, paired on "
            "3 seeds, 3.01× [") in copy
    assert "`copy-ctc / ctc` (" not in copy.split("Within reach")[1].split("Not clearly beaten")[0]  # clearly below
    (root / "ranking.csv").unlink()  # a folder from before the `reach` pairs: their own intervals, said so
    legacy = judging.summary(load_results(root)).split("On `dialect`")[0]
    assert ("`copy-cmlm-kd / length-beam-3` (35.20 BLEU: not paired with the best NAT; its 95% interval overlaps "
            "the best one's, 3 seeds, 3.01× [") in legacy
    table.loc[table["cell"].str.startswith("copy-cmlm-kd") & (table["strategy"] == "mask-predict-4"), "bleu"] = 29.0
    comparisons.loc[2, ["bleu_diff", "diff_ci_low", "diff_ci_high"]] = [-3.0, -3.6, -2.4]
    comparisons.to_csv(root / "comparisons.csv", index=False)
    table.loc[table["cell"].str.startswith("copy-ctc"), "bleu"] = 35.3
    table.to_csv(root / "results.csv", index=False)
    summary = judging.summary(load_results(root))
    assert "the best NAT system is `copy-ctc / ctc` (CTC, on the references, one pass; 35.30 BLEU, 2 seeds)" in summary
    assert "(paired 95%, 2 seeds; Student's t over the seeds, test-sentence variance added; paired on the 2 seeds both have)" \
           in summary


def test_summary_gives_the_best_nat_against_the_at_on_every_test_set(tmp_path):
    """comparisons.csv holds the difference on each test year; the summary states each beside the main one."""
    root = fx.build_results(tmp_path)
    main = fx.comparisons().assign(test_set="main")
    later = main.assign(test_set="test2017", bleu_diff=[-3.1, -9.9], diff_ci_low=[-4.0, -11.0], diff_ci_high=[-2.2, -8.8])
    pd.concat([main, later]).to_csv(root / "comparisons.csv", index=False)
    summary = judging.summary(load_results(root))
    assert "not resolved: -2.55 BLEU [-5.10, +0.20]" in summary  # the verdict is the main test set's
    assert "; on test2017 -3.10 BLEU [-4.00, -2.20] (paired 95%, 1 seed). It runs at 3.86×" in summary
    assert "; on test2017 -9.90 BLEU [-11.00, -8.80] (paired 95%, 1 seed)" in summary


@pytest.mark.slow
def test_the_speed_note_states_both_noise_floors_and_an_older_folder_without_the_throughput_one(tmp_path):
    """Review D7: the note gave one A/A floor, measured on batch-1 latency, for every speed ratio. Each
    kind's floor is stated now (the union over seeds); a results.csv from before the throughput floor
    still loads and renders, and says the latency floor stands in."""
    root = fx.build_results(tmp_path)
    table = pd.read_csv(root / "results.csv").assign(speed_noise_low=0.98, speed_noise_high=1.03)
    table.to_csv(root / "results.csv", index=False)
    md = write_report(root, figures=False)[0].read_text(encoding="utf-8")
    assert ("A/A noise floors of the speed ratios (the baseline timed twice, as two systems; over seeds, the widest): "
            "batch-1 latency [0.98, 1.03] for the batch-1 ratios; no throughput floor was measured, so the latency "
            "one stands in for the throughput ratios") in md
    assert "CTranslate2" not in md.split("A/A noise floors")[1].split("\n")[0]  # no CTranslate2 ratio: not named
    table = table.assign(throughput_noise_low=0.9, throughput_noise_high=1.1, speedup_vs_ct2=table["speedup_vs_at"])
    table.to_csv(root / "results.csv", index=False)
    md = write_report(root, figures=False)[0].read_text(encoding="utf-8")
    assert ("batch-1 latency [0.98, 1.03] for the batch-1 ratios; throughput [0.90, 1.10] for the throughput ratios "
            "(the CTranslate2 ratios too, each the floor of its kind: that of our baseline in the same session): a "
            "ratio inside its floor is not distinguishable from the A/A control") in md


def test_a_gpu_timing_with_its_a_a_floors_is_not_called_uncontrolled():
    """Seen in the first GPU grid's report: a GPU timing records no CPU thread count, and the note then
    said "no A/A control was timed, so the noise floor of the ratios is unknown" right before stating
    the A/A floors that control measured."""
    from atnat.experiments.reporting.report import speed_note

    timing = "timing phase after training: ... on cuda:0 (NVIDIA H100 80GB HBM3)"
    gpu = pd.DataFrame({"timing_threads": [float("nan")] * 2, "speedup_vs_at": [1.0, 2.5], "speed_noise_low": [0.93, 0.95],
                        "speed_noise_high": [1.06, 1.04], "throughput_noise_low": [0.93, 0.9],
                        "throughput_noise_high": [1.1, 1.02]})
    note = speed_note(gpu, timing)
    assert note.startswith(f"Speed: {timing}; A/A noise floors of the speed ratios") and "unknown" not in note
    assert "batch-1 latency [0.93, 1.06] for the batch-1 ratios; throughput [0.90, 1.10]" in note
    resolved = speed_note(gpu.assign(timing_engine="auto=eager"), timing)
    assert resolved.startswith(f"Speed: {timing}; decoded as `auto=eager` (the rows' timing_engine); A/A noise")
    old = speed_note(gpu.drop(columns=["speed_noise_low", "speed_noise_high", "throughput_noise_low",
                                       "throughput_noise_high"]), timing)  # an older folder: no control timed
    assert old == f"Speed: {timing}; no A/A control was timed, so the noise floor of the ratios is unknown."


def test_a_nat_clearly_below_the_best_by_their_paired_difference_is_not_within_reach(tmp_path):
    """Intervals against the AT carry the teacher's seed noise twice; where ranking.csv pairs the two
    NAT systems directly, that paired difference decides (the interim deep grid: NPD-5 overlapped CTC's
    interval against the AT, but is behind it beyond noise when paired)."""
    root = fx.build_results(tmp_path)
    comparisons = pd.DataFrame([
        {"task": "copy", "system": "copy-cmlm-kd / mask-predict-4", "against": "copy-at / beam5", "n_seeds": 1,
         "bleu_diff": -2.55, "diff_ci_low": -5.1, "diff_ci_high": 0.2, "method": "one seed"},
        {"task": "copy", "system": "copy-cmlm-kd / length-beam-3", "against": "copy-at / beam5", "n_seeds": 1,
         "bleu_diff": -2.85, "diff_ci_low": -5.5, "diff_ci_high": -0.2, "method": "one seed"}])
    comparisons.to_csv(root / "comparisons.csv", index=False)
    within = judging.summary(load_results(root))
    assert "intervals overlap): `copy-cmlm-kd / length-beam-3` (35.20 BLEU: not paired" in within
    pd.DataFrame([{"task": "copy", "test_set": "main", "split_name": "test", "relation": "next",
                   "system": "copy-cmlm-kd / mask-predict-4", "against": "copy-cmlm-kd / length-beam-3",
                   "system_bleu": 35.5, "against_bleu": 35.2, "n_seeds": 1, "bleu_diff": 0.3, "diff_ci_low": 0.1,
                   "diff_ci_high": 0.5, "verdict": "ahead"}]).to_csv(root / "ranking.csv", index=False)
    assert "Within reach" not in judging.summary(load_results(root))


def test_the_ranking_table_shows_the_means_it_orders_by(tmp_path):
    """BLEU in the Ranking table is each system's mean over all its seeds (the order's key), not the
    mean over the seeds it shares with its neighbour (the interim deep grid showed CTC at its seed-1
    36.03 while ranked by its 2-seed mean 35.68)."""
    root = fx.build_results(tmp_path)
    table = fx.with_seeds(fx.results_frame(), {2: 1.0, 3: -0.4})
    table.to_csv(root / "results.csv", index=False)
    pd.DataFrame([{"task": "copy", "test_set": "main", "split_name": "test2016", "relation": "next",
                   "system": "copy-at / beam5", "against": "copy-cmlm-kd / mask-predict-4", "system_bleu": 38.05,
                   "against_bleu": 35.5, "n_seeds": 1, "bleu_diff": 2.55, "diff_ci_low": 1.0, "diff_ci_high": 4.0,
                   "verdict": "ahead"}]).to_csv(root / "ranking.csv", index=False)
    md = write_report(root, figures=False)[0].read_text(encoding="utf-8")
    (rows,) = tables_under(md, "Task `copy`, test2016")
    assert [(r["System"], r["BLEU"], r["Seeds paired"]) for r in rows] == [
        ("copy-at / beam5", "38.25", "1"), ("copy-cmlm-kd / mask-predict-4", "35.70", "–")]
    assert "no correction for the many pairs" in md


def test_a_compare_pair_without_a_result_is_named_not_measured(tmp_path):
    """The grid's compare: pairs are kept in environment.json; one with no paired result (a side not
    finished) is named as not measured, not silently absent."""
    root = fx.build_results(tmp_path)
    env = json.loads((root / "environment.json").read_text(encoding="utf-8"))
    env["compare"] = [["copy-cmlm-kd / mask-predict-4", "copy-cmlm-kd / length-beam-3"],
                      ["copy-ctc / ctc", "copy-nat-guided / parallel"]]
    (root / "environment.json").write_text(json.dumps(env), encoding="utf-8")
    pd.DataFrame([{"task": "copy", "test_set": "main", "split_name": "test", "relation": "compare",
                   "system": "copy-cmlm-kd / mask-predict-4", "against": "copy-cmlm-kd / length-beam-3",
                   "system_bleu": 35.5, "against_bleu": 35.2, "n_seeds": 1, "bleu_diff": 0.3, "diff_ci_low": -0.4,
                   "diff_ci_high": 1.0, "verdict": "not resolved"}]).to_csv(root / "ranking.csv", index=False)
    md = write_report(root, figures=False)[0].read_text(encoding="utf-8")
    assert "Not measured (1 of the 2 pairs: a side has no result, or the two share no seed): `copy-ctc / ctc` " \
           "against `copy-nat-guided / parallel`." in md


def test_every_name_of_the_quality_vs_speed_figure_fits_its_label_column(tmp_path):
    """Seen in the deep grid's interim figure: the label column beside each panel had a fixed width, so
    a long system name (`en-de-cmlm-kd / mask-predict-10-lb3-early_stop=true`) ran into the next panel
    and off the figure's right edge. The column is now as wide as its longest name."""
    from atnat.experiments.reporting.figures import quality_vs_speed_figure
    from atnat.experiments.reporting.results import load_results

    table = load_results(fx.build_results(tmp_path)).table
    long = "mask-predict-10-lb3-early_stop=true-length_beam=5-with-a-long-plugin-suffix"
    table.loc[table.index[-1], ["strategy", "strategy_name"]] = [long, "a-plugins-search"]  # named by its label
    fig = quality_vs_speed_figure(table)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)  # constrained layout places the axes
    panels = [ax for ax in fig.axes if ax.axison]
    columns = [ax for ax in fig.axes if not ax.axison]
    assert len(panels) == len(columns) == 2 * table["task"].nunique()  # two panels per task, each with its names
    for column in columns:
        names = [t for t in column.texts if t.get_text()]
        box = column.get_window_extent(renderer)
        starts = [p.get_window_extent(renderer) for p in panels]
        after = [b.x0 for b in starts if b.x0 > box.x0 and abs(b.y0 - box.y0) < 5]  # the next panel in its row
        right = min(after, default=fig.bbox.width)
        for text in names:
            extent = text.get_window_extent(renderer)
            assert extent.x1 <= right, (text.get_text(), extent.x1, right)  # neither over the next panel nor off the figure
    assert any(long in t.get_text() for column in columns for t in column.texts)


def test_the_figure_plots_the_tables_bleu_means_and_rings_the_summarys_front():
    """The deep grid's interim figure dropped the rows of seed 1 (its weights lost before it was timed)
    before averaging: its BLEU means were over 2 seeds where the tables' are over 3, and with two seeds'
    wide intervals it ringed a system (`en-de-cmlm-kd / mask-predict-1-lb3`) the summary's front leaves
    out. BLEU is now each system's mean over all its seeds, speed over the seeds timed, and the ringed
    points are the summary's front."""
    from matplotlib.collections import PathCollection

    from atnat.experiments.reporting.aggregate import aggregate_seeds, robust_front
    from atnat.experiments.reporting.figures import _ok, quality_vs_speed_figure

    table = _ok(fx.with_seeds(fx.results_frame(), {2: 1.0, 3: 2.0}))
    speeds = [c for c in table.columns if c.startswith(("speedup", "throughput", "speed_"))]
    table.loc[table["seed"] == 1, speeds] = float("nan")  # seed 1 never timed
    fig = quality_vs_speed_figure(table)
    panels = [ax for ax in fig.axes if ax.axison]
    for task, ax in zip(dict.fromkeys(table["task"]), panels[::2]):  # the batch-1 panel of each task
        agg = aggregate_seeds(table[table["task"] == task])
        timed = agg.dropna(subset=["speedup_vs_at"])
        drawn = sorted(round(float(c.lines[0].get_ydata()[0]), 6) for c in ax.containers)
        assert drawn == sorted(round(float(b), 6) for b in timed["bleu"])  # the 3-seed means of the tables
        (rings,) = [c for c in ax.collections if isinstance(c, PathCollection)]
        front = robust_front(agg, "speedup_vs_at", "bleu")
        assert sorted(map(tuple, rings.get_offsets().round(6).tolist())) == sorted(
            zip(front["speedup_vs_at"].round(6), front["bleu"].round(6)))


def test_a_speed_interval_holding_1_says_on_which_side_its_mean_lies():
    """The interim deep grid called NPD-5's 0.71× [0.39, 1.29] "not faster beyond noise", as if it might
    be faster; both timed seeds were slower beyond their own intervals. A mean below 1 reads slower on
    the mean, above 1 faster on the mean, neither beyond noise."""
    slow = pd.Series({"speedup_vs_at": 0.71, "speedup_ci_low": 0.39, "speedup_ci_high": 1.29, "n_seeds": 1})
    fast = pd.Series({"speedup_vs_at": 1.20, "speedup_ci_low": 0.78, "speedup_ci_high": 1.87, "n_seeds": 1})
    assert judging._ratio(slow, "speedup_vs_at") == "0.71× [0.39, 1.29] (slower on the mean, not beyond noise)"
    assert judging._ratio(fast, "speedup_vs_at") == "1.20× [0.78, 1.87] (faster on the mean, not beyond noise)"
    assert judging._ratio(pd.Series({**slow, "speedup_ci_high": 0.9}), "speedup_vs_at") == "0.71× [0.39, 0.90] (slower)"


def test_a_session_whose_a_a_control_excluded_1_is_named_in_the_speed_note():
    """The interim deep grid's throughput floor "[0.88, 1.07]" hid a session whose A/A interval was
    [0.884, 0.989]: the baseline timed against itself differed beyond noise. The note names it."""
    from atnat.experiments.reporting.report import speed_note

    rows = pd.DataFrame({"cell": ["x-s2", "x-cmlm-s3"], "timing_threads": [1, 1], "speedup_vs_at": [1.0, 1.9],
                         "speed_noise_low": [0.97, 0.98], "speed_noise_high": [1.02, 1.01],
                         "throughput_noise_low": [0.93, 0.884], "throughput_noise_high": [1.07, 0.989],
                         "timing_session": ["2026-11-26 16:19:06 UTC", "2026-11-26 18:04:32 UTC"]})
    note = speed_note(rows)
    assert ("the A/A control's own interval excluded 1 (the baseline timed against itself differed beyond its "
            "interval: a disturbed session, or the 1 in 20 a 95% interval misses by chance; its ratios may be off by "
            "as much) for throughput [0.88, 0.99] in the session of 2026-11-26 18:04:32 UTC (`x-cmlm-s3`)") in note
    assert "batch-1 latency [" not in note.split("excluded 1")[1]  # the latency controls held 1
    assert "excluded 1" not in speed_note(rows.assign(throughput_noise_high=1.07))


def test_a_grid_file_changed_since_the_run_is_not_offered_as_the_way_to_reproduce_it(tmp_path, monkeypatch):
    """The report names the command that made it; once the grid file's settings differ from the file as
    run (grid-as-run.yaml), it must not say that running the file reproduces the numbers."""
    root = fx.build_results(tmp_path / "results")
    grid = tmp_path / "experiments/grids/tinygrid.yaml"
    grid.parent.mkdir(parents=True)
    as_run = "# the grid as run\ntrain: {max_steps: 1000, average: last}\n"
    (root / "grid-as-run.yaml").write_text(as_run, encoding="utf-8")
    env = json.loads((root / "environment.json").read_text(encoding="utf-8"))
    (root / "environment.json").write_text(json.dumps({**env, "grid": "experiments/grids/tinygrid.yaml"}))
    monkeypatch.chdir(tmp_path)
    grid.write_text("# comments changed, settings not\ntrain: {max_steps: 1000, average: last}\n", encoding="utf-8")
    assert f"To reproduce: `{fx.COMMAND}`" in write_report(root, figures=False)[0].read_text(encoding="utf-8")
    grid.write_text("train: {max_steps: 2000, average: last}\n", encoding="utf-8")
    md = write_report(root, figures=False)[0].read_text(encoding="utf-8")
    assert "To reproduce" not in md
    assert f"Made by: `{fx.COMMAND}`. `experiments/grids/tinygrid.yaml` has changed since this run" in md
    assert "`grid-as-run.yaml` holds the settings behind them" in md


def test_a_one_seed_speed_interval_is_the_same_in_the_overview_as_in_the_headline(tmp_path):
    """The headline widened a one-seed speed interval to the A/A noise floor, the overview printed the recorded
    one: one quantity with two intervals in one report (en-fr CTC+GLAT throughput 1.37 [1.20, 1.46] vs [1.28, 1.46])."""
    root = fx.build_results(tmp_path)
    frame = pd.read_csv(root / "results.csv")
    frame["speed_noise_low"], frame["speed_noise_high"] = 0.5, 1.02  # a wide A/A floor
    frame.to_csv(root / "results.csv", index=False)
    md = write_report(root, figures=False)[0].read_text(encoding="utf-8")
    cmlm = row_of(tables_under(md, "Task `copy`")[0], "copy-cmlm-kd-s1", "mask-predict-4")
    assert cmlm[SPEED] == "3.86 [1.93, 4.25]"  # 3.86 x 0.5 below, the recorded 4.25 above
    assert "3.86× [1.93, 4.25]" in md.split("## ")[1]  # the verdict's


def test_one_tailed_p_values_of_an_older_results_folder_are_read_as_two_sided(tmp_path):
    """A results.csv written before the bootstrap's p was made two-sided holds sacreBLEU's one-tailed p: the
    report showed them, and gated its 'paired test agrees' on them, as if two-sided."""
    from atnat.experiments.reporting.report import write_report

    root = fx.build_results(tmp_path)
    table = pd.read_csv(root / "results.csv")
    current = load_results(root).table.set_index(["cell", "strategy"])[["bleu_p_vs_at", "bleu_p_holm"]]
    table.drop(columns=["bleu_p_sides"]).to_csv(root / "results.csv", index=False)  # an older atnat's
    older = load_results(root)
    doubled = older.table.set_index(["cell", "strategy"])[["bleu_p_vs_at", "bleu_p_holm"]]
    pd.testing.assert_frame_equal(doubled, (2 * current).clip(upper=1.0))
    write_report(root, figures=False)
    assert "this report doubles them into the two-sided p" in (root / "report.md").read_text()


def test_the_speed_note_names_the_weight_shapes_auto_packed():
    from atnat.experiments.reporting.report import speed_note

    part = pd.DataFrame({"timing_threads": [1.0, 1.0, 1.0], "speedup_vs_at": [1.0, 2.0, 1.5],
                         "timing_engine_packed": ["256->8000 from 64 rows", "none", float("nan")]})
    note = speed_note(part)
    assert "`auto`'s weight shapes on oneDNN's packed product (the rows' timing_engine_packed): 256->8000 from 64 rows / none" in note
    assert "packed" not in speed_note(part.drop(columns="timing_engine_packed"))


def test_tables_no_cell_has_data_for_any_more_are_removed_not_drawn_again(tmp_path):
    """A curve or sample table was written when some cell had data and never removed: a cell that failed or left
    the grid since was still drawn in the figures (and its samples shown)."""
    import json

    from atnat.experiments.reporting.table import tabulate

    run = tmp_path / "runs" / "at-s1"
    (run / "curves").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps(
        {"status": "ok", "rows": [{"strategy": "greedy", "strategy_name": "greedy", "bleu": 30.0}]}))
    pd.DataFrame({"position": [0, 1], "accuracy": [0.9, 0.8], "strategy": "greedy"}).to_csv(
        run / "curves" / "position_accuracy.csv", index=False)
    pd.DataFrame({"strategy": ["greedy"], "source": ["a"], "reference": ["b"], "hypothesis": ["c"]}).to_csv(
        run / "samples.csv", index=False)
    cells = [{"cell": "at-s1", "family": "at", "variant": "at", "task": "t", "decoder": "at", "autoregressive": True,
              "seed": 1, "layers": "1+1", "distilled": False, "guided_attention": False, "options": "", "teacher": ""}]
    tabulate(cells, tmp_path, n_bootstrap=10)
    assert (tmp_path / "curves" / "position_accuracy.csv").is_file() and (tmp_path / "samples.csv").is_file()
    (run / "metrics.json").write_text(json.dumps({"status": "failed", "error": "boom", "rows": []}))
    tabulate(cells, tmp_path, n_bootstrap=10)
    assert not (tmp_path / "curves" / "position_accuracy.csv").exists() and not (tmp_path / "samples.csv").exists()


def test_an_interval_beside_a_verdict_is_not_rounded_onto_zero():
    """"+0.35 BLEU [+0.00, +0.70]" beside "ahead": the interval seemed to touch the line its verdict says it stays off."""
    from atnat.experiments.reporting.judging import _verdict

    nat = pd.Series({"n_seeds": 1, "bleu": 30.35, "p_baseline": "", "strategy": "ctc"})
    at = pd.Series({"n_seeds": 1, "bleu": 30.0, "strategy": "beam5"})
    comparison = pd.Series({"bleu_diff": 0.35, "diff_ci_low": 0.004, "diff_ci_high": 0.70, "n_seeds": 1})
    text = _verdict(nat, at, comparison, 1.0)
    assert "ahead of it" in text and "[+0.004, +0.70]" in text
