"""The autoregressive Transformer decoder: teacher forcing in training, KV-cached `step` at
inference, plus two options against exposure bias (input noise and scheduled sampling)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from atnat.core.compile_cache import private_compile_cache
from atnat.core.errors import AtnatError
from atnat.core.options import require_choice, require_number_between
from atnat.models.batch import Batch
from atnat.models.decoders.base import Decoder, register_decoder
from atnat.models.decoders.static_cache import BufferPool, StaticBuffers, place_rows, static_step_problem
from atnat.models.encoder import EncoderOut
from atnat.models.losses import Loss, label_smoothed_nll, token_accuracy

SCHEDULES = ("none", "linear", "exponential", "inverse_sigmoid")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")  # torch.compile modes for the static step
STEP_ATTENTION = ("sdpa", "fused")  # the static step's attention: SDPA, or MultiHeadAttention.attend_fused


@dataclass(frozen=True)
class ATOptions:
    """Options of the AT decoder (defaults: plain teacher forcing)."""

    input_noise: float = 0.0  # fraction of teacher-forced inputs replaced by random tokens
    scheduled_sampling: str = "none"  # none | linear | exponential | inverse_sigmoid (Bengio et al. 2015)
    sampling_k: float = 2000.0  # schedule speed: steps to reach max (linear), k of the exp/sigmoid decay
    sampling_max: float = 0.25  # largest probability of feeding the model's own prediction

    def __post_init__(self):
        require_choice(self.scheduled_sampling, SCHEDULES, "decoder options", "scheduled_sampling")
        for name in ("input_noise", "sampling_max"):  # probabilities
            require_number_between(getattr(self, name), 0.0, 1.0, "decoder options", name)
        require_number_between(self.sampling_k, 1.0, 1e9, "decoder options", "sampling_k", "the schedule's speed, in steps")


def sampling_probability(schedule: str, step: int, k: float, cap: float) -> float:
    """Probability of replacing a gold input by the model's prediction at a training step."""
    if schedule == "none":
        return 0.0
    if schedule == "linear":
        gold = 1.0 - step / max(k, 1.0)
    elif schedule == "exponential":
        gold = (1.0 - 1.0 / max(k, 1.0)) ** step
    else:  # inverse sigmoid: gold = k / (k + exp(step / k)); e ** x, not math.exp, stays symbolic under
        gold = k / (k + math.e ** min(step / k, 700.0))  # torch.compile (exp made a compiled step recompile each step)
    return min(cap, max(0.0, 1.0 - gold))


@dataclass
class ATState:
    """Incremental decoding state, owned by the search strategy.

    self_k/self_v (L, R, H, C, Dh): cached self-attention keys/values of R rows with capacity C
    (written in place at position t). cross_k/cross_v (L, M, H, S, Dh): encoder keys/values of M
    memory rows; `group` > 0 says rows are laid out as M contiguous groups of `group` rows (a beam),
    so cross-attention runs the group's queries together instead of copying memory per row.
    With the static cache (`static` set) these tensors are the fixed buffers of `static`: R counts
    buffer rows, and the strategy's rows are buffer rows `rows`; the others are finished, masked out.
    """

    self_k: Tensor
    self_v: Tensor
    cross_k: Tensor
    cross_v: Tensor
    memory_mask: Tensor | None  # (M, 1, 1, S) True where attendable; None: no padding at all
    row_to_memory: Tensor  # (R,) memory row of each decoder row
    group: int
    t: int = 0
    window: tuple[int, int] | None = None  # decode-time monotonic attention window (back, forward)
    focus: Tensor | None = None  # (R,) source position each row attended last (window centre)
    static: StaticBuffers | None = None  # static cache: the buffers the step runs on (shapes never change)
    rows: Tensor | None = None  # static cache: (R',) buffer row of each of the strategy's rows
    lease: object = None  # static cache: this decode's claim on `static` (a newer decode may take it)
    spare: tuple[Tensor, Tensor] | None = None  # growing cache: the caches before the last reorder, written
    # by the next reorder of as many rows instead of new tensors (a beam step reuses memory it just freed)

    @property
    def pos(self) -> Tensor | None:
        """Static cache: the 0-dim step index on the device; None otherwise."""
        return None if self.static is None else self.static.pos


