"""The error-propagation probes: teacher-forced accuracy, prefix corruption, attention maps."""
import numpy as np
import pytest
import torch

from atnat.experiments.data.batching import collate, encode_split
from atnat.experiments.evaluation.probes import attention_map, oracle_predictions, prefix_corruption, run_probes
from tests.training import fit


@pytest.fixture(scope="module")
def at_copy():
    return fit("at", "copy", steps=30, vocab=8, min_len=3, max_len=6, n_train=600, n_test=40)  # any non-degenerate model


def test_teacher_forced_predictions_equal_the_argmax_of_the_forward_pass(at_copy):
    module, task = at_copy
    split = encode_split(task.tokenizer, *task.splits["test"], name="test")
    batch = collate([split[i] for i in range(6)])
    pred = oracle_predictions(module, batch)
    prev, _ = module.decoder.shift(batch)
    with torch.no_grad():
        expected = module.decoder(prev, module.encode(batch.src))[0].argmax(-1)
    assert [len(p) for p in pred] == batch.tgt_lengths.tolist()
    assert pred == [e[:n] for e, n in zip(expected.tolist(), batch.tgt_lengths.tolist())]


def test_prefix_corruption_changes_exactly_k_inputs_and_is_reproducible(at_copy, monkeypatch):
    module, task = at_copy
    split = encode_split(task.tokenizer, *task.splits["test"], name="test")
    batch = collate([split[i] for i in range(8)])
    seen = []
    forward = type(module.decoder).forward

    def spy(self, prev, memory, need_weights=False):
        seen.append(prev.clone())
        return forward(self, prev, memory, need_weights)

    monkeypatch.setattr(type(module.decoder), "forward", spy)
    clean, noisy, valid = prefix_corruption(module, batch, 2)
    clean_in, noisy_in = seen
    changed = (clean_in != noisy_in).sum(1)
    assert changed.tolist() == [2] * 8  # k = 2 gold inputs replaced, by other ordinary tokens
    assert (noisy_in[clean_in != noisy_in] > module.special.blank).all()
    assert clean.shape == noisy.shape == valid.shape == (8, 8) and not (clean & ~valid).any()
    again = prefix_corruption(module, batch, 2)
    assert all(np.array_equal(a, b) for a, b in zip((clean, noisy, valid), again))


def test_attention_map_rows_are_distributions_over_the_source(at_copy):
    module, task = at_copy
    split = encode_split(task.tokenizer, *task.splits["test"], name="test")
    frame = attention_map(module, split, index=3)
    t, s = len(split.tgt[3]) + 1, len(split.src[3])
    assert len(frame) == t * s
    sums = frame.groupby("target_pos").weight.sum()
    np.testing.assert_allclose(sums.to_numpy(), 1.0, atol=1e-5)
    assert module.decoder.record_attention is False  # recording ends with the probe


def test_position_accuracy_counts_sentences_and_skips_a_fixed_length_nat():
    module, task = fit("nat", "copy", steps=30, decoder_options={"length": "fixed"}, vocab=8, min_len=3,
                       max_len=6, n_train=200, n_test=30)
    split = encode_split(task.tokenizer, *task.splits["test"], name="test")
    free = [[6] * len(t) for t in split.tgt]
    curves = run_probes(module, split, free_running=free, strategy="parallel-fixed")
    acc = curves["position_accuracy"]
    assert set(acc["mode"]) == {"free_running"}  # no teacher-forced curve: it never saw gold lengths
    assert "attention" not in curves and "prefix_corruption" not in curves
    lengths = [len(t) for t in split.tgt]
    assert acc["count"].tolist() == [sum(n > p for n in lengths) for p in range(max(lengths))]


def test_a_nat_with_a_length_predictor_gets_both_curves():
    module, task = fit("cmlm", "copy", steps=30, vocab=8, min_len=3, max_len=6, n_train=200, n_test=30)
    split = encode_split(task.tokenizer, *task.splits["test"], name="test")
    curves = run_probes(module, split, free_running=split.tgt, strategy="mask-predict-1")
    assert set(curves["position_accuracy"]["mode"]) == {"teacher_forced", "free_running"}
    assert "attention" in curves


def test_free_running_outputs_are_scored_against_the_reference_closest_to_them():
    """With several correct variants (dialect), a right output of the second variant was scored against the
    first stream: a perfect system read as heavy error propagation (about 0.5 at every position)."""
    module, task = fit("cmlm", "copy", steps=5, vocab=8, min_len=3, max_len=6, n_train=200, n_test=30)
    split = encode_split(task.tokenizer, *task.splits["test"], name="test")
    other = [[t % 7 + 1 for t in ref] for ref in split.tgt]  # a second reference stream, token for token other
    curves = run_probes(module, split, free_running=other, strategy="x", references=[split.tgt, other])
    free = curves["position_accuracy"].query("mode == 'free_running'")
    assert (free["accuracy"] == 1.0).all()
