"""Speculative decoding with a NAT drafter: its output is the AT verifier's greedy output on every
sentence (trained models, untrained drafters, padded batches, one sentence at a time, several block
sizes, outputs cut at the maximum length); the drafter's and verifier's passes and the accepted
tokens on hand-written models; refusals."""
from __future__ import annotations

from functools import lru_cache

import pytest
import torch

from atnat.core.errors import AtnatError
from atnat.core.special import SpecialTokens
from atnat.decoding.greedy import Greedy
from atnat.decoding.speculative import Speculative
from atnat.experiments.config.run import ConfigError, run_config_from_dict
from atnat.experiments.data.batching import encode_split, make_loader
from atnat.experiments.evaluation.assemble import needs_teacher
from atnat.models.decoders.block_verifier import BlockVerifier
from atnat.models.seq2seq import Seq2SeqModule
from tests.training import TINY_MODEL, fit

SP = SpecialTokens()
TASK = dict(vocab=10, min_len=3, max_len=8, n_train=3000, n_test=120)


@lru_cache(maxsize=None)
def trained():
    """An AT and a CMLM trained briefly on fertility (the CMLM drafts, the AT verifies)."""
    at, task = fit("at", "fertility", steps=150, max_tokens=1024, **TASK)
    cmlm, _ = fit("cmlm", "fertility", steps=150, max_tokens=1024, task=task)
    return at, cmlm, task


@lru_cache(maxsize=None)
def greedy_outputs():
    at, _, task = trained()
    return decode_all(at, task, Greedy(), 4000)[0]


def decode_all(module, task, strategy, max_tokens, teacher=None):
    """Every test sentence -> (outputs in split order, summed Hypotheses fields)."""
    src, tgt = task.splits["test"]
    split = encode_split(task.tokenizer, src, tgt, name="test")
    hyps, passes, kept, rounds = [None] * len(split), {}, 0, 0
    with torch.inference_mode():
        for batch in make_loader(split, max_tokens, shuffle=False):
            out = module.decode(batch.src, batch.src_lengths, strategy, **needs_teacher(strategy, teacher, batch.src))
            for i, h in zip(batch.ids.tolist(), out.sequences(module.special)):
                hyps[i] = h
            for k, v in (out.passes or {}).items():
                passes[k] = passes.get(k, 0) + v
            if out.accepted:
                kept, rounds = kept + out.accepted[0], rounds + out.accepted[1]
    return hyps, passes, kept, rounds


@pytest.mark.parametrize("block", [1, 3, 8])
def test_output_is_the_verifiers_greedy_output_on_every_sentence(block):
    at, cmlm, task = trained()
    greedy = greedy_outputs()
    for max_tokens in (4000, 1):  # padded batches of many lengths, and one sentence at a time
        spec, passes, kept, rounds = decode_all(cmlm, task, Speculative(block=block), max_tokens, teacher=at)
        assert spec == greedy
        words = sum(len(h) for h in greedy)  # every token is kept once, and each EOS (not where the maximum cut)
        assert passes["drafter"] == passes["verifier"] and words < kept <= words + len(greedy)
        assert 1 <= kept / rounds <= block + 1


def test_an_untrained_drafter_and_a_short_maximum_keep_it_exact():
    at, _, task = trained()
    torch.manual_seed(0)
    random_drafter = Seq2SeqModule(vocab_size=at.decoder.vocab_size, decoder="cmlm", model=TINY_MODEL).eval()
    short = dict(max_len_a=0.5, max_len_b=1)  # many outputs end at the maximum, without EOS
    greedy, _, _, _ = decode_all(at, task, Greedy(**short), 4000)
    src, tgt = task.splits["test"]
    sources = encode_split(task.tokenizer, src, tgt, name="test").src
    assert sum(len(h) == int(0.5 * len(s) + 1) for h, s in zip(greedy, sources)) > len(greedy) // 2
    spec, _, _, _ = decode_all(random_drafter, task, Speculative(block=4, **short), 4000, teacher=at)
    assert spec == greedy


