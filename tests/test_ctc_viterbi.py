"""The CTC Viterbi alignment behind CTC+GLAT glancing (models/decoders/glancing.py) against the
slot-by-slot loop it replaced (kept here as the reference): same alignments and scores on random
inputs (padding, unfit targets, repeated labels, ties), and a bounded number of tensor operations
per slot. Exhaustive-search checks live in test_nat_decoders.py."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from atnat.core.special import NEG_INF
from atnat.models.decoders.glancing import ctc_viterbi

BLANK = 4


def reference_ctc_viterbi(log_probs, input_lengths, targets, target_lengths, blank):
    """The loop implementation (atnat up to 17f3ce4), verbatim."""
    B, T, _ = log_probs.shape
    ext = targets.new_full((B, 2 * targets.size(1) + 1), blank)  # (B, Z) blank y1 blank y2 ... blank
    ext[:, 1::2] = targets
    Z = ext.size(1)
    valid = torch.arange(Z, device=ext.device)[None, :] < (2 * target_lengths + 1)[:, None]  # (B, Z)
    skip = torch.zeros_like(valid)  # (B, Z) state s may be entered from s - 2
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    emit = log_probs.float().gather(2, ext[:, None, :].expand(B, T, Z))  # (B, T, Z)
    alpha = emit[:, 0].masked_fill(torch.arange(Z, device=ext.device) >= 2, NEG_INF).masked_fill(~valid, NEG_INF)
    back = torch.zeros(B, T, Z, dtype=torch.long, device=ext.device)  # (B, T, Z) states moved back
    for t in range(1, T):
        prev1 = torch.cat([alpha.new_full((B, 1), NEG_INF), alpha[:, :-1]], 1)  # (B, Z)
        prev2 = torch.cat([alpha.new_full((B, 2), NEG_INF), alpha[:, :-2]], 1).masked_fill(~skip, NEG_INF)
        best, arg = torch.stack([alpha, prev1, prev2], -1).max(-1)  # (B, Z)
        active = (t < input_lengths)[:, None]  # (B, 1) frozen after the input ends
        alpha = torch.where(active, (best + emit[:, t]).masked_fill(~valid, NEG_INF), alpha)
        back[:, t] = torch.where(active, arg, 0)
    last = (2 * target_lengths)[:, None]  # (B, 1) final blank state
    end_label = alpha.gather(1, (last - 1).clamp(min=0)).masked_fill(last == 0, NEG_INF)  # (B, 1)
    end_blank = alpha.gather(1, last)
    state = torch.where(end_label > end_blank, last - 1, last).squeeze(1)  # (B,)
    score = torch.maximum(end_label, end_blank).squeeze(1)  # (B,)
    path = torch.zeros(B, T, dtype=torch.long, device=ext.device)  # (B, T) state per slot
    for t in range(T - 1, -1, -1):
        path[:, t] = state
        state = state - back[:, t].gather(1, state[:, None]).squeeze(1)
    beyond = torch.arange(T, device=ext.device)[None, :] >= input_lengths[:, None]  # (B, T)
    return ext.gather(1, path).masked_fill(beyond, blank), score


def random_case(seed: int, B: int, T: int, V: int, L: int, *, ties: bool = False):
    """Log-probs (B, T, V), input lengths in [0, T] (some rows padded, one empty when B > 3),
    targets (B, L) from a small alphabet (repeats: no skip between equal labels), target lengths in
    [0, L] (some too long for their slots: score -inf). ties: log-probs on a coarse grid."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g) * 3
    if ties:
        logits = logits.round()  # many equal path scores: the tie-break rule decides
    log_probs = logits.log_softmax(-1)
    input_lengths = torch.randint(1, T + 1, (B,), generator=g)
    input_lengths[0] = T
    if B > 3:
        input_lengths[3] = 0
    labels = torch.tensor([x for x in range(min(V, 8)) if x != BLANK])
    targets = labels[torch.randint(0, labels.numel(), (B, L), generator=g)]
    target_lengths = torch.randint(0, L + 1, (B,), generator=g)
    return log_probs, input_lengths, targets, target_lengths


CASES = [dict(B=1, T=1, V=6, L=1), dict(B=3, T=5, V=5, L=3), dict(B=8, T=24, V=7, L=8),
         dict(B=6, T=40, V=12, L=13), dict(B=16, T=33, V=9, L=20), dict(B=5, T=64, V=30, L=21)]


@pytest.mark.parametrize("ties", [False, True], ids=["random", "ties"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{B}-T{T}-V{V}-L{L}".format(**c))
def test_vectorised_viterbi_equals_the_loop(case, ties):
    for seed in range(4):
        args = random_case(seed, **case, ties=ties)
        path, score = ctc_viterbi(*args, BLANK)
        ref_path, ref_score = reference_ctc_viterbi(*args, BLANK)
        assert torch.equal(path, ref_path)
        assert torch.equal(score, ref_score)


def test_half_precision_log_probs_align_like_their_float_copy():
    log_probs, *rest = random_case(0, B=4, T=20, V=9, L=7)
    path, score = ctc_viterbi(log_probs.half(), *rest, BLANK)
    ref_path, ref_score = reference_ctc_viterbi(log_probs.half(), *rest, BLANK)
    assert torch.equal(path, ref_path) and torch.equal(score, ref_score)


class _CountOps(TorchDispatchMode):
    """Counts the aten operations that compute (views left out) inside the block."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += not func.is_view
        return func(*args, **(kwargs or {}))


def ops_for(T: int, viterbi=ctc_viterbi) -> int:
    args = random_case(0, B=8, T=T, V=12, L=10)
    with _CountOps() as count:
        viterbi(*args, BLANK)
    return count.n


def test_operations_per_slot_are_few():
    """The loop ran 19 computing aten ops per slot (forward recursion and backtrace, most of them
    allocating); the forward recursion now runs 3 into preallocated buffers and the backtrace
    O(log T) in all."""
    per_slot = (ops_for(96) - ops_for(32)) / 64
    assert (ops_for(96, reference_ctc_viterbi) - ops_for(32, reference_ctc_viterbi)) / 64 == 19
    assert per_slot <= 4, f"{per_slot:.2f} aten ops per slot"
