"""Losses and the exposure-bias options on known answers."""
import math

import pytest
import torch

from atnat.models.batch import Batch
from atnat.models.decoders.autoregressive import sampling_probability
from atnat.models.losses import guided_attention_loss, guided_attention_weights, label_smoothed_nll
from atnat.models.optim import lr_factor
from atnat.models.seq2seq import Seq2SeqModule


def test_sampling_schedules():
    assert sampling_probability("none", 500, 100, 1.0) == 0.0
    assert sampling_probability("linear", 50, 100, 1.0) == pytest.approx(0.5)
    assert sampling_probability("linear", 50, 100, 0.25) == pytest.approx(0.25)  # capped
    assert sampling_probability("exponential", 10, 10, 1.0) == pytest.approx(1 - 0.9**10)
    assert sampling_probability("inverse_sigmoid", 100, 50, 1.0) == pytest.approx(1 - 50 / (50 + math.exp(2)))
    assert sampling_probability("inverse_sigmoid", 0, 50, 1.0) == pytest.approx(1 - 50 / 51)


def test_guided_attention_prior_known_values():
    w = guided_attention_weights(torch.tensor([2]), torch.tensor([2]), 3, 3, sigma=0.2)[0]  # (T, S)
    assert w[0, 0] == 0 and w[1, 1] == 0
    assert w[0, 1] == pytest.approx(1 - math.exp(-0.25 / (2 * 0.04)))
    assert (w[2] == 0).all() and (w[:, 2] == 0).all()  # padding
    diag = torch.eye(2).view(1, 1, 2, 2)
    assert guided_attention_loss(diag, torch.tensor([2]), torch.tensor([2]), 0.2) == 0
    uniform = torch.full((1, 1, 2, 2), 0.5)
    assert guided_attention_loss(uniform, torch.tensor([2]), torch.tensor([2]), 0.2) == pytest.approx(
        float(0.5 * w[0, 1]))


def test_label_smoothing_and_padding():
    lp = torch.log_softmax(torch.tensor([[[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]), -1)  # (1, 2, 3)
    tgt = torch.tensor([[0, 1]])
    plain = label_smoothed_nll(lp, tgt, smoothing=0.0, ignore_index=1)
    assert plain == pytest.approx(float(-lp[0, 0, 0]))  # position 1 is padding
    smooth = label_smoothed_nll(lp, tgt, smoothing=0.3, ignore_index=1)
    assert smooth == pytest.approx(float(0.7 * -lp[0, 0, 0] + 0.3 * -lp[0, 0].mean()))


def test_inverse_sqrt_schedule():
    assert lr_factor(50, "inverse_sqrt", 100) == pytest.approx(0.5)
    assert lr_factor(100, "inverse_sqrt", 100) == pytest.approx(1.0)
    assert lr_factor(400, "inverse_sqrt", 100) == pytest.approx(0.5)
    assert lr_factor(7, "constant", 100) == 1.0


def test_input_noise_rate_and_untouched_specials():
    torch.manual_seed(0)
    m = Seq2SeqModule(vocab_size=50, decoder="at", decoder_options={"input_noise": 0.5},
                      model=dict(d_model=16, n_heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1))
    tgt = torch.randint(6, 50, (64, 20))
    tgt[:, 15:] = 0
    batch = Batch(tgt, tgt, torch.full((64,), 20), torch.full((64,), 15), torch.arange(64))
    prev, _ = m.decoder.shift(batch)
    noisy = m.decoder.noisy_inputs(prev, 0, m.encode(tgt))
    assert (noisy[:, 0] == 1).all() and (noisy[prev == 0] == 0).all()
    changed = (noisy != prev)[:, 1:16].float().mean()
    assert 0.4 < changed < 0.55  # 0.5 x (1 - 1/44) expected
