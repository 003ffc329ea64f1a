"""Score processors: the exact -inf masks, and inputs never modified."""
import torch

from atnat.core.special import SpecialTokens
from atnat.decoding.processors import (
    ForbidTokens,
    MinLength,
    NoRepeatNGram,
    apply_processors,
    apply_processors_,
    at_processors,
)

INF = float("-inf")
V = 10


def scores(rows: int = 2) -> torch.Tensor:
    return torch.arange(rows * V, dtype=torch.float32).view(rows, V).neg() / 10  # (rows, V)


def masked(x: torch.Tensor) -> list[list[int]]:
    """Per row, the ids set to -inf."""
    return [[v for v in range(x.size(1)) if x[r, v] == INF] for r in range(x.size(0))]


def check_rest(before: torch.Tensor, after: torch.Tensor) -> None:
    """Entries not at -inf are exactly the input's."""
    keep = after != INF
    assert torch.equal(after[keep], before[keep])


def test_forbid_tokens_masks_ids_and_ignores_ids_outside_the_vocabulary():
    x = scores()
    copy = x.clone()
    y = ForbidTokens([5, 0, 1, 4, 1, 99])(torch.empty(2, 0, dtype=torch.long), x, 0)
    assert torch.equal(x, copy)
    assert masked(y) == [[0, 1, 4, 5], [0, 1, 4, 5]]
    check_rest(x, y)
    assert ForbidTokens([5, 0, 1, 4, 1]).ids == (0, 1, 4, 5)


def test_min_length_forbids_eos_only_before_min_len():
    proc = MinLength(2, eos=2)
    prefix = torch.empty(2, 0, dtype=torch.long)
    x = scores()
    copy = x.clone()
    for step in (0, 1):
        y = proc(prefix, x, step)
        assert masked(y) == [[2], [2]]
        check_rest(x, y)
    assert torch.equal(proc(prefix, x, 2), x)
    assert torch.equal(x, copy)


def test_min_length_per_row():
    proc = MinLength(torch.tensor([1, 3, 0]), eos=2)
    x = scores(3)
    copy = x.clone()
    prefix = torch.empty(3, 0, dtype=torch.long)
    assert masked(proc(prefix, x, 0)) == [[2], [2], []]
    assert masked(proc(prefix, x, 1)) == [[], [2], []]
    assert masked(proc(prefix, x, 2)) == [[], [2], []]
    y = proc(prefix, x, 3)
    assert masked(y) == [[], [], []]
    check_rest(x, proc(prefix, x, 1))
    assert torch.equal(x, copy)


def test_no_repeat_bigram():
    prefix = torch.tensor([[6, 7, 6], [6, 6, 6], [7, 8, 9]])
    x = scores(3)
    copy = x.clone()
    y = NoRepeatNGram(2)(prefix, x, 3)
    assert masked(y) == [[7], [6], []]
    check_rest(x, y)
    assert torch.equal(x, copy)


def test_no_repeat_trigram_and_unigram():
    prefix = torch.tensor([[6, 7, 8, 6, 7], [6, 7, 9, 6, 8]])
    x = scores()
    y = NoRepeatNGram(3)(prefix, x, 5)
    assert masked(y) == [[8], []]
    y = NoRepeatNGram(1)(prefix, x, 5)
    assert masked(y) == [[6, 7, 8], [6, 7, 8, 9]]


def test_no_repeat_ngram_waits_for_a_full_ngram():
    x = scores(1)
    assert torch.equal(NoRepeatNGram(3)(torch.tensor([[6, 6]]), x, 2), x)
    assert torch.equal(NoRepeatNGram(0)(torch.tensor([[6, 6]]), x, 2), x)
    # the same n-gram twice (6 7 | 6 7 -> bans 6 once): duplicates are harmless
    assert masked(NoRepeatNGram(2)(torch.tensor([[7, 6, 7, 6, 7]]), x, 5)) == [[6]]


def test_apply_at_processors_never_touches_the_input():
    special = SpecialTokens()
    procs = at_processors(special, min_len=4, no_repeat_ngram=2)
    assert [type(p).__name__ for p in procs] == ["ForbidTokens", "MinLength", "NoRepeatNGram"]
    prefix = torch.tensor([[6, 7, 6], [8, 8, 9]])
    x = scores()
    copy = x.clone()
    y = apply_processors(procs, prefix, x, 3)
    assert torch.equal(x, copy)
    assert masked(y) == [[0, 1, 2, 4, 5, 7], [0, 1, 2, 4, 5]]
    check_rest(x, y)
    longer = torch.tensor([[6, 7, 6, 8], [8, 8, 9, 8]])
    assert masked(apply_processors(procs, longer, x, 4)) == [[0, 1, 4, 5], [0, 1, 4, 5, 8, 9]]
    assert [type(p).__name__ for p in at_processors(special)] == ["ForbidTokens"]


def test_in_place_variants_edit_the_given_tensor_and_copies_are_skipped_when_idle():
    procs = [ForbidTokens([0, 1]), MinLength(2, eos=2)]
    prefix = torch.empty(2, 0, dtype=torch.long)
    x = scores()
    own = x.clone()
    assert apply_processors_(procs, prefix, own, 0) is own
    assert masked(own) == [[0, 1, 2], [0, 1, 2]]
    z = x.clone()
    assert NoRepeatNGram(1).mask_(torch.tensor([[6], [9]]), z, 1) is z
    assert masked(z) == [[6], [9]]
    assert apply_processors([MinLength(2, eos=2), NoRepeatNGram(2)], prefix, x, 3) is x  # idle
    y = apply_processors(procs, prefix, x, 3)
    assert y is not x and masked(y) == [[0, 1], [0, 1]]
    assert ForbidTokens([]).idle(prefix, 0) and ForbidTokens([])(prefix, x, 0) is x
