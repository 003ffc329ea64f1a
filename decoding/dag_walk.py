"""Decoding a DA-Transformer graph (Huang et al. 2022): one decoder pass, then a walk from vertex 0 to
the last vertex. Every vertex on the way but the first and last (which emit bos and eos) emits its
most likely ordinary token; with `dedup` (the paper's default) a token equal to the one before it is
merged into it.

- `dag-greedy`: from each vertex, the link of highest probability.
- `dag-lookahead`: the next vertex j maximises link(i, j) + beta * (j's best token log-prob; the last
  vertex's EOS log-prob).
- `dag-viterbi`: joint Viterbi over path and length: for every number K of middle vertices, the
  path maximising the sum of link and token log-probs; the K maximising that sum / K^beta wins.

All three run one decoder pass (n_steps = 1). A hypothesis's score is its path's link log-probs plus
its tokens' log-probs; positional_scores hold the tokens'. Shapes: B batch, L vertices, V vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from atnat.core.errors import AtnatError
from atnat.core.options import require_number_between
from atnat.core.special import NEG_INF, SpecialTokens
from atnat.decoding.base import Hypotheses, Strategy, register_strategy
from atnat.decoding.candidates import argmax_ordinary, never_emitted


def vertex_tokens(log_probs: Tensor, special: SpecialTokens) -> tuple[Tensor, Tensor]:
    """(B, L, V) -> each vertex's best ordinary token's log-prob (B, L) and id (B, L)."""
    return argmax_ordinary(log_probs, never_emitted(special))


def walk(next_vertex: list[list[int]], last: list[int]) -> list[list[int]]:
    """Per row, the vertices from 0 following next_vertex (B lists of L) until the row's last vertex. Every link
    leads to a later vertex; one that does not (a broken model) is one error, not an endless walk."""
    paths = []
    for row, (step, end) in enumerate(zip(next_vertex, last)):
        path = [0]
        while path[-1] < end:
            if step[path[-1]] <= path[-1]:
                raise AtnatError(f"DAG decoding, row {row}: vertex {path[-1]} links to vertex {step[path[-1]]}, not a later "
                                 "one: the model's scores are not finite (NaN weights?)")
            path.append(step[path[-1]])
        paths.append(path)
    return paths


def read_paths(paths: list[list[int]], links: Tensor, scores: Tensor, tokens: Tensor, special: SpecialTokens,
               *, dedup: bool) -> Hypotheses:
    """Hypotheses (B, 1, T) from vertex paths (first and last vertex dropped): the middle vertices'
    tokens (equal neighbours merged with `dedup`), their log-probs, and the path's total score. The
    links are read by one gather of each path's steps: the whole (B, L, L) table as Python lists took
    most of a batch's walk."""
    score_rows, token_rows = scores.tolist(), tokens.tolist()
    index = lambda values: torch.tensor(values, dtype=torch.long, device=links.device)
    rows = index([b for b, path in enumerate(paths) for _ in path[1:]])
    steps = links[rows, index([i for path in paths for i in path[:-1]]), index([j for path in paths for j in path[1:]])]
    link_sums = links.new_zeros(len(paths), dtype=torch.float64).index_add_(0, rows, steps.double()).tolist()
    out_tokens, out_scores, totals = [], [], []
    for b, path in enumerate(paths):
        total = link_sums[b]
        ids, lps = [], []
        for v in path[1:-1]:
            total += score_rows[b][v]
            if dedup and ids and ids[-1] == token_rows[b][v]:
                continue
            ids.append(token_rows[b][v])
            lps.append(score_rows[b][v])
        out_tokens.append(ids)
        out_scores.append(lps)
        totals.append(total)
    return pack(out_tokens, out_scores, totals, special, scores.device)


def pack(tokens: list[list[int]], scores: list[list[float]], totals: list[float], special: SpecialTokens,
         device: torch.device) -> Hypotheses:
    """Per-row lists -> Hypotheses (B, 1, T) padded with pad (T at least 1)."""
    B, T = len(tokens), max([1] + [len(t) for t in tokens])
    ids = torch.full((B, 1, T), special.pad, dtype=torch.long)
    lps = torch.zeros(B, 1, T)
    for b, (row, lp) in enumerate(zip(tokens, scores)):
        ids[b, 0, : len(row)] = torch.tensor(row, dtype=torch.long)
        lps[b, 0, : len(lp)] = torch.tensor(lp)
    lengths = torch.tensor([[len(t)] for t in tokens], dtype=torch.long)
    return Hypotheses(tokens=ids.to(device), positional_scores=lps.to(device),
                      scores=torch.tensor(totals, dtype=torch.float).view(B, 1).to(device),
                      lengths=lengths.to(device), n_steps=1)