class Script:
    """Hand-written drafter and verifier over V = 10: the verifier's greedy output is A B C D then EOS
    (whatever it is shown); the drafter proposes `draft` at every slot it fills (predicted length 4)."""

    V, seq = 10, [6, 7, 8, 9, SP.eos]

    def __init__(self, draft):
        self.draft, self.drafts, self.blocks = draft, 0, []

    def predict_length(self, memory):
        return torch.full((1, 12), -1e9).index_fill(1, torch.tensor([4]), 0.0)

    def forward_parallel(self, tokens, memory, padding_mask):
        self.drafts += 1
        out = torch.full((*tokens.shape, self.V), -1e9)
        for j in range(tokens.size(1)):
            out[0, j, self.draft(j)] = 0.0
        return out

    def reorder_memory(self, memory, order):
        return memory

    def verifier(self):
        script = self

        class Verifier:
            max_output_length = None

            def step_block(self, tokens, start):
                script.blocks.append((tokens[0].tolist(), int(start[0])))
                out = torch.full((1, tokens.size(1), script.V), -1e9)
                for j in range(tokens.size(1)):
                    out[0, j, script.seq[min(int(start[0]) + j, 4)]] = 0.0  # the token after position start + j
                return out

            def keep(self, rows):
                pass
        return Verifier()


def run_script(draft, block):
    script = Script(draft)
    out = Speculative(block=block).search(script, None, src_lengths=torch.tensor([5]), special=SP,
                                          verifier=script.verifier)
    return out, script


def test_a_perfect_draft_is_kept_whole_with_the_verifiers_next_token():
    out, script = run_script(lambda j: [6, 7, 8, 9][j] if j < 4 else 6, block=2)
    assert out.sequences(SP)[0] == [6, 7, 8, 9] and out.lengths.tolist() == [[5]]  # EOS kept and counted
    # round 1 reads BOS + A B, keeps A B + C; round 2 reads C + D EOS (the predicted end), keeps D EOS
    assert script.blocks == [([SP.bos, 6, 7], 0), ([8, 9, SP.eos], 3)]
    assert out.passes == {"drafter": 2, "verifier": 2} and out.n_steps == 4 and out.accepted == (5, 2)


def test_a_wrong_draft_still_gains_the_verifiers_token_each_round():
    out, script = run_script(lambda j: 9, block=3)  # always D: right only at the fourth position
    assert out.sequences(SP)[0] == [6, 7, 8, 9]
    assert [start for _, start in script.blocks] == [0, 1, 2, 3] and out.accepted == (5, 4)  # 1, 1, 1, 2 tokens


def test_a_block_beyond_the_output_budget_drafts_no_more_than_the_budget():
    """block = 100000 allocated the verifier's block pass for 100,001 positions (gigabytes on a real model; now refused
    past MAX_SEARCH): no round can keep more than the output budget, so none drafts more; the output is the same."""
    from atnat.core.options import MAX_SEARCH

    budget = Speculative().max_len_a * 5 + Speculative().max_len_b  # src_lengths 5: this strategy's output budget
    out, script = run_script(lambda j: [6, 7, 8, 9][j] if j < 4 else 6, block=MAX_SEARCH)
    assert out.sequences(SP)[0] == [6, 7, 8, 9]
    assert script.blocks and all(len(tokens) <= budget + 1 for tokens, _ in script.blocks)


def test_refusals():
    with pytest.raises(AtnatError, match="needs an AT verifier"):
        Speculative().search(Script(lambda j: 6), None, src_lengths=torch.tensor([3]), special=SP)
    for block in (2.5, 3.0, 0, True):  # built in Python, not from a config (which checks types): one error, not a
        with pytest.raises(AtnatError, match="strategy 'speculative': block"):  # dtype error mid-search
            Speculative(block=block)
    with pytest.raises(TypeError, match="min_len"):
        Speculative(min_len=2)  # not an option: greedy with a minimum length has no speculative counterpart
    with pytest.raises(ConfigError, match="runs an AT teacher beside the decoder"):
        run_config_from_dict({"name": "r", "task": {"name": "copy"}, "decoder": "cmlm",
                              "eval": {"strategies": ["speculative"]}}, "test")
    with pytest.raises(ConfigError, match="needs the capability 'parallel'"):
        run_config_from_dict({"name": "r", "task": {"name": "copy"}, "decoder": "ctc",
                              "eval": {"strategies": ["speculative"]}}, "test")
    cmlm = Seq2SeqModule(vocab_size=10, decoder="cmlm", model=TINY_MODEL)  # untrained: only its kind counts
    with pytest.raises(AtnatError, match="a verifier must be an AT"):
        needs_teacher(Speculative(), cmlm, torch.tensor([[6, 7]]))


