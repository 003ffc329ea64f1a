"""Directed acyclic Transformer (DA-Transformer, Huang et al. 2022): a NAT decoder over a graph of
L = floor(lambda * S) + 2 vertices, each predicting a token and the log-probability of moving on to
every later vertex (its links).

A target [bos, y, eos] is emitted along a path from vertex 0 to the last vertex, one vertex per token;
training maximises the likelihood summed over every such path (dag_paths.dag_log_likelihood), so the
decoder learns several word orders and lengths in one graph instead of averaging them. With glancing
(on by default, as in the paper) a first pass without gradient finds the best path of the reference,
and floor(ratio * d) random vertices of that path (d: how many of them the first pass predicts wrong)
read their reference token in the second pass. Decoding is one pass and a walk through the graph
(decoding/dag_walk.py: dag-greedy, dag-lookahead, dag-viterbi). No length predictor: the path decides.
Shapes: B batch, S source length, L vertices, M target tokens (bos, eos included), D model width,
H heads, V vocabulary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from atnat.core.options import require
from atnat.models.batch import Batch
from atnat.models.decoders.base import Decoder, register_decoder
from atnat.models.decoders.dag_paths import dag_best_alignment, dag_log_likelihood, target_fits
from atnat.models.decoders.glancing import GlancingOptions, feed_tokens, glance_positions, glancing_ratio
from atnat.models.encoder import EncoderOut
from atnat.models.losses import Loss

MAX_UPSAMPLE = 64  # vertices per source token, at most (the paper's 8; links grow as the square of the graph)

MASKED = -1e9  # a finite score for links that may not be taken, before the final -inf (keeps gradients finite)


@dataclass(frozen=True)
class DAGOptions(GlancingOptions):
    """Options of the DAG decoder (plus the glat_* fields of GlancingOptions; glancing on by default)."""

    upsample: float = 8.0  # lambda: vertices per source token (L = floor(lambda * S) + 2; the paper's 8), taken as the
    # nearest fraction with a denominator up to 1000
    glat: bool = True  # glancing on the best path of the reference (the paper's training)

    def __post_init__(self):
        super().__post_init__()
        require(math.isfinite(self.upsample) and 1.0 <= self.upsample <= MAX_UPSAMPLE, "decoder options", "upsample",
                f"a number from 1 to {MAX_UPSAMPLE} (vertices per source token)", self.upsample)


def graph_size(src_length, upsample: float):
    """Vertices for a source of S tokens: floor(lambda * S) + 2 (the first and last vertex emit bos, eos).
    S an int, a (B,) tensor, or a symbolic size under torch.export: lambda is taken as the fraction p / q
    nearest it (denominator <= 1000) and the floor is an integer division, the same in all three."""
    ratio = Fraction(upsample).limit_denominator(1000)
    return src_length * ratio.numerator // ratio.denominator + 2


@register_decoder("dag")
class DAGDecoder(Decoder):
    """Mask-token inputs at L vertices -> non-causal layers -> a token distribution per vertex, and
    links from multi-head attention scores between vertices (each head's softmax over later
    vertices, mixed by a per-vertex gate)."""

    capabilities = frozenset({"dag"})
    Options = DAGOptions

    def __init__(self, cfg, options, **kwargs):
        super().__init__(cfg, options, **kwargs)
        d = cfg.d_model
        self.link_query = nn.Linear(2 * d, d)  # features and the vertex's position encoding -> query
        self.link_key = nn.Linear(2 * d, d)
        self.link_gate = nn.Linear(2 * d, cfg.n_heads)  # per vertex, how much each link head counts

    @property
    def max_target_length(self) -> None:
        return None  # a target takes no positions: the vertices come from the source (the loss leaves out a longer one)

    @property
    def max_source_length(self) -> int:
        """The largest S whose floor(lambda * S) + 2 vertices fit the positional table."""
        fits = [s for s in range(self.cfg.max_positions + 1) if graph_size(s, self.options.upsample) <= self.cfg.max_positions]
        return max(fits, default=0)

    def graph(self, memory: EncoderOut) -> tuple[Tensor, Tensor]:
        """-> vertices per sentence (B,) and the padding mask (B, L) of the padded graph, whose width
        follows the padded source width S (so that it is a function of shapes, not of values)."""
        sizes = graph_size(memory.lengths, self.options.upsample)  # (B,)
        width = graph_size(memory.padding_mask.size(1), self.options.upsample)
        return sizes, torch.arange(width, device=sizes.device)[None, :] >= sizes[:, None]  # (B, L)

    def decode_graph(self, memory: EncoderOut, padding_mask: Tensor, tokens: Tensor | None = None,
                     glanced: Tensor | None = None, need_weights: bool = False
                     ) -> tuple[Tensor, Tensor, list[Tensor | None]]:
        """One pass -> logits (B, L, V), link log-probs (B, L, L), cross-attention per layer. With
        tokens/glanced (B, L), the glanced vertices read the embedding of their token."""
        B, L = padding_mask.shape
        masks = torch.full((B, L), self.special.mask, dtype=torch.long, device=padding_mask.device)
        vectors = self.embed.tokens(masks) * self.embed.scale  # (B, L, D)
        if glanced is not None:
            vectors = feed_tokens(vectors, tokens, glanced, self.embed)
        x = self.embed.add_positions(vectors)  # (B, L, D)
        guided = {i % len(self.layers) for i in self.loss_cfg.guided_attention_layers}
        attns = []
        for i, layer in enumerate(self.layers):
            want = (need_weights and i in guided) or (self.record_attention and i == len(self.layers) - 1)
            x, w = layer(x, memory, self_mask=~padding_mask[:, None, None, :], causal=False, need_weights=want)
            attns.append(w)
        if self.record_attention:
            self.recorded_attention = attns[-1]
        features = self.final_norm(x)  # (B, L, D)
        return self.output(features), self.links(features, padding_mask), attns

    def links(self, features: Tensor, padding_mask: Tensor) -> Tensor:
        """features (B, L, D) -> link log-probs (B, L, L): row i sums to 1 over its later real vertices,
        -inf elsewhere (and everywhere in rows without a later vertex: the last and padding)."""
        B, L, D = features.shape
        H = self.cfg.n_heads
        with torch.autocast(features.device.type, enabled=False):
            x = torch.cat([features.float(), self.embed.positions[:L].float().expand(B, L, D)], -1)  # (B, L, 2D)
            q = _fp32(self.link_query, x).view(B, L, H, D // H).transpose(1, 2)  # (B, H, L, D/H)
            k = _fp32(self.link_key, x).view(B, L, H, D // H).transpose(1, 2)
            scores = q @ k.transpose(-1, -2) / math.sqrt(D // H)  # (B, H, L, L)
            later = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # (L, L) j > i
            allowed = later[None] & ~padding_mask[:, None, :] & ~padding_mask[:, :, None]  # (B, L, L)
            heads = scores.masked_fill(~allowed[:, None], MASKED).log_softmax(-1)  # (B, H, L, L)
            gates = _fp32(self.link_gate, x).log_softmax(-1).transpose(1, 2)  # (B, H, L)
            mixed = (heads + gates[..., None]).logsumexp(1)  # (B, L, L)
        return mixed.masked_fill(~allowed, float("-inf"))

    def forward_dag(self, memory: EncoderOut) -> tuple[Tensor, Tensor, Tensor]:
        """-> token log-probs per vertex (B, L, V), link log-probs (B, L, L), padding mask (B, L) True
        at pad (the DAGModel protocol of decoding/base.py)."""
        _, padding_mask = self.graph(memory)
        logits, links, _ = self.decode_graph(memory, padding_mask)
        return F.log_softmax(logits.float(), -1), links, padding_mask

    # ---- training ----------------------------------------------------------------------------
    def targets(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """[bos, y, eos] per sentence (B, M), padded, and the lengths M_b = |y| + 2."""
        sp = self.special
        y = F.pad(batch.tgt, (1, 1), value=sp.pad)  # (B, T + 2)
        y[:, 0] = sp.bos
        lengths = batch.tgt_lengths + 2
        y = y.scatter(1, (lengths - 1)[:, None], sp.eos)
        return y, lengths

    @staticmethod
    def emissions(logits: Tensor, targets: Tensor) -> Tensor:
        """logits (B, L, V), targets (B, M) -> match (B, M, L): log P(target m | vertex l). One fused
        log-softmax (twice as fast on the CPU as logsumexp's separate passes, at the cost of keeping it)."""
        log_probs = F.log_softmax(logits.float(), -1)  # (B, L, V)
        return log_probs.gather(2, targets[:, None, :].expand(-1, logits.size(1), -1)).transpose(1, 2)  # (B, M, L)

    def glance(self, memory: EncoderOut, padding_mask: Tensor, sizes: Tensor, targets: Tensor,
               lengths: Tensor, step: int) -> tuple[Tensor, Tensor]:
        """GLAT on the graph: the best path of the reference under a first pass without gradient
        gives each of its vertices a token; floor(ratio * d) random path vertices (d: those whose
        argmax differs) read it. -> vertex tokens (B, L) and the glanced vertices (B, L)."""
        with torch.no_grad():
            logits, links, _ = self.decode_graph(memory, padding_mask)
            path, _ = dag_best_alignment(self.emissions(logits, targets), links, sizes, lengths)  # (B, M)
        on_path = path >= 0  # (B, M)
        oracle = torch.full(padding_mask.shape, self.special.pad, dtype=torch.long, device=path.device)
        oracle = _scatter_rows(oracle, path.clamp(min=0), targets, on_path)  # (B, L)
        off_path = oracle.eq(self.special.pad)  # (B, L) vertices no reference token sits on
        glanced = glance_positions(logits.argmax(-1), oracle, off_path, glancing_ratio(self.options, step))
        return oracle, glanced

    def loss(self, batch: Batch, memory: EncoderOut, *, step: int = 0) -> dict[str, Loss]:
        sizes, padding_mask = self.graph(memory)
        targets, lengths = self.targets(batch)
        tokens = glanced = None
        if self.options.glat and self.training:
            tokens, glanced = self.glance(memory, padding_mask, sizes, targets, lengths, step)
        logits, links, attns = self.decode_graph(memory, padding_mask, tokens, glanced,
                                                 need_weights=self.wants_attention)
        likelihood = dag_log_likelihood(self.emissions(logits, targets), links, sizes, lengths)  # (B,)
        # a target longer than its graph is left out, and counted; a non-finite likelihood of one that fits stays in
        # the loss (the run diverged: the divergence guard says so, not "targets too long")
        fits = target_fits(sizes, lengths)
        per_token = (likelihood / lengths.float()).masked_fill(~fits, 0.0)
        parts = {"tokens": Loss(-per_token.sum() / fits.sum().clamp(min=1)),
                 "unfit": Loss((~fits).float().mean().detach(), 0.0)}
        parts.update(self.guided_attention_part(attns, memory, sizes))
        return parts


def _scatter_rows(base: Tensor, index: Tensor, values: Tensor, keep: Tensor) -> Tensor:
    """base (B, L) with values (B, M) written at columns index (B, M) where keep (B, M)."""
    B, L = base.shape
    spill = torch.cat([base, base.new_zeros(B, 1)], 1)  # (B, L + 1): column L takes what is not kept
    spill = spill.scatter(1, index.masked_fill(~keep, L), values)
    return spill[:, :L]


def _fp32(linear: nn.Module, x: Tensor) -> Tensor:
    """A link layer on float32 features (x) in float32, whatever its weights' dtype (a model cast to
    bfloat16 or float16 keeps its link scores in float32, as under autocast). A layer an engine replaced
    (packed, bf16, int8) is called as it is: it takes float32 input and computes its own way."""
    if type(linear) is not nn.Linear or linear.weight.dtype == torch.float32:
        return linear(x)
    bias = None if linear.bias is None else linear.bias.float()
    return F.linear(x, linear.weight.float(), bias)
