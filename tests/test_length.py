"""The length predictor: offsets -> absolute lengths on hand-set logits, and learning `fertility`."""
from __future__ import annotations

import math

import pytest
import torch

from atnat.experiments.data.batching import encode_split, make_loader
from atnat.models.encoder import EncoderOut, TransformerEncoder
from atnat.models.layers import TokenEmbedding
from atnat.models.length import LengthPredictor
from atnat.models.optim import lr_factor
from atnat.models.sizes import ModelConfig
from tests.training import TINY_MODEL, make_task

NEG_INF = float("-inf")


def hand_predictor(logits: list[float]) -> LengthPredictor:
    """A predictor whose offset logits are `logits` whatever the input (zero weights, set bias)."""
    predictor = LengthPredictor(d_model=4, max_offset=(len(logits) - 1) // 2)
    with torch.no_grad():
        predictor.proj.weight.zero_()
        predictor.proj.bias.copy_(torch.tensor(logits))
    return predictor


def memory(lengths: list[int], width: int) -> EncoderOut:
    mask = torch.arange(width)[None, :] >= torch.tensor(lengths)[:, None]  # (B, S)
    return EncoderOut(torch.randn(len(lengths), width, 4), mask)


def test_absolute_lengths_from_offsets_exclude_length_zero():
    logits = [math.log(p) for p in (0.1, 0.2, 0.3, 0.25, 0.15)]  # offsets -2 -1 0 +1 +2
    out = hand_predictor(logits).log_probs_absolute(memory([3, 1], width=3))
    assert out.shape == (2, 3 + 2 + 1)  # lengths 0 .. S + max_offset
    # S = 3: offsets -2..2 are lengths 1..5, all valid
    assert out[0, 0] == NEG_INF
    assert out[0, 1:].exp().tolist() == pytest.approx([0.1, 0.2, 0.3, 0.25, 0.15], abs=1e-6)
    # S = 1: offsets -2, -1 would give lengths -1, 0: removed, the rest renormalised over 0.7
    assert out[1, :1].tolist() == [NEG_INF] and out[1, 4:].tolist() == [NEG_INF, NEG_INF]
    assert out[1, 1:4].exp().tolist() == pytest.approx([0.3 / 0.7, 0.25 / 0.7, 0.15 / 0.7], abs=1e-6)


def test_loss_clamps_offsets_and_accuracy_counts_exact_lengths():
    predictor = hand_predictor([0.0, 0.0, 5.0, 0.0, 0.0])  # always offset 0
    mem = memory([3, 2, 2], width=3)
    ce, accuracy = predictor.loss(mem, torch.tensor([3, 9, 4]))  # offsets 0, +7 (clamped to +2), +2
    expected = -torch.tensor([0.0, 0.0, 5.0, 0.0, 0.0]).log_softmax(0)[[2, 4, 4]].mean()
    assert ce.item() == pytest.approx(expected.item(), abs=1e-6)
    assert float(accuracy) == pytest.approx(1 / 3)


def test_mean_pooling_ignores_padding():
    predictor = LengthPredictor(d_model=4, max_offset=3)
    mem = memory([2], width=2)
    padded = EncoderOut(torch.cat([mem.states, torch.full((1, 3, 4), 7.0)], 1),
                        torch.tensor([[False, False, True, True, True]]))
    assert torch.allclose(predictor.offset_logits(mem), predictor.offset_logits(padded), atol=1e-6)


# Measured (2 shared CPU cores, OMP_NUM_THREADS=1): exact length accuracy on 500 test sentences
# after 1000 steps: 0.936 / 0.904 / 0.920 (seeds 0, 1, 2), ~9-10 s (up to ~20 s when the machine
# was busy); after 600 steps 0.89 / 0.81 / 0.84. The accuracy climbs unevenly (length-bucketed
# batches hold one target length each), hence the margin below the measured values.
LENGTH_STEPS, LENGTH_BAR = 1000, 0.85


def train_on_fertility(steps: int, seed: int = 0) -> float:
    """Train a tiny encoder + predictor on the length loss alone -> exact length accuracy on test."""
    torch.manual_seed(seed)
    task = make_task("fertility", vocab=10, max_len=8, n_train=4000, n_test=500)
    train = encode_split(task.tokenizer, *task.splits["train"], name="train")
    test = encode_split(task.tokenizer, *task.splits["test"], name="test")
    assert sum(len(s) != len(t) for s, t in zip(test.src, test.tgt)) > 0.8 * len(test)
    cfg = ModelConfig(**TINY_MODEL)
    embed = TokenEmbedding(task.tokenizer.vocab_size, cfg.d_model, max_positions=64, learned_pos=False,
                           dropout=0.0, pad=0)
    encoder, predictor = TransformerEncoder(cfg, embed), LengthPredictor(cfg.d_model)
    params = list(encoder.parameters()) + list(predictor.parameters())
    opt = torch.optim.Adam(params, lr=2e-3, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s + 1, "inverse_sqrt", 100))
    step = 0
    while step < steps:
        for batch in make_loader(train, 512, shuffle=True, seed=step):
            ce, _ = predictor.loss(encoder(batch.src, batch.src.eq(0)), batch.tgt_lengths)
            opt.zero_grad()
            ce.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            step += 1
            if step >= steps:
                break
    encoder.eval()
    correct = 0
    with torch.no_grad():
        for batch in make_loader(test, 4000, shuffle=False):
            log_probs = predictor.log_probs_absolute(encoder(batch.src, batch.src.eq(0)))
            correct += int((log_probs.argmax(-1) == batch.tgt_lengths).sum())
    return correct / len(test)


@pytest.mark.slow
def test_length_predictor_learns_fertility_lengths():
    assert train_on_fertility(LENGTH_STEPS) >= LENGTH_BAR