@register_decoder("at")
class AutoregressiveDecoder(Decoder):
    """Causal self-attention + cross-attention (Vaswani et al. 2017)."""

    capabilities = frozenset({"step"})
    Options = ATOptions

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        keeps_loss = cls.loss is AutoregressiveDecoder.loss  # its teacher forcing reads the AT's options
        if keeps_loss and not (isinstance(cls.Options, type) and issubclass(cls.Options, ATOptions)):
            raise TypeError(f"{cls.__name__}.Options must subclass atnat.models.decoders.autoregressive.ATOptions: it "
                            "keeps the AT's loss, whose teacher forcing reads input_noise and the scheduled-sampling "
                            "options (e.g. @dataclass(frozen=True) class MyOptions(ATOptions): ...), or write its own "
                            "loss")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.static_cache = False  # see use_static_cache
        self._static_impl = self._static_step
        self._static_pool = BufferPool()  # buffer sets of recent static decodes, reused by shape
        self._static_masked = False  # always give the step a memory mask (all True without padding)
        self._static_attention = "sdpa"
        self._static_max_rows: int | None = None  # static only for decodes of at most this many sentences

    def use_static_cache(self, enabled: bool = True, compile_mode: str | None = None, *, step=None,
                         always_mask: bool = False, attention: str = "sdpa", max_rows: int | None = None) -> None:
        """Decode with a fixed-shape step: the KV cache is allocated once for the strategy's
        maximum length and every step attends over all of it under a position mask, with the step
        index kept on the device. Shapes then never change from step to step, which is what
        `torch.compile` (`compile_mode`: "default", "reduce-overhead" = CUDA graphs, "max-autotune")
        needs to compile the step once. More: the step runs on the same tensors at every step (and
        on those of the last decode of the same shapes; see static_cache.py): finished rows stay in
        the buffers, masked out, and beams are reordered in place. Not used with a monotonic
        attention window.
        An engine (experiments/modelfiles/engines.py) gives its own `step`, a callable with the
        signature of `_static_step` (e.g. an AOTInductor package of `static_step_module`);
        `always_mask` gives the step a memory mask even when the batch has no padding (one compiled
        variant instead of two); `attention` "fused" writes the step's attention as
        MultiHeadAttention.attend_fused (for a compiler to fuse); `max_rows` limits the static step
        to decodes of at most that many sentences (larger ones grow their cache as without it)."""
        require_choice(attention, STEP_ATTENTION, "use_static_cache", "attention")
        problem = static_step_problem(self) if enabled else None
        if problem:
            raise AtnatError(f"the fixed-shape step would not compute this decoder's own step: {problem}; decode it "
                             "eager (or declare static_step_exact = True where the static step is exact for it)")
        if max_rows is not None and (not isinstance(max_rows, int) or max_rows < 1):
            raise AtnatError(f"use_static_cache: max_rows {max_rows!r} must be a positive integer or None")
        self._static_max_rows = max_rows
        self.static_cache = enabled
        self._static_pool.clear()
        self._static_masked, self._static_attention = always_mask, attention
        self._static_impl = step or self._static_step
        if compile_mode:
            private_compile_cache()  # see core/compile_cache.py
            self._static_impl = torch.compile(self._static_impl, mode=compile_mode, dynamic=None)

    @property
    def max_output_length(self) -> int:
        """Content tokens an output can have: n tokens and EOS take n + 1 decoder positions."""
        return self.cfg.max_positions - 1

    @property
    def max_target_length(self) -> int:
        return self.max_output_length  # teacher forcing reads BOS and the target, and predicts it and EOS

    # ---- training ---------------------------------------------------------------------------
    def forward(self, prev_tokens: Tensor, memory: EncoderOut, need_weights=False):
        """Teacher-forced pass: prev_tokens (B, T) starting with BOS -> logits (B, T, V), attns."""
        x = self.embed(prev_tokens)  # (B, T, D)
        return self.run_layers(x, memory, self_mask=None, causal=True, need_weights=need_weights)

    def shift(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """Targets -> (decoder inputs BOS y, outputs y EOS): (B, T+1) each."""
        sp = self.special
        b = batch.tgt.size(0)
        bos = batch.tgt.new_full((b, 1), sp.bos)
        prev = torch.cat([bos, batch.tgt], 1)  # (B, T+1)
        out = torch.cat([batch.tgt, batch.tgt.new_full((b, 1), sp.pad)], 1)  # (B, T+1)
        out = out.scatter(1, batch.tgt_lengths.unsqueeze(1), sp.eos)
        return prev, out

    def noisy_inputs(self, prev: Tensor, step: int, memory: EncoderOut) -> Tensor:
        """Apply input noise and scheduled sampling to teacher-forced inputs (B, T)."""
        opt, sp = self.options, self.special
        keep = prev.ne(sp.pad) & prev.ne(sp.bos)
        if opt.input_noise > 0:
            noise = torch.randint(sp.first_ordinary, self.vocab_size, prev.shape, device=prev.device)
            flip = (torch.rand(prev.shape, device=prev.device) < opt.input_noise) & keep
            prev = torch.where(flip, noise, prev)
        p = sampling_probability(opt.scheduled_sampling, step, opt.sampling_k, opt.sampling_max)
        if p > 0:
            with torch.no_grad():  # first pass: the model's own predictions under teacher forcing
                logits, _ = self.forward(prev, memory)
            predicted = torch.cat([prev[:, :1], logits[:, :-1].argmax(-1)], 1)  # (B, T)
            flip = (torch.rand(prev.shape, device=prev.device) < p) & keep
            prev = torch.where(flip, predicted, prev)
        return prev

    def loss(self, batch: Batch, memory: EncoderOut, *, step: int = 0) -> dict[str, Loss]:
        prev, out = self.shift(batch)
        if self.training:
            prev = self.noisy_inputs(prev, step, memory)
        logits, attns = self.forward(prev, memory, need_weights=self.wants_attention)
        lp = F.log_softmax(logits.float(), -1)  # (B, T+1, V)
        pad = self.special.pad
        parts = {"tokens": Loss(label_smoothed_nll(lp, out, smoothing=self.loss_cfg.label_smoothing,
                                                   ignore_index=pad)),
                 "token_accuracy": Loss(token_accuracy(lp.detach(), out, pad), 0.0)}
        parts.update(self.guided_attention_part(attns, memory, batch.tgt_lengths + 1))
        return parts

    def score_sequences(self, memory: EncoderOut, tokens: Tensor, padding_mask: Tensor) -> Tensor:
        """Teacher-forced total log-prob of given outputs incl. EOS: tokens (B, T) -> (B,)."""
        lengths = (~padding_mask).sum(1)
        tgt = tokens.masked_fill(padding_mask, self.special.pad)
        batch = Batch(tgt, tgt, lengths, lengths, lengths)
        prev, out = self.shift(batch)
        logits, _ = self.forward(prev, memory)
        lp = F.log_softmax(logits.float(), -1).gather(-1, out.unsqueeze(-1)).squeeze(-1)  # (B, T+1)
        counted = torch.arange(out.size(1), device=out.device)[None, :] <= lengths[:, None]  # (B, T+1) y, EOS
        return lp.masked_fill(~counted, 0.0).sum(1)  # a pad id inside a candidate is scored, not free

    # ---- incremental inference (the StepModel protocol) --------------------------------------
    def init_state(self, memory: EncoderOut, capacity: int = 16,
                   window: tuple[int, int] | None = None, max_steps: int | None = None) -> ATState:
        """Cache the encoder keys/values of every layer once; empty self-attention caches.
        `window` = (back, forward) restricts cross-attention to a band around the source position
        attended last, which only moves forward (guided attention at decode time). With the static
        cache on and `max_steps` known, the cache holds max_steps (rounded up to 16) positions."""
        static = self.static_cache and window is None and max_steps is not None
        if static and self._static_max_rows is not None:
            static = memory.states.size(0) <= self._static_max_rows
        kv = [layer.cross_attn.project_kv(memory.states) for layer in self.layers]
        cross_k = torch.stack([k for k, _ in kv])  # (L, B, H, S, Dh)
        cross_v = torch.stack([v for _, v in kv])
        n_layers, b, h, _, dh = cross_k.shape
        rows = torch.arange(b, device=cross_k.device)
        mask = None if bool(memory.attn_mask.all()) else memory.attn_mask  # no padding: SDPA needs no mask
        if static:  # the self-attention cache lives in the buffers
            none = cross_k.new_zeros(n_layers, b, h, 0, dh)  # (L, B, H, 0, Dh)
            plain = ATState(none, none, cross_k, cross_v, mask, rows, group=1)
            return self._into_buffers(plain, -(-max_steps // 16) * 16, lease=object())
        empty = cross_k.new_zeros(n_layers, b, h, capacity, dh)  # (L, B, H, C, Dh)
        focus = torch.zeros(b, dtype=torch.long, device=cross_k.device) if window else None
        return ATState(empty, empty.clone(), cross_k, cross_v, mask, rows, group=1,
                       window=tuple(window) if window else None, focus=focus)

    def _grow(self, state: ATState) -> ATState:
        """Double the self-attention cache capacity (amortised O(1) per step)."""
        pad = torch.zeros_like(state.self_k)
        return replace(state, self_k=torch.cat([state.self_k, pad], 3), self_v=torch.cat([state.self_v, pad], 3))

    def _window_mask(self, state: ATState) -> Tensor:
        """(M, 1, g, S) band [focus - back, focus + forward] within each row's source."""
        back, fwd = state.window
        m, g = state.cross_k.size(1), max(state.group, 1)
        s = torch.arange(state.cross_k.size(3), device=state.focus.device)[None, :]  # (1, S)
        band = (s >= (state.focus - back)[:, None]) & (s <= (state.focus + fwd)[:, None])  # (R, S)
        band = band.view(m, g, -1).unsqueeze(1)  # (M, 1, g, S)
        return band if state.memory_mask is None else band & state.memory_mask

    def _cross(self, layer, h: Tensor, state: ATState, i: int) -> tuple[Tensor, Tensor | None]:
        mask = state.memory_mask if state.window is None else self._window_mask(state)
        last = state.window is not None and i == len(self.layers) - 1  # its attention moves the window
        return _grouped_cross(layer.cross_attn, h, state.cross_k[i], state.cross_v[i], mask, state.group, last)

    def _static_step(self, tokens: Tensor, pos: Tensor, self_k: Tensor, self_v: Tensor, cross_k: Tensor,
                     cross_v: Tensor, memory_mask: Tensor | None, group: int) -> Tensor:
        """The fixed-shape step (see use_static_cache) on a StaticBuffers set: tokens (R,) ->
        log-probs (R, V); writes the caches at position pos and advances pos, all in place."""
        cap = self_k.size(3)
        at = pos.view(1)
        x = self.embed.add_positions_at(self.embed.tokens(tokens.unsqueeze(1)) * self.embed.scale, at)  # (R, 1, D)
        valid = (torch.arange(cap, device=pos.device) <= pos).view(1, 1, 1, cap)  # filled positions
        fused = self._static_attention == "fused"
        for i, layer in enumerate(self.layers):
            def self_block(h, i=i, attn=layer.self_attn):
                q, k, v = attn.project_qkv(h)  # (R, H, 1, Dh)
                self_k[i].index_copy_(2, at, k)  # (R, H, C, Dh) at column pos
                self_v[i].index_copy_(2, at, v)
                if fused:
                    return attn.attend_fused(q, self_k[i], self_v[i], valid), None
                return attn.attend(q, self_k[i], self_v[i], mask=valid)
            x, _ = layer.res_self(x, self_block)
            x, _ = layer.res_cross(x, lambda h, i=i, attn=layer.cross_attn: _grouped_cross(
                attn, h, cross_k[i], cross_v[i], memory_mask, group, False, fused))
            x, _ = layer.res_ffn(x, lambda h, layer=layer: (layer.ffn(h), None))
        pos.add_(1)
        return F.log_softmax(self.output(self.final_norm(x[:, 0])).float(), -1)  # (R, V)

    def _step_static(self, prev_tokens: Tensor, state: ATState) -> tuple[Tensor, ATState]:
        """prev_tokens (R',) into the fixed input buffer at the live rows, one step over all R buffer
        rows, the live rows' log-probs (R', V) out."""
        buf = state.static
        if buf.owner is not state.lease:
            raise AtnatError("this static-cache decoding state lost its buffers to a newer init_state of the "
                             "same shapes: with the static cache a decoder runs one decode at a time")
        if state.t >= buf.self_k.size(3):
            raise AtnatError(f"static KV cache of {buf.self_k.size(3)} positions is full: the strategy "
                             "ran more steps than the max_steps given to init_state")
        buf.tokens.index_copy_(0, state.rows, prev_tokens)
        logp = self._static_impl(*buf.step_inputs(), state.group)  # (R, V)
        # index_select copies: a CUDA graph overwrites its output at its next replay
        return logp.index_select(0, state.rows), replace(state, t=state.t + 1)

    def step(self, prev_tokens: Tensor, state: ATState) -> tuple[Tensor, ATState]:
        """prev_tokens (R,) -> log-probs (R, V) of the next token; the cache is extended in place."""
        if state.static is not None:
            return self._step_static(prev_tokens, state)
        if state.t >= state.self_k.size(3):
            state = self._grow(state)
        t = state.t
        x = self.embed(prev_tokens.unsqueeze(1), offset=t)  # (R, 1, D)
        for i, layer in enumerate(self.layers):
            def self_block(h, i=i, attn=layer.self_attn):
                q, k, v = attn.project_qkv(h)  # (R, H, 1, Dh)
                state.self_k[i, :, :, t] = k[:, :, 0]
                state.self_v[i, :, :, t] = v[:, :, 0]
                return attn.attend(q, state.self_k[i, :, :, : t + 1], state.self_v[i, :, :, : t + 1])
            x, _ = layer.res_self(x, self_block)
            x, weights = layer.res_cross(x, lambda h, i=i, layer=layer: self._cross(layer, h, state, i))
            x, _ = layer.res_ffn(x, lambda h, layer=layer: (layer.ffn(h), None))
        logits = self.output(self.final_norm(x[:, 0]))  # (R, V)
        if weights is not None:  # monotonic: the window centre never moves back
            state = replace(state, focus=torch.maximum(state.focus, weights.mean(1).argmax(-1)))
        return F.log_softmax(logits.float(), -1), replace(state, t=t + 1)

    def reorder_state(self, state: ATState, order: Tensor) -> ATState:
        """Keep rows `order` (R',). Consumes `state`: the returned state may reuse its buffers. The
        cache is copied whole (capacity grows by doubling from 16, so at most 2x the filled part): one
        contiguous copy beats a strided one; with as many rows as before, into the buffers of the
        state before `state` (ATState.spare), whose memory is warm, instead of fresh tensors. Memory stays
        shared per group while the rows form contiguous groups that share a memory row (beam
        search, also after finished sentences leave); otherwise it is copied per row.
        With the static cache the buffers stay: see _reorder_static."""
        if state.static is not None:
            return self._reorder_static(state, order)
        r = order.numel()
        rows = state.row_to_memory.index_select(0, order)
        shape = (state.self_k.size(0), r, *state.self_k.shape[2:])  # (L, R', H, C, Dh)
        spare, state.spare = state.spare, None  # handed over once: a second reorder of `state` allocates
        if spare is not None and spare[0].shape == shape:  # written in place: no fresh pages per beam step
            self_k = torch.index_select(state.self_k, 1, order, out=spare[0])
            self_v = torch.index_select(state.self_v, 1, order, out=spare[1])
        else:  # one contiguous copy each, cheaper than copying the strided prefix [:t]
            self_k, self_v = state.self_k.index_select(1, order), state.self_v.index_select(1, order)
        new = replace(state, self_k=self_k, self_v=self_v,
                      spare=(state.self_k, state.self_v) if r == state.self_k.size(1) else None,
                      focus=None if state.focus is None else state.focus.index_select(0, order))
        if state.group > 1 and r == state.row_to_memory.numel() and torch.equal(rows, state.row_to_memory):
            return new  # beam search's usual step: rows moved within their groups, memory as it was
        g = self._group_size(rows, state)
        if g:
            mem = rows[::g]  # the memory row of each group
            m = state.cross_k.size(1)
            if mem.numel() != m or not torch.equal(mem, torch.arange(m, device=mem.device)):
                new = replace(new, cross_k=state.cross_k.index_select(1, mem),
                              cross_v=state.cross_v.index_select(1, mem), memory_mask=_rows(state.memory_mask, mem))
            groups = torch.arange(r // g, device=order.device).repeat_interleave(g)
            return replace(new, row_to_memory=groups, group=g)
        return replace(new, cross_k=state.cross_k.index_select(1, rows), cross_v=state.cross_v.index_select(1, rows),
                       memory_mask=_rows(state.memory_mask, rows),
                       row_to_memory=torch.arange(r, device=order.device), group=1)

    def _reorder_static(self, state: ATState, order: Tensor) -> ATState:
        """Reorder in place: live rows take buffer rows within their memory row's block (greedy:
        rows stay where they are, finished ones are left behind; beam k of a sentence stays at
        buffer row sentence * K + k, its cache gathered from the beams it extends). Only a block
        outgrowing its rows (beam search's first call, K copies of each row) lays the buffers anew."""
        src = state.rows.index_select(0, order)  # (R',) buffer rows the new rows continue
        dst, moved = place_rows(src, max(state.group, 1))
        if dst is None:
            plain = self.reorder_state(replace(state, static=None, rows=None, lease=None), src)
            return self._into_buffers(plain, state.self_k.size(3), state.lease)
        if moved:
            for cache in (state.self_k, state.self_v):  # (L, R, H, C, Dh)
                cache.index_copy_(1, dst, cache.index_select(1, src))  # gathered first, then written back
        return replace(state, rows=dst)

    def _into_buffers(self, plain: ATState, capacity: int, lease: object) -> ATState:
        """The static-cache state holding `plain`'s contents (t steps cached) in a buffer set of the
        pool, claimed for `lease`."""
        rows, t = plain.row_to_memory.numel(), plain.t
        masked = plain.memory_mask is not None or self._static_masked
        buf = self._static_pool.take(lease, rows=rows, capacity=capacity, cross=plain.cross_k, masked=masked)
        if masked and plain.memory_mask is None:
            buf.memory_mask.fill_(True)  # a batch without padding: every source position attendable
        for dst, src in ((buf.cross_k, plain.cross_k), (buf.cross_v, plain.cross_v),
                         (buf.memory_mask, plain.memory_mask), (buf.self_k[:, :, :, :t], plain.self_k[:, :, :, :t]),
                         (buf.self_v[:, :, :, :t], plain.self_v[:, :, :, :t])):
            if src is not None and dst is not src:
                dst.copy_(src)
        buf.pos.fill_(t)
        return replace(plain, self_k=buf.self_k, self_v=buf.self_v, cross_k=buf.cross_k, cross_v=buf.cross_v,
                       memory_mask=buf.memory_mask, static=buf, lease=lease,
                       rows=torch.arange(rows, device=buf.tokens.device))

    @staticmethod
    def _group_size(rows: Tensor, state: ATState) -> int:
        """The size g of contiguous row groups sharing one memory row (0 if none fits)."""
        r, m = rows.numel(), state.cross_k.size(1)
        for g in dict.fromkeys((state.group, r // m if r % m == 0 else 0)):
            if g > 1 and r % g == 0:
                grid = rows.view(-1, g)  # (groups, g)
                if bool((grid == grid[:, :1]).all()):
                    return g
        return 0


def _grouped_cross(attn, h: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, group: int,
                   need_weights: bool, fused: bool = False) -> tuple[Tensor, Tensor | None]:
    """Cross-attention of h (R, 1, D) over M memory rows k/v (M, H, S, Dh), rows laid out as M
    contiguous groups sharing one memory row -> (R, 1, D), weights (R, H, S) if asked."""
    q = attn.project_q(h)  # (R, H, 1, Dh)
    r, hh, _, dh = q.shape
    m, g = k.size(0), max(group, 1)
    q = q.view(m, g, hh, dh).transpose(1, 2)  # (M, H, g, Dh): a group's queries share one memory row
    if fused:
        return attn.attend_fused(q, k, v, mask).reshape(r, 1, -1), None  # (M, g, D) -> (R, 1, D)
    out, w = attn.attend(q, k, v, mask=mask, need_weights=need_weights)  # (M, g, D)
    return out.reshape(r, 1, -1), None if w is None else w.transpose(1, 2).reshape(r, hh, -1)  # (R, H, S)


def _rows(mask: Tensor | None, rows: Tensor) -> Tensor | None:
    return None if mask is None else mask.index_select(0, rows)