@dataclass(frozen=True)
class DAGWalk(Strategy):
    """Base of the DAG strategies: one pass, then `choose` picks each row's path."""

    requires: ClassVar[str] = "dag"

    dedup: bool = True  # merge a token equal to the one before it (as the paper's decoders do)

    def search(self, model: Any, memory: Any, *, src_lengths: Tensor, special: SpecialTokens) -> Hypotheses:
        """-> Hypotheses (B, 1, T); n_steps = 1."""
        log_probs, links, padding_mask = model.forward_dag(memory)  # (B, L, V), (B, L, L), (B, L)
        scores, tokens = vertex_tokens(log_probs, special)  # (B, L) each
        ends = (~padding_mask).sum(1) - 1  # (B,) each row's last vertex
        ahead = scores.float().masked_fill(padding_mask, 0.0)  # (B, L) what reaching a vertex emits
        ahead = ahead.scatter(1, ends[:, None], log_probs[:, :, special.eos].float().gather(1, ends[:, None]))
        if bool(torch.isnan(links).any() | torch.isnan(ahead).any()):  # argmax takes a NaN for the best choice
            raise AtnatError("DAG decoding: the model's scores are not finite (NaN links or token log-probs: NaN weights?)")
        paths = self.choose(links.float(), ahead, padding_mask, ends.tolist())
        return read_paths(paths, links.float(), scores.float(), tokens, special, dedup=self.dedup)

    def choose(self, links: Tensor, ahead: Tensor, padding_mask: Tensor, last: list[int]) -> list[list[int]]:
        """links (B, L, L), ahead (B, L): each vertex's best ordinary token's log-prob (the last vertex's:
        its EOS log-prob), last (B,) -> each row's path of vertices from 0 to its last."""
        raise NotImplementedError


@register_strategy("dag-greedy")
@dataclass(frozen=True)
class DAGGreedy(DAGWalk):
    """From each vertex, its most likely link."""

    def choose(self, links, ahead, padding_mask, last):
        return walk(links.argmax(-1).tolist(), last)


@register_strategy("dag-lookahead")
@dataclass(frozen=True)
class DAGLookahead(DAGWalk):
    """From vertex i, the j maximising link(i, j) + beta * (j's best token log-prob)."""

    beta: float = 1.0  # weight of the next vertex's token log-prob against the link's
    MAX_BETA: ClassVar[float] = 50.0  # larger weights leave the links next to no say in the choice

    def __post_init__(self) -> None:
        require_number_between(self.beta, 0, self.MAX_BETA, f"strategy {self.registered_name!r}", "beta",
                               "larger weights leave the links next to no say")

    def choose(self, links, ahead, padding_mask, last):
        return walk((links + self.beta * ahead[:, None, :]).argmax(-1).tolist(), last)


@register_strategy("dag-viterbi")
@dataclass(frozen=True)
class DAGViterbi(DAGWalk):
    """Joint Viterbi: the best path for every count K of middle vertices, then the K maximising
    (sum of link and token log-probs) / K^beta. K ranges over 1 .. L_b - 2 (0 when L_b = 2)."""

    beta: float = 1.0  # length normalisation exponent (0: the highest total, which favours few tokens)
    MAX_BETA: ClassVar[float] = 50.0  # K ** -beta stays a float64 normal number for graphs of up to 10^6 vertices

    def __post_init__(self) -> None:
        require_number_between(self.beta, 0, self.MAX_BETA, f"strategy {self.registered_name!r}", "beta",
                               "the length normalisation K^beta leaves float range beyond")

    def choose(self, links, ahead, padding_mask, last):
        B, L = padding_mask.shape
        ends = torch.tensor(last, device=links.device)  # (B,)
        vertex = torch.arange(L, device=links.device)
        middle = (vertex[None, :] > 0) & (vertex[None, :] < ends[:, None])  # (B, L)
        emit = ahead.masked_fill(~middle, NEG_INF)  # (B, L) middle vertices' tokens (the ends are every path's)
        to_end = links.gather(2, ends.view(B, 1, 1).expand(B, L, 1)).squeeze(2)  # (B, L) link(j -> last)
        alpha = links[:, 0] + emit  # (B, L) one middle vertex, ending at j
        backs, totals, finals = [], [], []
        for k in range(1, max(L - 2, 1) + 1):
            if k > 1:
                alpha, back = (alpha[:, :, None] + links).max(dim=1)  # (B, L) over the previous vertex
                alpha = alpha + emit
                backs.append(back)
            total, final = (alpha + to_end).max(dim=1)  # (B,) best path of k middle vertices
            totals.append(total.double() * float(k) ** -float(self.beta))  # float64: K ** -beta is tiny for large beta
            finals.append(final)
        totals = torch.stack(totals, 1)  # (B, K)
        k_best = totals.argmax(1)  # (B,) 0-based: k_best + 1 middle vertices
        cur = torch.stack(finals, 1).gather(1, k_best[:, None]).squeeze(1)  # (B,) each row's last middle vertex
        # the walk back on the device, all rows at once: step i's vertex is backs[i - 1] at step i + 1's, for the
        # rows with more than i middle vertices (a row with fewer keeps its last vertex until its own top step)
        middle = torch.zeros(B, len(finals), dtype=torch.long, device=links.device)  # (B, K) the path's vertices
        middle[torch.arange(B, device=links.device), k_best] = cur
        for i in range(len(backs), 0, -1):
            step = backs[i - 1].gather(1, cur[:, None]).squeeze(1)
            cur = torch.where(k_best >= i, step, cur)
            middle[:, i - 1] = cur
        rows, counts = middle.tolist(), (k_best + 1).tolist()  # one copy to the host
        return [([0, last[b]] if last[b] > 0 else [0]) if last[b] <= 1  # two vertices: nothing between bos and eos
                else [0, *rows[b][: counts[b]], last[b]] for b in range(B)]
