"""Invariances of the AT decoder and its KV cache, and learning on copy/reverse."""
import pytest
import torch

from atnat.decoding.beam import Beam
from atnat.decoding.greedy import Greedy
from atnat.models.seq2seq import Seq2SeqModule
from tests.training import decode_split, exact_match, fit

SMALL = dict(d_model=32, n_heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)


def make_model(seed=0, **model):
    torch.manual_seed(seed)
    return Seq2SeqModule(vocab_size=40, decoder="at", model={**SMALL, **model}).eval()


def random_batch(b=3, s=7, t=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(6, 40, (b, s), generator=g)
    src[-1, s - 2:] = 0  # last sentence is padded
    prev = torch.cat([torch.ones(b, 1, dtype=torch.long), torch.randint(6, 40, (b, t - 1), generator=g)], 1)
    return src, prev


@pytest.mark.parametrize("pre_ln", [False, True])
def test_cached_steps_equal_teacher_forced_forward(pre_ln):
    model = make_model(pre_ln=pre_ln)
    src, prev = random_batch()
    memory = model.encode(src)
    with torch.no_grad():
        full = torch.log_softmax(model.decoder(prev, memory)[0], -1)  # (B, T, V)
        state = model.decoder.init_state(memory, capacity=2)  # forces the cache to grow
        steps = []
        for t in range(prev.size(1)):
            lp, state = model.decoder.step(prev[:, t], state)
            steps.append(lp)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_grouped_cross_attention_equals_per_row_memory():
    """Beam layout (memory shared per group) gives the same log-probs as copying memory per row."""
    model = make_model()
    src, prev = random_batch()
    memory = model.encode(src)
    dec = model.decoder
    with torch.no_grad():
        order = torch.arange(3).repeat_interleave(2)
        grouped = dec.reorder_state(dec.init_state(memory), order)
        copied = dec.init_state(memory.index_select(order))
        assert grouped.group == 2 and copied.group == 1
        for t in range(prev.size(1)):
            tok = prev[:, t].repeat_interleave(2)
            a, grouped = dec.step(tok, grouped)
            b, copied = dec.step(tok, copied)
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        # finished sentence 1 leaves the beam: groups stay shared over the remaining memory rows
        keep = torch.tensor([1, 0, 5, 4])
        sub_g, sub_c = dec.reorder_state(grouped, keep), dec.reorder_state(copied, keep)
        assert sub_g.group == 2 and sub_g.cross_k.size(1) == 2
        a, _ = dec.step(prev[keep // 2, 0], sub_g)
        b, _ = dec.step(prev[keep // 2, 0], sub_c)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        # a reorder that breaks the group layout falls back to per-row memory, same numbers
        odd = torch.tensor([5, 0, 2])
        a, _ = dec.step(prev[odd // 2, 0], dec.reorder_state(grouped, odd))
        b, _ = dec.step(prev[odd // 2, 0], dec.reorder_state(copied, odd))
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("strategy", [Greedy(max_len_a=1.0, max_len_b=4),
                                      Beam(beam_size=3, max_len_a=1.0, max_len_b=4)])
def test_batch_of_n_equals_n_batches_of_one_and_padding_is_invisible(strategy):
    model = make_model(seed=3)
    src, _ = random_batch(b=4, s=6, seed=5)
    src[1, 3:] = 0
    lengths = src.ne(0).sum(1)
    batch = model.decode(src, lengths, strategy)
    for i in range(4):
        n = int(lengths[i])
        alone = model.decode(src[i:i + 1, :n], lengths[i:i + 1], strategy)  # no padding at all
        assert alone.sequences(model.special) == batch.sequences(model.special)[i:i + 1]
        torch.testing.assert_close(alone.scores[0], batch.scores[i], atol=1e-4, rtol=1e-4)


def test_score_sequences_matches_step_decoding():
    model = make_model(seed=1)
    src, prev = random_batch()
    memory = model.encode(src)
    tokens = prev[:, 1:]
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[0, 3:] = True
    with torch.no_grad():
        scores = model.decoder.score_sequences(memory, tokens, mask)
        state = model.decoder.init_state(memory)
        total = torch.zeros(3)
        inputs = torch.cat([prev[:, :1], tokens], 1)
        for t in range(tokens.size(1) + 1):
            lp, state = model.decoder.step(inputs[:, t] if t < inputs.size(1) else inputs[:, -1], state)
            for b in range(3):
                n = int((~mask[b]).sum())
                if t < n:
                    total[b] += lp[b, tokens[b, t]]
                elif t == n:
                    total[b] += lp[b, model.special.eos]
    torch.testing.assert_close(scores, total, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_at_learns_task_to_99_percent_exact_match(task):
    # 600 steps gave 1.0 run alone and 0.98 (copy, greedy) in a two-worker run of the slow tier: 900 for a margin
    module, data = fit("at", task, steps=900, lr=2e-3, warmup=60, max_tokens=768,
                       vocab=10, min_len=3, max_len=8, n_train=4000, n_test=200)
    hyps, refs, _ = decode_split(module, data, Greedy())
    assert exact_match(hyps, refs) >= 0.99
    hyps, refs, _ = decode_split(module, data, Beam(beam_size=4))
    assert exact_match(hyps, refs) >= 0.99


def test_monotonic_attention_window():
    model = make_model(seed=2)
    src, _ = random_batch(b=3, s=7)
    lengths = src.ne(0).sum(1)
    plain = model.decode(src, lengths, Greedy(max_len_a=1.0, max_len_b=2))
    wide = model.decode(src, lengths, Greedy(max_len_a=1.0, max_len_b=2, attention_window=(100, 100)))
    assert wide.sequences(model.special) == plain.sequences(model.special)  # a window covering all is no window
    torch.testing.assert_close(wide.scores, plain.scores)
    dec, memory = model.decoder, model.encode(src)
    state = dec.init_state(memory, window=(0, 1))
    state = dec.reorder_state(state, torch.arange(3).repeat_interleave(2))  # beam layout
    focus, tok = [], torch.ones(6, dtype=torch.long)
    with torch.no_grad():
        for _ in range(6):
            band = dec._window_mask(state).view(6, -1)  # (R, S)
            assert (band.sum(-1) <= 2).all() and (band.sum(-1) >= 1).all()
            _, state = dec.step(tok, state)
            focus.append(state.focus.clone())
    focus = torch.stack(focus)  # (steps, R)
    assert (focus[1:] >= focus[:-1]).all() and (focus[1:] - focus[:-1] <= 1).all()  # moves forward, <= 1 a step
    windowed = model.decode(src, lengths, Beam(beam_size=2, max_len_a=1.0, max_len_b=2, attention_window=(1, 2)))
    assert windowed.tokens.shape[0] == 3


@pytest.mark.parametrize("strategy", [Greedy(max_len_a=1.0, max_len_b=3), Beam(beam_size=3, max_len_a=1.0, max_len_b=3),
                                      Beam(beam_size=2, n_best=2, length_norm="none", max_len_b=5, max_len_a=0.5)])
def test_static_cache_step_equals_the_growing_cache(strategy):
    """Fixed-shape step (full-capacity cache, position mask, step index on the device) decodes
    exactly like the growing cache: padded batch, rows finishing at different steps."""
    model = make_model()
    src, _ = random_batch(b=4, s=7)
    lengths = src.ne(0).sum(1)
    ref = model.decode(src, lengths, strategy)
    model.decoder.use_static_cache(True)
    memory = model.encode(src)
    state = model.decoder.init_state(memory, max_steps=strategy.max_steps(lengths))
    assert state.pos is not None and state.self_k.size(3) == 16  # rounded up, never grows
    out = model.decode(src, lengths, strategy)
    assert torch.equal(out.tokens, ref.tokens) and out.n_steps == ref.n_steps
    torch.testing.assert_close(out.scores, ref.scores, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.positional_scores, ref.positional_scores, atol=1e-5, rtol=1e-5)
    model.decoder.use_static_cache(False)
    assert model.decoder.init_state(memory).pos is None


def test_static_cache_refuses_more_steps_than_planned():
    from atnat.core.errors import AtnatError

    model = make_model()
    model.decoder.use_static_cache(True)
    src, _ = random_batch(b=1)
    state = model.decoder.init_state(model.encode(src), max_steps=3)  # capacity 16
    prev = torch.ones(1, dtype=torch.long)
    with torch.no_grad():
        for _ in range(16):
            _, state = model.decoder.step(prev, state)
        with pytest.raises(AtnatError, match="static KV cache of 16 positions is full"):
            model.decoder.step(prev, state)


def test_score_sequences_charges_a_pad_id_inside_a_candidate():
    model = make_model(seed=1)
    src, prev = random_batch()
    memory = model.encode(src)
    tokens = prev[:, 1:].clone()
    tokens[0, 1] = model.special.pad  # a pad id in the middle of a candidate (not padding)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    with torch.no_grad():
        got = model.decoder.score_sequences(memory, tokens, mask)
        inputs = torch.cat([prev[:, :1], tokens], 1)  # BOS y
        outputs = torch.cat([tokens, torch.full_like(tokens[:, :1], model.special.eos)], 1)  # y EOS
        lp = model.decoder(inputs, memory)[0].float().log_softmax(-1)
        every = lp.gather(-1, outputs.unsqueeze(-1)).squeeze(-1).sum(1)  # each position, the pad too
    torch.testing.assert_close(got, every, atol=1e-4, rtol=1e-4)


def test_a_beam_reorder_writes_into_the_caches_freed_by_the_one_before():
    """With as many rows as before (a beam search's usual step), reorder_state gathers the caches
    into the buffers of the state before last (ATState.spare) instead of fresh tensors: the same
    values as a fresh gather; the spare is handed over once, so a second reorder of one state
    (outside the protocol, which consumes it) gets new memory, not the first result's."""
    model = make_model()
    src, prev = random_batch()
    dec = model.decoder
    with torch.no_grad():
        s0 = dec.reorder_state(dec.init_state(model.encode(src)), torch.arange(3).repeat_interleave(2))  # 6 rows
        _, s0 = dec.step(prev[:, 0].repeat_interleave(2), s0)
        order = torch.tensor([1, 1, 2, 3, 5, 4])
        s1 = dec.reorder_state(s0, order)
        assert s1.spare is not None and s1.spare[0] is s0.self_k  # kept for the next reorder
        _, s1 = dec.step(prev[:, 1].repeat_interleave(2), s1)
        expected = s1.self_k.index_select(1, order).clone()
        s2 = dec.reorder_state(s1, order)
        assert s2.self_k.data_ptr() == s0.self_k.data_ptr()  # written into s0's freed cache
        assert torch.equal(s2.self_k, expected)
        again = dec.reorder_state(s1, order)  # s1's spare was handed to s2: fresh memory here
        assert again.self_k.data_ptr() not in (s2.self_k.data_ptr(), s1.self_k.data_ptr())
        assert torch.equal(again.self_k, s2.self_k)
        fewer = dec.reorder_state(s2, torch.tensor([0, 1, 4, 5]))  # rows leave: no spare of another shape
        assert fewer.spare is None and fewer.self_k.size(1) == 4
