"""Error propagation measured causally: one error injected after the first decoder
pass, and the drop it causes downstream - large for an AT whose next token follows its last one,
exactly 0 for a one-pass NAT, which reads nothing back."""
from types import SimpleNamespace

import pytest
import torch

from atnat.decoding.greedy import Greedy
from atnat.decoding.mask_predict import MaskPredict
from atnat.decoding.parallel import Parallel
from atnat.experiments.data.batching import EncodedSplit
from atnat.experiments.evaluation.probes import injected_error_drop
from tests import tables
from tests.nat_tables import FakeParallel, Slot

WORDS = (tables.A, tables.B, tables.C, tables.D)


def chain(sentence, prefix):
    """Each word follows the last one (A B C D A B ...), six words then EOS: an AT whose outputs feed back."""
    if len(prefix) >= 6:
        return {tables.EOS: 1.0}
    last = prefix[-1] if prefix else None
    nxt = WORDS[(WORDS.index(last) + 1) % 4] if last in WORDS else WORDS[0]
    return {nxt: 1.0}


def fake(decoder, capabilities):
    decoder.capabilities = frozenset(capabilities)
    decoder.vocab_size = tables.V
    return SimpleNamespace(decoder=decoder, special=tables.SPECIAL, device=torch.device("cpu"),
                           encode=lambda src: src[:, 0])  # "memory": the sentence id each row carries


def split(n, targets):
    return EncodedSplit([[i] for i in range(n)], [list(t) for t in targets])


def test_an_at_whose_next_token_follows_its_last_one_propagates_the_injected_error():
    module = fake(tables.TableModel(chain), {"step"})
    reference = [tables.A, tables.B, tables.C, tables.D, tables.A, tables.B]
    out = injected_error_drop(module, split(4, [reference] * 4), Greedy(), n=4, bootstrap=50)
    # clean: every token right; hurt: the chain restarts from a wrong word after position 2
    assert out["error_propagation_n"] == 4 and out["error_propagation"] > 0.5
    assert out["error_propagation_ci_low"] <= out["error_propagation"] <= out["error_propagation_ci_high"]


def test_a_one_pass_nat_reads_nothing_back_and_a_refining_one_does():
    L = 4
    right = [Slot({w: 0.9}) for w in WORDS]
    # slot i copies whatever its left neighbour reads, once that neighbour is given (kept) in the input
    follows = [Slot({WORDS[0]: 0.9})] + [
        Slot({WORDS[i]: 0.6}, tuple((i - 1, w, {WORDS[(WORDS.index(w) + 1) % 4]: 0.95}) for w in WORDS))
        for i in range(1, L)]
    targets = [list(WORDS)] * 3
    for strategy, table, expect_zero in ((Parallel(), right, True), (MaskPredict(iterations=4), follows, False)):
        model = FakeParallel({s: {L: 1.0} for s in range(3)}, {(s, L): table for s in range(3)})
        module = fake(model, {"parallel"})
        out = injected_error_drop(module, split(3, targets), strategy, n=3, bootstrap=50)
        if expect_zero:
            assert out["error_propagation"] == 0.0  # measured, and nothing fed back
        else:
            assert out["error_propagation"] > 0  # a wrong kept token misleads the later passes


@pytest.mark.slow
def test_a_real_cmlm_with_a_length_beam_and_a_trained_at_go_through_the_probe():
    """Rows of a length beam finish at different passes (fewer rows later): the probe follows them."""
    from atnat.decoding.beam import Beam
    from atnat.experiments.data.batching import encode_split
    from tests.training import fit

    for decoder, strategies in (("cmlm", [MaskPredict(iterations=4, length_beam=3)]),
                                ("at", [Greedy(), Beam(beam_size=3)])):
        module, task = fit(decoder, "copy", steps=60, vocab=8, min_len=3, max_len=6, n_train=400, n_test=6)
        src, tgt = task.splits["test"]
        test = encode_split(task.tokenizer, src, tgt, name="test")
        for strategy in strategies:
            out = injected_error_drop(module, test, strategy, n=6, bootstrap=20)
            assert out["error_propagation_n"] > 0 and -1.0 <= out["error_propagation"] <= 1.0


def test_the_drop_is_measured_against_the_reference_closest_to_the_clean_output():
    """On a task of several correct variants the drop was measured against the first stream only: an output of
    another variant scored near 0 clean and hurt alike, which hid the error's effect."""
    module = fake(tables.TableModel(chain), {"step"})
    output = [tables.A, tables.B, tables.C, tables.D, tables.A, tables.B]
    elsewhere = [tables.D] * 6
    alone = injected_error_drop(module, split(4, [elsewhere] * 4), Greedy(), n=4, bootstrap=50)
    both = injected_error_drop(module, split(4, [elsewhere] * 4), Greedy(), n=4, bootstrap=50,
                               references=[[elsewhere] * 4, [output] * 4])
    assert both["error_propagation"] > 0.5 > abs(alone["error_propagation"])
