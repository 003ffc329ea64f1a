"""The best allowed token of each position (decoding/candidates.py argmax_ordinary): equal to a max over
a copy with the banned ids at -inf, whether few or all positions' plain arg-max is banned, ties included."""
import pytest
import torch

from atnat.core.special import SpecialTokens
from atnat.decoding.candidates import argmax_ordinary, never_emitted

SP = SpecialTokens()


def reference(log_probs, banned):
    masked = log_probs.index_fill(-1, torch.tensor(banned, dtype=torch.long), float("-inf"))
    return masked.max(-1)


@pytest.mark.parametrize("banned", [never_emitted(SP), never_emitted(SP, allow_blank=True),
                                    never_emitted(SP, allow_eos=True), [0, 3], []])
@pytest.mark.parametrize("spike", ["none", "some", "all"])
def test_equals_a_max_with_the_banned_ids_masked(banned, spike):
    torch.manual_seed(0)
    log_probs = torch.randn(3, 7, 40).log_softmax(-1)
    if spike != "none":  # make banned (and low allowed) ids the plain arg-max of some or every position
        rows = slice(None) if spike == "all" else slice(0, 1)
        log_probs[rows, :, SP.eos] += 30
        log_probs[rows, :, SP.unk] += 29
    scores, tokens = argmax_ordinary(log_probs, banned)
    want = reference(log_probs, banned)
    assert torch.equal(scores, want.values) and torch.equal(tokens, want.indices)
    assert not torch.isin(tokens, torch.tensor(banned, dtype=torch.long)).any()


def test_a_tie_goes_to_the_lower_allowed_id():
    log_probs = torch.full((1, 2, 10), -5.0)
    log_probs[0, 0, [SP.unk, 8]] = -1.0  # unk (3) ties with 8: the lower id, as a max over all ids gives
    log_probs[0, 1, [7, 9]] = -1.0
    _, tokens = argmax_ordinary(log_probs, never_emitted(SP))
    assert tokens.tolist() == [[SP.unk, 7]]
