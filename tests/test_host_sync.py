"""A training step keeps the GPU busy: nothing in the loss, nor in the logging of a run without a
progress bar, waits for the device's result on the host. On the CPU this is seen by the operators
a step calls: those whose output size or Python value depends on tensor data (boolean indexing,
nonzero, .item()/bool()/tolist()) are the ones that synchronise with a GPU."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import atnat.models.decoders  # noqa: F401  (registers decoders)
from atnat.experiments.config.devices import trains_on_gpu
from atnat.experiments.data.batching import encode_split, make_loader
from atnat.models.batch import Batch
from atnat.models.losses import total_loss
from atnat.models.seq2seq import Seq2SeqModule

SYNCING = {"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive"}
MODEL = dict(d_model=16, n_heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1, dropout=0.1)


class HostReads(TorchDispatchMode):
    """Records every operator call that needs tensor data on the host."""

    def __init__(self):
        super().__init__()
        self.found = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        indices = args[1] if name.startswith("index") and len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
        if name in SYNCING or any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
            self.found.append(name)
        return func(*args, **(kwargs or {}))


def batch() -> Batch:
    torch.manual_seed(0)
    src, tgt = torch.randint(6, 30, (3, 5)), torch.randint(6, 30, (3, 4))
    src[1, 3:], tgt[2, 2:] = 0, 0  # padding
    return Batch(src, tgt, src.ne(0).sum(1), tgt.ne(0).sum(1), torch.arange(3))


def test_the_detector_sees_a_host_read():
    with HostReads() as seen:
        x = torch.arange(4.0)
        x[x > 1].sum().item()
    assert seen.found == ["index", "_local_scalar_dense"]


@pytest.mark.parametrize("decoder, options, loss", [
    ("at", {}, {}), ("at", {"scheduled_sampling": "inverse_sigmoid"}, {"guided_attention_weight": 0.5}),
    ("nat", {"glat": True}, {}), ("cmlm", {}, {}), ("ctc", {"glat": True}, {})])
def test_a_training_loss_and_its_backward_read_nothing_on_the_host(decoder, options, loss):
    module = Seq2SeqModule(vocab_size=30, decoder=decoder, decoder_options=options, loss=loss, model=MODEL).train()
    with HostReads() as seen:
        total_loss(module.loss_parts(batch())).backward()
    assert seen.found == []


def test_the_masked_loss_equals_the_mean_over_counted_tokens():
    from atnat.models.losses import label_smoothed_nll

    torch.manual_seed(1)
    lp = torch.randn(2, 3, 7).log_softmax(-1)
    tgt = torch.tensor([[3, 4, 1], [5, 1, 1]])  # 1 = ignored
    keep = tgt.ne(1)
    nll = -lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    expected = (0.9 * nll + 0.1 * -lp.mean(-1))[keep].mean()
    assert torch.allclose(label_smoothed_nll(lp, tgt, smoothing=0.1, ignore_index=1), expected)
    assert label_smoothed_nll(lp, torch.ones_like(tgt), smoothing=0.1, ignore_index=1) == 0  # nothing counted


def test_without_a_progress_bar_the_training_loss_is_not_read_after_every_step(tmp_path):
    import pytorch_lightning as pl

    module = Seq2SeqModule(vocab_size=30, decoder="at", model=MODEL)
    one = batch()
    loader = torch.utils.data.DataLoader([one] * 3, batch_size=1, collate_fn=lambda items: items[0])
    trainer = pl.Trainer(max_steps=3, accelerator="cpu", enable_progress_bar=False, logger=False,
                         enable_checkpointing=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module, loader)
    assert "train/loss" in trainer.callback_metrics and "train/loss" not in trainer.progress_bar_metrics
    module.train_loss_in_progress_bar = True  # a bar that shows it: then Lightning reads it
    trainer = pl.Trainer(max_steps=3, accelerator="cpu", enable_progress_bar=False, logger=False,
                         enable_checkpointing=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module, loader)
    assert "train/loss" in trainer.progress_bar_metrics


def test_batches_are_pinned_for_a_gpu_run(monkeypatch):
    from atnat.experiments.data.tokenize import SymbolTokenizer

    pinned = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a: pinned.append(self) or self)
    b = batch()
    assert isinstance(b.pin_memory(), Batch) and len(pinned) == 5
    tok = SymbolTokenizer(["a", "b"])
    split = encode_split(tok, ["a b", "b"], ["b", "a a"], name="train")
    assert make_loader(split, 100, shuffle=False, pin_memory=True).pin_memory
    assert not make_loader(split, 100, shuffle=False).pin_memory
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert trains_on_gpu("auto") and trains_on_gpu("gpu") and not trains_on_gpu("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not trains_on_gpu("auto")


def test_counting_a_runs_tokens_reads_nothing_on_the_host_between_its_clock_readings():
    """train.json's throughput sums each batch's tokens on the device; only its clock readings (training's start,
    after the first steps, around validations, the end) wait for the device."""
    import types

    from atnat.experiments.training.throughput import WARM_STEPS, Throughput

    counter, module, one = Throughput(), types.SimpleNamespace(device=torch.device("cpu")), batch()
    counter.on_train_start(None, module)
    with HostReads() as seen:
        for step in range(WARM_STEPS - 1):
            counter.on_train_batch_end(None, module, None, one, step)
    assert seen.found == []
    counter.on_train_batch_end(None, module, None, one, WARM_STEPS)
    single = types.SimpleNamespace(strategy=types.SimpleNamespace(reduce=lambda tensor, reduce_op: tensor), world_size=1)
    counter.on_train_end(single, module)
    assert counter.record()["target_tokens"] == WARM_STEPS * int(one.tgt_lengths.sum())
