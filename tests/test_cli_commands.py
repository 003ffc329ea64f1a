"""The command line describes itself: `atnat list` prints every option of every decoder, strategy
and task with its type, default and source comment, and whole descriptions; `atnat -h` and
`atnat bench -h` list the bench commands; `--results` says where results go."""
import dataclasses
import io
from dataclasses import dataclass, field

import pytest
from rich.console import Console

import atnat.decoding  # noqa: F401  (registers strategies)
from atnat.decoding.base import Strategy
from atnat.decoding.greedy import Greedy
from atnat.decoding.length_beam import LengthBeam
from atnat.experiments.cli import catalog
from atnat.experiments.cli import commands as cli
from atnat.experiments.data.tasks import CopyTask, SyntheticTask, Task
from atnat.models.decoders.cmlm import CMLMOptions


def listing(width=400) -> str:
    out = io.StringIO()
    catalog.print_catalog(Console(file=out, width=width))
    return out.getvalue()


def section(text: str, name: str) -> str:
    """The lines of one entry of the printed tree: from its name to the next entry of its kind."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line[4:].startswith(f"{name}  "))
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:4] in ("├── ", "└── ") or
                not lines[i].startswith(("│", " "))), len(lines))
    return "\n".join(lines[start:end])


def test_an_option_is_listed_with_type_default_and_comment():
    assert catalog.options(CMLMOptions) == [
        catalog.Option("length_max_offset", "int", "64", "length offsets |T - S| beyond this are clamped")]
    cmlm = section(listing(), "cmlm")
    assert "[parallel]" in cmlm and "length_max_offset: int = 64  length offsets |T - S| beyond this are clamped" in cmlm


def test_inherited_fields_and_comments_continued_on_the_next_line():
    opts = {o.name: o for o in catalog.options(Greedy)}  # fields of the LengthLimits mix-in
    window = opts["attention_window"]
    assert (window.type, window.default) == ("tuple[int, int] | None", "None")
    assert window.comment == ("decode-time monotonic cross-attention window (back, forward) around the "
                              "source position attended last; handed to the model's init_state")
    assert "attention_window: tuple[int, int] | None = None  decode-time" in section(listing(), "greedy")


def test_a_multi_line_description_is_printed_whole():
    paragraph = LengthBeam.__doc__.split("\n\n")[0]
    assert "\n" in paragraph.strip()  # the case the old one-line listing cut short
    whole = " ".join(paragraph.split())
    assert whole.endswith("(Gu et al. 2018's length beam without a teacher).")
    assert whole in section(listing(), "length-beam")


def test_descriptions_come_from_the_entry_or_an_ancestor_below_the_registry_base():
    class Undocumented(Strategy):
        def search(self, *a, **k):
            pass

    class Plain(SyntheticTask):
        pass

    assert catalog.description(Undocumented, Strategy) == ""  # not the base's "Base of all search strategies"
    assert catalog.description(Plain, Task) == " ".join(SyntheticTask.__doc__.split())
    assert catalog.description(CopyTask, Task).startswith("The target is the source")


def test_a_class_without_source_still_lists_types_and_defaults():
    built = dataclasses.make_dataclass("Built", [("n", int), ("xs", list, field(default_factory=lambda: [1]))])

    @dataclass
    class Written:
        a: int  # a required field
        b: str = "x"

    assert catalog.options(built) == [catalog.Option("n", "int", "required", ""),
                                      catalog.Option("xs", "list", "[1]", "")]
    assert catalog.options(Written) == [catalog.Option("a", "int", "required", "a required field"),
                                        catalog.Option("b", "str", "'x'", "")]


def test_atnat_list_prints_every_kind(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ("decoders", "strategies", "tasks", "mask-predict", "fertility", "length_max_offset",
                 "beam_size: int = 5", "vocab_size: int = 8000"):
        assert word in out


def help_text(argv, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        cli.parser().parse_args(argv)
    assert done.value.code == 0
    return capsys.readouterr().out


def test_bench_is_a_command_group_with_declared_options(capsys):
    top = help_text(["-h"], capsys)
    assert any(line.split()[:2] == ["bench", "speed"] for line in top.splitlines())
    bench = help_text(["bench", "-h"], capsys)
    commands = [line.split()[0] for line in bench.splitlines() if line.startswith("    ") and line[4] != " "]
    assert commands == ["decode", "train", "profile", "count", "data"]
    args = cli.parser().parse_args(["bench", "data", "--pairs", "300,400", "--baseline-max-pairs", "300"])
    assert (args.what, args.pairs, args.baseline_max_pairs, args.folder) == ("data", [300, 400], 300, None)
    args = cli.parser().parse_args(["bench", "decode", "--tiny", "--no-hf", "--quantize", "int8", "--out", "x.csv"])
    assert (args.fn, args.what, args.tiny, args.no_hf, args.quantize, args.out) == (
        cli.cmd_bench, "decode", True, True, "int8", "x.csv")
    args = cli.parser().parse_args(["bench", "profile", "--strategy", "ctc", "--out-len", "7"])
    assert (args.what, args.strategy, args.out_len, args.no_hf, args.sweep) == ("profile", "ctc", 7, True, False)
    with pytest.raises(SystemExit):  # a decode option is not a train option
        cli.parser().parse_args(["bench", "train", "--sweep"])


@pytest.mark.parametrize("command", ["run", "cell", "status"])
def test_results_help_names_the_folder_results_go_to(command, capsys):
    text = " ".join(help_text([command, "-h"], capsys).split())
    assert "--results DIR" in text and "DIR/<grid name>/ (default: results/)" in text


def test_list_shows_the_decoding_engines_and_their_options():
    text = listing()
    engines = text[text.index("engines    (--engine"):]
    for name in ("eager", "static", "packed", "inductor", "aoti", "auto"):
        assert f"{name}  " in engines
    assert "+bf16  [eager, static, packed, inductor, aoti]" in engines and "outputs may differ" in engines
    assert "+onednn  [packed]" in engines and "default auto" in engines


def test_the_engine_flag_defaults_to_auto_and_to_eager_beside_compile():
    from types import SimpleNamespace

    from atnat.core.errors import AtnatError
    from atnat.experiments.cli.commands import checked_engine

    assert checked_engine(SimpleNamespace(engine=None, compile=None)).label == "auto"
    assert checked_engine(SimpleNamespace(engine=None, compile="default")).label == "eager"  # was an error
    assert checked_engine(SimpleNamespace(engine="eager", compile="default")).label == "eager"
    with pytest.raises(AtnatError, match="--compile and --engine packed: give one"):
        checked_engine(SimpleNamespace(engine="packed", compile="default"))


def test_a_folder_given_as_a_grid_is_named_as_a_folder(tmp_path, capsys):
    from atnat.experiments.cli.commands import main

    assert main(["run", str(tmp_path)]) == 2
    assert f"{tmp_path} is a folder; give a YAML file" in capsys.readouterr().err


def test_a_file_given_as_the_run_folder_is_named(tmp_path, capsys):
    from atnat.experiments.cli.commands import main

    config = tmp_path / "run.yaml"
    config.write_text("name: r\ntask: {name: copy, n_train: 20, n_valid: 4, n_test: 4}\ndecoder: at\n")
    (tmp_path / "in.txt").write_text("x\n")
    assert main(["train", str(config), "--output-dir", str(tmp_path / "in.txt")]) == 2
    assert "in.txt is a file; give a folder for the run" in capsys.readouterr().err
    assert (tmp_path / "in.txt").read_text() == "x\n"


def test_status_of_a_grid_run_only_as_smoke_points_to_the_smoke_folder(tmp_path, capsys, monkeypatch):
    """After `atnat run --smoke`, `atnat status GRID` listed every cell as not started without a word of where
    the smoke run's cells are."""
    from tests.test_grid import TINY, write_grid

    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, TINY)
    (tmp_path / "res" / "tiny-smoke" / "runs").mkdir(parents=True)
    assert cli.main(["status", str(grid), "--results", "res"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"nothing has started in res/tiny; res/tiny-smoke holds the smoke run's cells: atnat status {grid} --smoke" in out
    (tmp_path / "res" / "tiny-smoke").rename(tmp_path / "res" / "tiny")
    assert cli.main(["status", str(grid), "--results", "res", "--smoke"]) == 0
    assert "res/tiny holds the full run's cells" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("decoder", ["ctc", "dag"])
def test_an_upsample_that_leaves_no_room_names_upsample_and_leaves_no_run_folder(tmp_path, capsys, decoder):
    """decoder.upsample 10,000: the refusal advised "set train.max_len to at most 0" without naming the upsample,
    and left a run folder holding only cell.lock where nothing had been."""
    from atnat.experiments.cli.commands import main

    config = tmp_path / "run.yaml"
    config.write_text(f"name: r\ntask: {{name: copy, n_train: 20, n_valid: 4, n_test: 4}}\n"
                      f"decoder: {{name: {decoder}, upsample: 10000}}\nmodel: {{d_model: 16, n_heads: 2, ffn_dim: 32}}\n")
    assert main(["train", str(config), "--output-dir", str(tmp_path / "run")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    # each decoder's option check refuses it first, by its range
    said = "upsample must be a number from 1 to 64" if decoder == "dag" else "upsample must be an integer from 1 to 64"
    assert said in err and "at most 0" not in err, err
    assert not (tmp_path / "run").exists()


def test_a_file_where_a_run_folder_goes_is_named_by_run_status_and_report(tmp_path, capsys, monkeypatch):
    """A file at runs/<cell>: `atnat run` trained nothing and said only "runs/at-s1: File exists", status showed the cell
    "not started", and `atnat report GRID.yaml` said "results folder not found" with no word of what it takes."""
    from tests.test_grid import TINY, write_grid

    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, TINY)
    (tmp_path / "res" / "tiny" / "runs").mkdir(parents=True)
    (tmp_path / "res" / "tiny" / "runs" / "at-s1").write_text("mine\n")
    monkeypatch.setattr("atnat.experiments.running.scheduler.run_one", lambda *a: pytest.fail("a cell ran"))
    for argv in (["run", str(grid), "--results", "res"], ["run", str(grid), "--results", "res", "--dry-run"]):
        assert cli.main(argv) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "res/tiny/runs/at-s1 is a file where the run folder of cell at-s1 goes" in err, err
    assert (tmp_path / "res" / "tiny" / "runs" / "at-s1").read_text() == "mine\n"
    assert cli.main(["status", str(grid), "--results", "res"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "blocked" in out and "not started" in out  # cmlm-kd-s1 has not started; at-s1 cannot
    assert cli.main(["report", str(grid)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{grid} is a grid file" in err and "results/tiny" in err and "--interim" in err, err


def test_option_name_is_refused_for_it_changed_the_strategy_silently():
    """`--option name=beam` decoded with beam (labelled beam5) while the message said greedy."""
    import argparse

    from atnat.core.errors import AtnatError
    from atnat.experiments.cli.commands import strategy_options

    args = argparse.Namespace(strategy="greedy", beam=None, iterations=None, option=["name=beam"])
    with pytest.raises(AtnatError, match="--option name=beam: a strategy is chosen with --strategy NAME"):
        strategy_options(args)
    assert strategy_options(argparse.Namespace(strategy="greedy", beam=None, iterations=None, option=["max_len_b=3"])) \
        == {"max_len_b": 3}


def test_data_prepare_takes_plugins_after_its_subcommand_too(tmp_path, capsys):
    """`atnat data prepare GRID --plugins M` (how every other command takes it) was refused as an unrecognised
    argument; the module is imported first, as with `atnat data --plugins M prepare GRID`."""
    from atnat.experiments.cli.commands import main

    config = tmp_path / "run.yaml"
    config.write_text("name: x\ntask: {name: copy, vocab: 6}\ndecoder: at\n")
    for argv in (["data", "prepare", str(config), "--plugins", "no_such_plugin_mod"],
                 ["data", "--plugins", "no_such_plugin_mod", "prepare", str(config)]):
        assert main(argv) == 2
        assert "cannot import plugin 'no_such_plugin_mod'" in capsys.readouterr().err
