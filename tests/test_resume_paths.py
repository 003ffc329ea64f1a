"""A run resumed under another spelling of its path (`results/...` then an absolute path, or a folder moved since)
kept its checkpoint callback's state only when the recorded folder name was the same string: Lightning then
dropped the best score, and the resumed run saved a worse `best.ckpt` as best (a trial measured BLEU 0.0 for
0.61) without a word."""
import warnings

import torch

from atnat.experiments.training.resume import RunCheckpoint


def test_the_best_checkpoints_state_is_restored_whatever_the_folder_was_called(tmp_path):
    here = tmp_path / "abs" / "runs" / "at-s1" / "checkpoints"
    state = {"dirpath": "int/runs/at-s1/checkpoints", "best_model_score": torch.tensor(0.346),
             "best_model_path": "int/runs/at-s1/checkpoints/best.ckpt", "kth_best_model_path": "int/runs/at-s1/checkpoints/best.ckpt",
             "kth_value": torch.tensor(0.346), "last_model_path": "int/runs/at-s1/checkpoints/last.ckpt",
             "best_k_models": {"int/runs/at-s1/checkpoints/best.ckpt": torch.tensor(0.346)}}
    callback = RunCheckpoint(dirpath=here, filename="best", monitor="val/bleu", mode="max")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Lightning's "the dirpath has changed ... won't be reloaded"
        callback.load_state_dict(state)
    assert float(callback.best_model_score) == float(torch.tensor(0.346))
    assert callback.best_model_path == str(here / "best.ckpt") and callback.last_model_path == str(here / "last.ckpt")
    assert callback.best_k_models == {str(here / "best.ckpt"): torch.tensor(0.346)}
