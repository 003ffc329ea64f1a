"""A run whose training files changed after it trained is neither evaluated again nor resumed under the new
tokenizer those files give: its checkpoint's tokenizer is not the task's any more, and the test sentences would be
encoded into ids its weights never learnt (the run's settings name the files, not what is in them)."""
import pytest
import yaml

from atnat.experiments.cli.commands import main
from tests.test_extra_tests import tiny_grid_dir

OTHER_WORDS = "zebra quartz fjord glyph nymph crwth vex jinx kudzu oxbow"


def test_a_finished_run_whose_training_files_changed_is_not_evaluated_again(tmp_path, monkeypatch, capsys):
    data, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    grid = str(tmp_path / "g.yaml")
    assert main(["cell", grid, "at-s1", "--results", "res"]) == 0
    run = tmp_path / "res" / "two-tests" / "runs" / "at-s1"
    hyps = (run / "hyps" / "greedy.txt").read_text()
    for side in ("xx", "yy"):  # other training sentences: sentencepiece learns other pieces from them
        (data / f"train.{side}").write_text("".join(f"{OTHER_WORDS} {i}\n" for i in range(300)))
    spec["base"]["eval"]["n_bootstrap"] = 30  # an eval setting changed: the finished run is evaluated again
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    capsys.readouterr()
    assert main(["run", grid, "--results", "res", "--stale", "rerun"]) == 1
    error = (run / "error.log").read_text()
    assert "holds another tokenizer than the task's files give now" in error and "best.ckpt" in error
    assert (run / "hyps" / "greedy.txt").read_text() == hyps  # what it wrote before is kept


@pytest.mark.parametrize("last_damaged", [False, True])
def test_a_run_whose_training_files_changed_is_not_resumed_over_other_tokens(tmp_path, monkeypatch, last_damaged):
    data, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    grid = str(tmp_path / "g.yaml")
    assert main(["cell", grid, "at-s1", "--results", "res"]) == 0
    run = tmp_path / "res" / "two-tests" / "runs" / "at-s1"
    assert (run / "checkpoints" / "last.ckpt").is_file()
    for record in ("train.json", "metrics.json"):  # training not finished: the next start resumes from last.ckpt
        (run / record).unlink()
    if last_damaged:  # training would resume from best.ckpt instead: that one is compared
        with open(run / "checkpoints" / "last.ckpt", "ab") as f:
            f.write(b"x")
    for side in ("xx", "yy"):
        (data / f"train.{side}").write_text("".join(f"{OTHER_WORDS} {i}\n" for i in range(300)))
    assert main(["cell", grid, "at-s1", "--results", "res"]) == 1
    which = "best.ckpt" if last_damaged else "last.ckpt"
    assert f"its checkpoint {which} holds another tokenizer" in (run / "error.log").read_text()


def test_a_run_is_not_started_from_a_model_of_another_vocabulary(tmp_path, monkeypatch):
    """train.init_from compared parameter names and shapes only: a model of another tokenizer of the same size
    had its embeddings and output layer copied onto other pieces, recorded as 34 of 34 tensors copied."""
    data, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["cell", str(tmp_path / "g.yaml"), "at-s1", "--results", "res"]) == 0
    other = tmp_path / "other"
    other.mkdir()
    for path in data.iterdir():
        other.joinpath(path.name).write_text(path.read_text())
    for side in ("xx", "yy"):
        (other / f"train.{side}").write_text("".join(f"{OTHER_WORDS} {i}\n" for i in range(300)))
    spec["name"] = "elsewhere"
    spec.pop("goals"), spec.pop("compare")
    spec["base"]["task"]["data_dir"] = str(other)
    spec["cells"] = {"nat": {"decoder": "nat", "eval": {"strategies": ["parallel"]},
                             "train": {"init_from": str(tmp_path / "res" / "two-tests" / "runs" / "at-s1")}}}
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(spec))
    assert main(["cell", str(tmp_path / "e.yaml"), "nat-s1", "--results", "res"]) == 1
    error = (tmp_path / "res" / "elsewhere" / "runs" / "nat-s1" / "error.log").read_text()
    assert "that model's vocabulary is not this run's" in error
