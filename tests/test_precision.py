"""`train.precision: auto` trains in bf16 where the CPU does bf16 natively and records what it chose."""
import json

from atnat.experiments.config.precision import resolve_precision
from atnat.experiments.config.run import run_config_from_dict
from atnat.experiments.training.train import train
from tests.test_config_values import RUN


def test_auto_precision_is_resolved_and_recorded(tmp_path):
    cfg = run_config_from_dict({**RUN, "train": {**RUN["train"], "precision": "auto"}}, "t")
    train(cfg, tmp_path / "run")
    info = json.loads((tmp_path / "run" / "train.json").read_text())
    assert info["precision_asked"] == "auto"
    assert info["precision"] == resolve_precision("auto", "cpu") and info["precision"] in ("bf16-mixed", "32-true")
