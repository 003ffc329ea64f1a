"""Fixed buffers for the AT decoder's static-cache step (AutoregressiveDecoder.use_static_cache).

A compiled step, and above all a CUDA graph ("reduce-overhead"), replays on fixed addresses and
shapes: every tensor it reads or writes must be the same object at every step, updated in place.
So the step's inputs (tokens, step index) and its caches live in one `StaticBuffers` set of R
buffer rows: live rows are mapped onto buffer rows (`place_rows`) instead of being dropped or
copied into new tensors, and a set is taken from a small pool keyed by shape, so the next batch
of the same shape decodes in the same buffers (no new graph, no re-recording).
Shapes: L layers, R buffer rows, M memory rows, H heads, C cache positions, S source, Dh = D / H.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(eq=False)
class StaticBuffers:
    """One set of buffers the static step reads and writes in place (and nothing else)."""

    tokens: Tensor  # (R,) long: the step's input token per buffer row
    pos: Tensor  # () long: the step index (= cache position written next)
    self_k: Tensor  # (L, R, H, C, Dh) self-attention keys, position pos written in place
    self_v: Tensor  # (L, R, H, C, Dh) values
    cross_k: Tensor  # (L, M, H, S, Dh) encoder keys (buffer row r reads memory row r // (R / M))
    cross_v: Tensor  # (L, M, H, S, Dh) encoder values
    memory_mask: Tensor | None  # (M, 1, 1, S) True where attendable; None: a batch without padding
    owner: object = None  # the decode (its init_state call) the set belongs to now

    def step_inputs(self) -> tuple[Tensor | None, ...]:
        return self.tokens, self.pos, self.self_k, self.self_v, self.cross_k, self.cross_v, self.memory_mask


class BufferPool:
    """StaticBuffers sets by shape, dtype, device and inference mode; the `size` used last are kept
    (2: a beam search takes one for its sentences, one for their beams), the rest released."""

    def __init__(self, size: int = 2):
        self.size = size
        self._sets: OrderedDict[tuple, StaticBuffers] = OrderedDict()

    def take(self, owner: object, *, rows: int, capacity: int, cross: Tensor, masked: bool) -> StaticBuffers:
        """A set for `rows` buffer rows, `capacity` positions and encoder keys shaped like `cross`
        (L, M, H, S, Dh), now owned by `owner`; its self-attention caches and step index zeroed
        (stale values could be inf, and 0 x inf under the position mask is NaN)."""
        n_layers, m, h, s, dh = cross.shape
        key = (rows, capacity, tuple(cross.shape), cross.dtype, cross.device, masked,
               torch.is_inference_mode_enabled())  # inference tensors refuse in-place updates outside it
        buf = self._sets.pop(key, None)
        if buf is None:
            zeros = cross.new_zeros
            buf = StaticBuffers(
                tokens=torch.zeros(rows, dtype=torch.long, device=cross.device),
                pos=torch.zeros((), dtype=torch.long, device=cross.device),
                self_k=zeros(n_layers, rows, h, capacity, dh), self_v=zeros(n_layers, rows, h, capacity, dh),
                cross_k=torch.empty_like(cross), cross_v=torch.empty_like(cross),
                memory_mask=torch.ones(m, 1, 1, s, dtype=torch.bool, device=cross.device) if masked else None)
            for t in buf.step_inputs():  # mutated in place by the graph: cudagraphs must not copy them
                if t is not None:
                    torch._dynamo.mark_static_address(t, guard=False)
        else:
            buf.self_k.zero_()
            buf.self_v.zero_()
            buf.pos.zero_()
        self._sets[key] = buf
        while len(self._sets) > self.size:
            self._sets.popitem(last=False)
        buf.owner = owner
        return buf

    def clear(self) -> None:
        self._sets.clear()


def place_rows(src: Tensor, group: int) -> tuple[Tensor | None, bool]:
    """Buffer rows for live rows that continue buffer rows `src` (R',), each kept within its
    memory row's block of `group` buffer rows: the k-th live row of a block takes the block's k-th
    buffer row (beam k of a sentence stays at row sentence * K + k; greedy rows stay where they are).
    -> (dst (R',), whether any row moves), or (None, True) when a block has more live rows than
    buffer rows (the buffers need a new layout). One host sync."""
    mem = torch.div(src, group, rounding_mode="floor")  # (R',) memory row of each live row
    sorted_mem, perm = mem.sort(stable=True)
    first = torch.searchsorted(sorted_mem, sorted_mem)  # (R',) where each memory row's block starts
    rank = torch.empty_like(src).scatter_(0, perm, torch.arange(src.numel(), device=src.device) - first)
    dst = mem * group + rank  # (R',)
    overflow, moved = torch.stack([(rank >= group).any(), (dst != src).any()]).tolist()
    return (None, True) if overflow else (dst, moved)


class StaticStep(torch.nn.Module):
    """The static-cache step of an AT decoder as a module of tensors only, for torch.export /
    AOTInductor: forward(tokens, pos, self_k, self_v, cross_k, cross_v, memory_mask) -> log-probs
    (R, V), updating the caches and pos in place; `group` (rows per memory row) is fixed per module."""

    DIMS = {"M": (1, 65536), "S": (1, 4096), "C": (1, 4096)}  # the dynamic dimensions' ranges (min, max)

    def __init__(self, decoder, group: int):
        super().__init__()
        self.decoder, self.group = decoder, group

    def forward(self, tokens: Tensor, pos: Tensor, self_k: Tensor, self_v: Tensor, cross_k: Tensor,
                cross_v: Tensor, memory_mask: Tensor) -> Tensor:
        return self.decoder._static_step(tokens, pos, self_k, self_v, cross_k, cross_v, memory_mask, self.group)

    def example(self, dtype: torch.dtype = torch.float32) -> tuple[tuple[Tensor, ...], tuple]:
        """Example inputs of a masked step and their dynamic dimensions (torch.export.Dim): M memory
        rows, R = group x M buffer rows, S source positions, C cache positions. The example sizes
        are distinct and above 1, so that export specialises none of them."""
        dim = torch.export.Dim
        m, s, c = 3, 7, 16
        n_layers, h = len(self.decoder.layers), self.decoder.layers[0].self_attn.h
        dh = self.decoder.layers[0].self_attn.dh
        r = self.group * m
        dev = next(self.decoder.parameters()).device  # (an int8 output layer has no float weight)
        cache = lambda n, t: torch.zeros(n_layers, n, h, t, dh, dtype=dtype, device=dev)  # (L, n, H, t, Dh)
        args = (torch.full((r,), 4, dtype=torch.long, device=dev), torch.zeros((), dtype=torch.long, device=dev),
                cache(r, c), cache(r, c), cache(m, s).normal_(), cache(m, s).normal_(),
                torch.ones(m, 1, 1, s, dtype=torch.bool, device=dev))
        rows_m, src, cap = (dim(name, min=low, max=high) for name, (low, high) in self.DIMS.items())
        rows = rows_m * self.group if self.group > 1 else rows_m
        shapes = ({0: rows}, None, {1: rows, 3: cap}, {1: rows, 3: cap}, {1: rows_m, 3: src}, {1: rows_m, 3: src},
                  {0: rows_m, 3: src})
        return args, shapes


def static_step_problem(decoder) -> str | None:
    """Why the fixed-shape step (AutoregressiveDecoder._static_step) would not compute what the decoder's
    own `step` computes, or None. It is written against atnat's own parts: the embedding's `tokens`, `scale`
    and positional table (not TokenEmbedding.forward), the attention's projections and `attend_fused` (not
    MultiHeadAttention.attend), a layer's sublayers (not DecoderLayer.forward). A decoder whose embedding,
    attention or layers are other classes - a plugin's, with their own forward - keeps its eager step,
    unless it declares that the static step is exact for it (`static_step_exact = True` on the decoder or on
    the module's class, as an engine's packed replacements do) or writes its own `_static_step`. So does one
    that overrides a method only its eager step calls (EAGER_STEP_PARTS), or `step`, `init_state` or
    `reorder_state` (STATE_METHODS: its own may index the growing cache's tensors in the fixed-shape state)."""
    from atnat.models.decoders.autoregressive import AutoregressiveDecoder

    cls = type(decoder)
    if getattr(cls, "static_step_exact", False) or cls._static_step is not AutoregressiveDecoder._static_step:
        return None
    for name in EAGER_STEP_PARTS:  # what the decoder's own step calls and the fixed-shape step does not
        if getattr(cls, name) is not getattr(AutoregressiveDecoder, name):
            return (f"{cls.__module__}.{cls.__qualname__} overrides {name}, which the fixed-shape step does not "
                    "call")
    for name in STATE_METHODS:  # written against the growing cache: they may not read the fixed-shape one
        if getattr(cls, name) is not getattr(AutoregressiveDecoder, name):
            return (f"{cls.__module__}.{cls.__qualname__} overrides {name}, which may not read the fixed-shape "
                    "step's state (declare static_step_exact = True where it reaches it through super())")
    return foreign_part(decoder)


EAGER_STEP_PARTS = ("_cross", "_window_mask", "_grow")
STATE_METHODS = ("step", "init_state", "reorder_state")  # a plugin's own may index buffers the fixed-shape step keeps


def foreign_part(decoder) -> str | None:
    """The first of an AT decoder's embedding, layers and attentions that is not atnat's own class (nor
    declares `static_step_exact`, i.e. that its forward is atnat's), named with its class; or None."""
    from atnat.models.decoders.base import DecoderLayer
    from atnat.models.layers import MultiHeadAttention, TokenEmbedding

    parts = [("embed", decoder.embed, TokenEmbedding)]
    for i, layer in enumerate(decoder.layers):
        parts += [(f"layers.{i}", layer, DecoderLayer), (f"layers.{i}.self_attn", layer.self_attn, MultiHeadAttention),
                  (f"layers.{i}.cross_attn", layer.cross_attn, MultiHeadAttention)]
    for name, module, base in parts:
        if type(module) is not base and not getattr(type(module), "static_step_exact", False):
            return f"{name} is {type(module).__module__}.{type(module).__qualname__}, not atnat's {base.__name__}"
    return None
