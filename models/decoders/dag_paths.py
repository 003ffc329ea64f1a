"""Paths through a directed acyclic graph of vertices (DA-Transformer, Huang et al. 2022): the
likelihood of a target summed over every path that emits it, and the single best such path.

A graph of L_b vertices (padded to L) is given by `links` (B, L, L), the log-probability of moving
from vertex i to vertex j (-inf unless i < j < L_b), and `match` (B, M, L), the log-probability that
vertex l emits the m-th target token. A path starts at vertex 0, ends at vertex L_b - 1 and visits
exactly one vertex per target token, so M_b tokens fit only when M_b <= L_b.
Shapes: B batch, M target tokens (bos and eos included), L vertices.
"""
from __future__ import annotations

import torch
from torch import Tensor

SURE = {torch.float32: 1e-30, torch.float64: 1e-290}  # a sum of probabilities at least this is exact to rounding
FAR = -1e30  # a finite log-probability that no path's score comes near


def _first_vertex(match_0: Tensor) -> Tensor:
    """(B, L) emission log-probs of the first token -> log alpha_0: vertex 0 only."""
    first = torch.arange(match_0.size(-1), device=match_0.device) == 0  # (L,)
    return match_0.masked_fill(~first, float("-inf"))


def target_fits(graph_lengths: Tensor, target_lengths: Tensor) -> Tensor:
    """(B,) True where a path exists: one token on a one-vertex graph, or 2 <= M_b <= L_b (first != last)."""
    return (target_lengths <= graph_lengths) & (target_lengths >= 1) & ((target_lengths >= 2) | (graph_lengths == 1))


def _on_a_completing_path(m: int, L: int, graph_lengths: Tensor, target_lengths: Tensor) -> Tensor:
    """(B, L) True at the vertices that the m-th target token can sit on in a path that ends at the last
    vertex: m <= j and j - m <= L_b - M_b (enough vertices left for the remaining tokens)."""
    j = torch.arange(L, device=graph_lengths.device)[None, :]  # (1, L)
    return (j >= m) & (j - m <= (graph_lengths - target_lengths)[:, None]) & (m < target_lengths)[:, None]


