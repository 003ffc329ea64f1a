"""`speculative`: lossless speculative decoding with a NAT drafter (Xia et al. 2023; Leviathan et al.
2023). The output is the AT's greedy output, token for token, reached in fewer sequential passes. (The
verifier's block pass sums the same products as greedy's steps in another order, so two tokens whose
scores tie within float rounding could be chosen differently; evaluation counts the sentences whose
output equals greedy's, `verifier_greedy_match`. An AT whose block pass would compute something else than
its own step - a plugin's parts or step, int8 layers - is refused as a verifier: block_verify_problem.)

Each round, the drafter (a NAT that fills masked slots after given tokens) reads the accepted prefix
followed by masks up to its predicted length and proposes the next `block` tokens (an EOS where the
predicted length ends); the AT verifier reads the last accepted token and the draft in one cached
pass and gives its own next token after each prefix. The longest prefix of the draft that equals the
AT's choices is kept, plus the AT's own next token: at least one token a round, as greedy would
emit. Lengths follow greedy's rules (max_len_a/b/cap, EOS kept and counted); set them as on the
greedy strategy being reproduced (greedy's min_len, no_repeat_ngram and attention window have no
counterpart here). Drafters: any decoder with the `parallel` capability. A CMLM is trained to fill
masks given the other tokens, so it drafts well; a NAT trained with glancing has seen reference
tokens among its inputs; a vanilla NAT never has (its drafts are poor, the output still exact). CTC
and DAG decoders take no tokens as input and cannot draft after a prefix. Shapes: R live rows, W
drafter slots, K block, V vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch
from torch import Tensor

from atnat.core.errors import AtnatError
from atnat.core.options import MAX_SEARCH, require_between
from atnat.core.special import MAX_LEN_B, NEG_INF, SpecialTokens, check_length_rule
from atnat.decoding.base import BlockVerifier, Hypotheses, Strategy, register_strategy
from atnat.decoding.candidates import best_tokens, predicted_lengths
from atnat.decoding.lengths import CAPPED, step_budget
from atnat.decoding.processors import forbidden_ids


def draft(model: Any, memory: Any, out: Tensor, accepted: Tensor, lengths: Tensor, block: int,
          special: SpecialTokens) -> Tensor:
    """One drafter pass: the accepted tokens out (R, T) (the first accepted (R,) of each row), masks up to
    each row's predicted length where it lies past them (else accepted + block slots, all proposed from
    the masks), no more than the model's positions -> the next `block` tokens (R, K); a draft position at
    or past the sentence's last slot proposes EOS (the verifier keeps it only where it would emit it too)."""
    total = torch.where(lengths > accepted, lengths, accepted + block)  # (R,) slots of the drafter's sentence
    if (slots := getattr(getattr(model, "cfg", None), "max_positions", None)) is not None:  # no more slots than
        total = total.clamp(max=slots)  # its positions: past them it proposes EOS (the verifier still decides)
    W = int(total.max())
    slots = torch.arange(W, device=out.device)[None, :]  # (1, W)
    padding_mask = slots >= total[:, None]  # (R, W)
    known = out[:, :W] if out.size(1) >= W else torch.nn.functional.pad(out, (0, W - out.size(1)))
    inputs = torch.where(slots < accepted[:, None], known, special.mask).masked_fill(padding_mask, special.pad)
    tokens, _ = best_tokens(model.forward_parallel(inputs, memory, padding_mask), padding_mask, special)  # (R, W)
    where = accepted[:, None] + torch.arange(block, device=out.device)[None, :]  # (R, K)
    proposed = tokens.gather(1, where.clamp(max=W - 1))
    return proposed.masked_fill(where >= total[:, None], special.eos)


