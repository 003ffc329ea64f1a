"""Validation draws nothing from training's random state: a CMLM's validation loss hides random slots, and those
draws came from the training generator, so how often (and in how many batches) a run validated changed the masks
every later training step drew, and the validation loss moved between validations of the same weights."""
from __future__ import annotations

import torch

from atnat.experiments.data.batching import encode_split, make_loader
from tests.training import TINY_MODEL, make_task


def test_validation_leaves_trainings_random_state_and_draws_the_same_masks_each_time():
    from atnat.models.seq2seq import Seq2SeqModule

    task = make_task("reverse")
    src, tgt = task.splits["valid"]
    batch = next(iter(make_loader(encode_split(task.tokenizer, src, tgt, name="valid"), 512, shuffle=False)))
    torch.manual_seed(0)
    module = Seq2SeqModule(vocab_size=task.tokenizer.vocab_size, decoder="cmlm", model=TINY_MODEL).eval()
    logged = []
    module.log = lambda name, value, **_: logged.append((name, float(value)))
    results = []
    for training_seed in (1, 2):  # two places training's generator may stand at when a validation starts
        torch.manual_seed(training_seed)
        before = torch.get_rng_state()
        with torch.no_grad():
            module.validation_step(batch, 0)
        assert torch.equal(torch.get_rng_state(), before), "validation drew from training's random state"
        results.append(list(logged))
        logged.clear()
    assert results[0] == results[1] and any(name == "val/loss" for name, _ in results[0])
    with torch.no_grad():
        module.validation_step(batch, 1)  # another batch: its own draws
    assert dict(logged)["val/loss"] != dict(results[0])["val/loss"]


def test_a_cmlm_trains_the_same_weights_however_often_it_validates(tmp_path):
    """End to end (Lightning): the same run validating every 2 steps or once at the end ends with equal weights."""
    import yaml

    from atnat.experiments.cli.commands import main
    from atnat.experiments.modelfiles.checkpoints import read_checkpoint

    run = {"name": "rng", "seed": 3,
           "task": {"name": "copy", "vocab": 6, "min_len": 2, "max_len": 4, "n_train": 120, "n_valid": 6, "n_test": 6},
           "decoder": {"name": "cmlm"},
           "model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.1},
           "optim": {"lr": 0.003, "warmup_steps": 4},
           "train": {"max_steps": 8, "max_tokens": 96, "progress_bar": False, "num_threads": 1},
           "eval": {"n_bootstrap": 5}}
    weights = []
    for every in (2, 8):
        config = tmp_path / f"every{every}.yaml"
        config.write_text(yaml.safe_dump({**run, "train": {**run["train"], "val_every_steps": every}}))
        assert main(["train", str(config), "--output-dir", str(tmp_path / f"every{every}")]) == 0
        weights.append(read_checkpoint(tmp_path / f"every{every}" / "checkpoints" / "last.ckpt")["state_dict"])
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