def _scaled_forward(match: Tensor, links: Tensor, graph_lengths: Tensor, target_lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The forward algorithm with scaled probabilities, in match's dtype, over the vertices of completing
    paths only (the others cannot reach the answer). -> the likelihood (B,) before the fit mask, and the
    rows (B,) where such a vertex fell below SURE of its step's best: there terms may have underflowed,
    or the floor at the dtype's tiny (which keeps gradients finite) lifted a value, so the row's answer
    is not exact."""
    B, M, L = match.shape
    trans = links.exp()  # (B, L, L) transition probabilities, 0 where not allowed
    alpha = _first_vertex(match[:, 0])  # (B, L)
    last_vertex = (graph_lengths - 1).clamp(min=0)[:, None]  # (B, 1)
    answer = alpha.gather(1, last_vertex).squeeze(1).masked_fill(target_lengths != 1, 0.0)  # (B,)
    doubtful = torch.zeros(B, dtype=torch.bool, device=match.device)
    held = _on_a_completing_path(0, L, graph_lengths, target_lengths)  # (B, L) vertices that may hold token 0
    for m in range(1, M):
        # only those carry mass on: a floored value elsewhere (an unreachable vertex) would leak into the answer
        alpha = alpha.masked_fill(~held, float("-inf"))
        shift = alpha.amax(-1, keepdim=True).detach().clamp(min=torch.finfo(match.dtype).min)  # (B, 1); none held: 0s
        prob = (alpha - shift).exp()  # (B, L)
        mixed = torch.bmm(prob.unsqueeze(1), trans).squeeze(1)  # (B, L) sum over predecessors
        held = _on_a_completing_path(m, L, graph_lengths, target_lengths)
        doubtful |= ((mixed < SURE[match.dtype]) & held).any(-1)
        alpha = mixed.clamp(min=torch.finfo(match.dtype).tiny).log() + shift + match[:, m]  # (B, L)
        here = target_lengths == m + 1  # (B,) rows whose last token is m
        answer = torch.where(here, alpha.gather(1, last_vertex).squeeze(1), answer)
    return answer, doubtful


def _log_space_forward(match: Tensor, links: Tensor, graph_lengths: Tensor, target_lengths: Tensor) -> Tensor:
    """The same recursion with a logsumexp over predecessors: exact at any range, O(B M L^2) memory.
    Links that may not be taken are FAR rather than -inf, so that no gradient is inf - inf."""
    B, M, L = match.shape
    alpha = _first_vertex(match[:, 0]).clamp(min=FAR)  # (B, L)
    links = links.clamp(min=FAR)
    last_vertex = (graph_lengths - 1).clamp(min=0)[:, None]
    answer = alpha.gather(1, last_vertex).squeeze(1).masked_fill(target_lengths != 1, 0.0)
    for m in range(1, M):
        alpha = torch.logsumexp(alpha[:, :, None] + links, dim=1) + match[:, m]  # (B, L) over predecessors i
        answer = torch.where(target_lengths == m + 1, alpha.gather(1, last_vertex).squeeze(1), answer)
    return answer


@torch.compiler.disable  # loops over target positions (and a host check): compiled, each new length compiled again
def dag_log_likelihood(match: Tensor, links: Tensor, graph_lengths: Tensor, target_lengths: Tensor) -> Tensor:
    """log P(y | x) summed over every path that emits y: (B,), -inf where the target does not fit.

    The forward algorithm over target positions, alpha_m(j) = log sum_i exp(alpha_{m-1}(i) + links(i, j))
    + match(m, j), outside autocast. Each step is one batched product with exp(links) after shifting
    alpha by its row maximum, so memory is O(B M L) rather than O(B M L^2). Float32 holds about e^-69
    of a step's best exactly; a row with a vertex of a completing path below that is computed again in
    float64 (e^-667), and if still below, in log space (any range, O(B M L^2) memory): every row's answer
    is exact to rounding. On a trained, peaked graph most rows have such a vertex, so the float64 pass is
    the usual one there; the float32 pass alone serves an untrained, flat graph."""
    with torch.autocast(match.device.type, enabled=False):
        match, links = match.float(), links.float()
        answer, doubtful = _scaled_forward(match, links, graph_lengths, target_lengths)
        if doubtful.any():  # one host synchronisation per call
            rows = doubtful.nonzero().squeeze(1)
            part = (match[rows].double(), links[rows].double(), graph_lengths[rows], target_lengths[rows])
            again, still = _scaled_forward(*part)
            if still.any():
                again = torch.where(still, _log_space_forward(*part), again)
            answer = answer.index_put((rows,), again.float())
        fits = target_fits(graph_lengths, target_lengths)
        return answer.masked_fill(~fits, float("-inf"))


@torch.compiler.disable  # as dag_log_likelihood
@torch.no_grad()
def dag_best_alignment(match: Tensor, links: Tensor, graph_lengths: Tensor,
                       target_lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The most likely path that emits each target (max-plus over the same recursion).

    -> vertex of each target token on the best path (B, M), -1 beyond M_b; and the path's log-prob
    (B,), -inf where the target does not fit. Ties go to the lower predecessor vertex."""
    with torch.autocast(match.device.type, enabled=False):
        match, links = match.float(), links.float()
        B, M, L = match.shape
        score = _first_vertex(match[:, 0])  # (B, L)
        last_vertex = (graph_lengths - 1).clamp(min=0)  # (B,)
        rows = torch.arange(B, device=match.device)
        best = score[rows, last_vertex].masked_fill(target_lengths != 1, 0.0)  # (B,)
        back = torch.zeros(M, B, L, dtype=torch.long, device=match.device)  # (M, B, L) predecessor of j at m
        for m in range(1, M):
            score, back[m] = (score[:, :, None] + links).max(dim=1)  # (B, L) over predecessors i
            score = score + match[:, m]
            best = torch.where(target_lengths == m + 1, score[rows, last_vertex], best)
        vertex = last_vertex.clone()  # (B,) walking back from the last vertex
        path = torch.full((B, M), -1, dtype=torch.long, device=match.device)
        for m in range(M - 1, -1, -1):
            on = m < target_lengths  # (B,) rows whose path has a vertex for token m
            path[:, m] = torch.where(on, vertex, -1)
            if m > 0:
                vertex = torch.where(on, back[m, rows, vertex], vertex)
        fits = target_fits(graph_lengths, target_lengths)
        return path.masked_fill(~fits[:, None], -1), best.masked_fill(~fits, float("-inf"))