@register_strategy("speculative")
@dataclass(frozen=True)
class Speculative(Strategy):
    """Draft `block` tokens with the NAT, keep what the AT verifier agrees with (+ its own next token)."""

    requires: ClassVar[str] = "parallel"
    needs_verifier: ClassVar[bool] = True
    label_options: ClassVar[tuple[str, ...]] = ("block",)

    block: int = 5  # K: tokens drafted per round (the verifier reads K + 1); at most the output budget
    max_len_a: float = 2.0  # the greedy output reproduced has at most floor(a * source length + b) content tokens ...
    max_len_b: int = 10  # ... (see max_len_a) ...
    max_len_cap: int = 1024  # ... and never more than this (greedy's defaults, as greedy's options)

    def __post_init__(self) -> None:
        owner = f"strategy {self.registered_name!r}"
        require_between(self.block, 1, MAX_SEARCH, owner, "block")
        require_between(self.max_len_cap, 1, MAX_LEN_B, owner, "max_len_cap")
        check_length_rule(self.max_len_a, self.max_len_b, owner, "max_len", CAPPED)

    @property
    def short_label(self) -> str:
        return f"speculative-k{self.block}"

    def search(self, model: Any, memory: Any, *, src_lengths: Tensor, special: SpecialTokens,
               verifier: Callable[[], BlockVerifier] | None = None) -> Hypotheses:
        """-> Hypotheses (B, 1, T) equal to the verifier's greedy output; n_steps = drafter + verifier passes.
        `verifier()` builds the AT verifier of this batch (its own encoding of the sources, its cache)."""
        if verifier is None:
            raise AtnatError("strategy 'speculative' needs an AT verifier: give the cell a teacher (grid: teacher: "
                             "CELL) or pass --teacher, a trained AT")
        verifier = verifier()
        dev = src_lengths.device
        max_len, T, _ = step_budget(self, src_lengths, verifier.max_output_length)
        B = max_len.numel()
        block = min(self.block, T)  # no round keeps more than T tokens: a longer draft would only cost memory
        lengths = predicted_lengths(model, memory, 1)[:, 0]  # (B,) the drafter's sentence lengths
        out_tok = torch.full((B, T), special.pad, dtype=torch.long, device=dev)
        out_lp, out_len = torch.zeros(B, T, device=dev), torch.zeros(B, dtype=torch.long, device=dev)
        width = T + block + 1  # a round may look past a row's maximum; those columns are never kept
        tok = torch.full((B, width), special.pad, dtype=torch.long, device=dev)  # (R, width) live rows
        lp = torch.zeros(B, width, device=dev)
        n = torch.zeros(B, dtype=torch.long, device=dev)  # (R,) tokens accepted so far
        last = torch.full((B,), special.bos, dtype=torch.long, device=dev)  # (R,) the newest, not yet read
        alive = torch.arange(B, device=dev)
        banned = torch.tensor(list(forbidden_ids(special)), device=dev)
        drafts = verifies = accepted = sentence_passes = 0
        span = torch.arange(block + 1, device=dev)[None, :]  # (1, K + 1)
        while alive.numel():
            proposal = draft(model, memory, tok, n, lengths, block, special)  # (R, K)
            logp = verifier.step_block(torch.cat([last[:, None], proposal], 1), n)  # (R, K + 1, V)
            drafts, verifies = drafts + 1, verifies + 1
            scores, choice = logp.index_fill(-1, banned, NEG_INF).max(-1)  # (R, K + 1) the AT's greedy picks
            agree = (choice[:, :-1] == proposal).long().cumprod(1).sum(1)  # (R,) drafts the AT agrees with
            ends = (choice == special.eos) & (span <= agree[:, None])  # (R, K + 1) an EOS among the kept
            first_eos = torch.where(ends.any(1), ends.long().argmax(1), block + 1)
            keep = torch.minimum(torch.minimum(agree + 1, first_eos + 1), max_len - n)  # (R,) tokens kept
            cols = n[:, None] + span  # (R, K + 1) where the kept tokens go
            kept = span < keep[:, None]
            tok.scatter_(1, cols, torch.where(kept, choice, tok.gather(1, cols)))
            lp.scatter_(1, cols, torch.where(kept, scores, lp.gather(1, cols)))
            accepted, sentence_passes = accepted + int(keep.sum()), sentence_passes + keep.numel()
            last = choice.gather(1, (keep - 1)[:, None]).squeeze(1)
            n = n + keep
            done = (last == special.eos) | (n >= max_len)  # (R,)
            if bool(done.any()):
                rows = done.nonzero().squeeze(1)
                ids = alive[rows]
                out_tok[ids], out_lp[ids], out_len[ids] = tok[rows, :T], lp[rows, :T], n[rows]
                live = (~done).nonzero().squeeze(1)
                if live.numel():
                    verifier.keep(live)
                    memory = model.reorder_memory(memory, live)
                tok, lp, n, last, alive, lengths, max_len = (
                    x[live] for x in (tok, lp, n, last, alive, lengths, max_len))
        width = max(int(out_len.max()), 1) if B else 1
        return Hypotheses(tokens=out_tok[:, None, :width], positional_scores=out_lp[:, None, :width],
                          scores=out_lp.sum(1)[:, None], lengths=out_len[:, None], n_steps=drafts + verifies,
                          passes={"drafter": drafts, "verifier": verifies}, accepted=(accepted, sentence_passes))