def test_the_block_verifier_equals_step_by_step_decoding():
    """One block pass gives the distributions greedy's steps give, row by row at their own positions."""
    at, _, _ = trained()
    src = torch.tensor([[6, 7, 8, 9], [8, 9, 0, 0]])
    memory = at.encode(src)
    tokens = torch.tensor([[SP.bos, 6, 7, 8], [SP.bos, 9, 9, 6]])
    with torch.inference_mode():
        state = at.decoder.init_state(memory)
        steps = []
        for j in range(4):
            lp, state = at.decoder.step(tokens[:, j], state)
            steps.append(lp)
        verifier = BlockVerifier(at.decoder, memory, capacity=2)  # grows on the way
        first = verifier.step_block(tokens[:, :2], torch.tensor([0, 0]))
        second = verifier.step_block(tokens[:, 2:], torch.tensor([2, 2]))
    torch.testing.assert_close(torch.cat([first, second], 1), torch.stack(steps, 1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block", [1, 4, 9])
def test_outputs_that_run_to_the_positional_table_s_end_stay_exact(block):
    """An AT that never ends (EOS out of reach) with a cap from its positions (max_positions 32: 31 tokens):
    the verifier's last rounds and the drafter's slots reach past the table; kept tokens never do, so the
    output is greedy's (a padded batch: one long source, one short)."""
    torch.manual_seed(0)
    model = dict(d_model=32, n_heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=1, dropout=0.0,
                 max_positions=32)
    at = Seq2SeqModule(vocab_size=20, decoder="at", model=model).eval()
    drafter = Seq2SeqModule(vocab_size=20, decoder="cmlm", model=model).eval()
    with torch.no_grad():
        at.decoder.output.bias[SP.eos] = -1e4
    src = torch.randint(6, 20, (2, 20))
    src[1, 5:] = SP.pad
    src_lengths = torch.tensor([20, 5])
    with torch.inference_mode():
        greedy = at.decode(src, src_lengths, Greedy())
        spec = drafter.decode(src, src_lengths, Speculative(block=block),
                              **needs_teacher(Speculative(block=block), at, src))
    assert greedy.lengths[:, 0].tolist() == [31, 20]  # the long one runs to the table's end
    assert spec.sequences(SP) == greedy.sequences(SP)


def test_a_timed_speculative_call_checks_its_verifier_once_not_at_every_repeat(monkeypatch):
    """The timing phase calls a system's decode many times; the check that the teacher can verify walks its
    modules, so it is made when the call is built, and each timed search only builds the verifier."""
    import atnat.experiments.evaluation.assemble as assemble
    from atnat.experiments.evaluation.timing import System

    at, cmlm, task = trained()
    checks = []
    check = assemble.block_verify_problem
    monkeypatch.setattr(assemble, "block_verify_problem", lambda decoder: checks.append(1) or check(decoder))
    src, _ = task.splits["test"]
    sources = [task.tokenizer.encode(s) for s in src[:2]]
    call = System("cmlm", "speculative-k4", cmlm, Speculative(block=4), sources, teacher=at).call([0, 1])
    first, second = call(), call()
    assert len(checks) == 1 and first.sequences(SP) == second.sequences(SP)


def test_the_block_verifier_keeps_rows_at_their_own_positions_and_overwrites_what_was_not_kept():
    """Rows advance by what each keeps: row 0 keeps its 3 tokens, row 1 only its first (the rest junk a
    drafter proposed), then they read from positions 3 and 1; the junk's keys and values are written over."""
    torch.manual_seed(0)
    at = Seq2SeqModule(vocab_size=20, decoder="at", model=TINY_MODEL).eval()
    memory = at.encode(torch.tensor([[6, 7, 8, 9], [8, 9, 0, 0]]))
    tokens = torch.tensor([[SP.bos, 6, 7, 8, 9, 10, 11], [SP.bos, 9, 9, 6, 12, 13, 14]])
    with torch.inference_mode():
        state, steps = at.decoder.init_state(memory), []
        for j in range(7):
            lp, state = at.decoder.step(tokens[:, j], state)
            steps.append(lp)
        steps = torch.stack(steps, 1)
        verifier = BlockVerifier(at.decoder, memory, capacity=2)
        first = verifier.step_block(torch.tensor([[SP.bos, 6, 7], [SP.bos, 15, 15]]), torch.tensor([0, 0]))
        second = verifier.step_block(torch.stack([tokens[0, 3:6], tokens[1, 1:4]]), torch.tensor([3, 1]))
    torch.testing.assert_close(first[0], steps[0, :3], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(first[1, 0], steps[1, 0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(second[0], steps[0, 3:6], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(second[1], steps[1, 1:4], atol=1e-5, rtol=1e-5)
