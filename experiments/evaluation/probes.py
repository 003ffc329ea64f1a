"""Model probes for the error-propagation study: accuracy by position (teacher-forced vs free
running), the prefix-corruption probe (AT), and a cross-attention map per run.

Teacher forcing needs a decoder that can be given the gold context: the gold prefix (AT) or the
gold length (NAT decoders with a length predictor). A fixed-length NAT (trained on floor(a*S+b)
slots ending in END tokens) never saw gold-length inputs, so it has no teacher-forced curve.
Every tensor is made on the module's device; results leave through .cpu().
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from atnat.experiments.data.batching import EncodedSplit, collate, make_loader
from atnat.experiments.evaluation.assemble import needs_teacher
from atnat.experiments.evaluation.metrics import accuracy_by_position, corruption_effect
from atnat.experiments.evaluation.metrics.error_propagation import closest_references
from atnat.models.batch import Batch
from atnat.models.encoder import lengths_to_padding_mask

if TYPE_CHECKING:  # for annotations only: importing it imports Lightning
    from atnat.models.seq2seq import Seq2SeqModule

CORRUPTED = (1, 2, 4)  # prefix tokens corrupted in the probe
DISTANCES = 8  # positions followed after the corruption


def teacher_forceable(module: Seq2SeqModule) -> bool:
    """True when the decoder can be run on gold context (AT, or NAT with a length predictor)."""
    dec = module.decoder
    return "step" in dec.capabilities or ("parallel" in dec.capabilities and dec.predicts_length)


@torch.inference_mode()
def oracle_predictions(module: Seq2SeqModule, batch: Batch) -> list[list[int]] | None:
    """Arg-max outputs given the gold context: the gold prefix (AT) or the gold length (NAT with a
    length predictor); None for decoders that cannot take it (CTC, fixed-length NAT)."""
    if not teacher_forceable(module):
        return None
    dec, sp = module.decoder, module.special
    memory = module.encode(batch.src)
    if "step" in dec.capabilities:
        prev, _ = dec.shift(batch)
        pred = dec(prev, memory)[0].argmax(-1)  # (B, T+1)
    else:
        mask = lengths_to_padding_mask(batch.tgt_lengths, batch.tgt.size(1))  # (B, T)
        tokens = torch.full_like(batch.tgt, sp.mask).masked_fill(mask, sp.pad)
        pred = dec.forward_parallel(tokens, memory, mask).argmax(-1)  # (B, T)
    return [p[:n] for p, n in zip(pred.cpu().tolist(), batch.tgt_lengths.cpu().tolist())]


@torch.inference_mode()
def prefix_corruption(module: Seq2SeqModule, batch: Batch, k: int, seed: int = 0):
    """Corrupt k gold-prefix tokens before a cut t (len/3) and follow accuracy for DISTANCES tokens,
    relative to the clean prefix. AT decoders only. Returns (clean, corrupt, valid) (B, D) bools."""
    dec = module.decoder
    memory = module.encode(batch.src)
    prev, out = dec.shift(batch)  # (B, T+1) each
    lengths = batch.tgt_lengths
    cut = torch.maximum(lengths // 3, torch.full_like(lengths, k))  # first predicted position t
    g = torch.Generator().manual_seed(seed)  # on the CPU: the same corruptions on every device
    noisy = prev.cpu().clone()
    first = module.special.first_ordinary  # ids below are special symbols
    cut_host, len_host = cut.cpu().tolist(), lengths.cpu().tolist()
    for b in range(noisy.size(0)):
        for j in range(cut_host[b] - k + 1, cut_host[b] + 1):  # input j carries gold token y[j-1]
            if 1 <= j <= len_host[b]:
                r = int(torch.randint(first, dec.vocab_size - 1, (1,), generator=g))
                noisy[b, j] = r + int(r >= int(noisy[b, j]))  # any ordinary token but the gold one
    noisy = noisy.to(prev.device)
    clean_pred = dec(prev, memory)[0].argmax(-1)  # (B, T+1)
    noisy_pred = dec(noisy, memory)[0].argmax(-1)
    pos = cut[:, None] + torch.arange(DISTANCES, device=cut.device)[None, :]  # (B, D)
    valid = pos < lengths[:, None]
    pos = pos.clamp(max=out.size(1) - 1)
    gold = out.gather(1, pos)
    clean = (clean_pred.gather(1, pos) == gold) & valid
    noisy_ok = (noisy_pred.gather(1, pos) == gold) & valid
    return clean.cpu().numpy(), noisy_ok.cpu().numpy(), valid.cpu().numpy()


@torch.inference_mode()
def attention_map(module: Seq2SeqModule, split: EncodedSplit, index: int = 0) -> pd.DataFrame | None:
    """Last-layer cross-attention (mean over heads) of one sentence: under gold context, or for CTC
    its one pass over the upsampled source (None for a fixed-length NAT)."""
    dec = module.decoder
    if not teacher_forceable(module) and "ctc" not in dec.capabilities:
        return None
    batch = collate([split[index]]).to(module.device)
    with dec.recording_attention() as latest:
        if "ctc" in dec.capabilities:
            dec.forward_ctc(module.encode(batch.src))
        else:
            oracle_predictions(module, batch)
        attn = latest()
    if attn is None:
        return None
    m = attn[0].mean(0).float().cpu()  # (T, S)
    t, s = m.shape
    return pd.DataFrame({"sentence": index, "target_pos": torch.arange(t).repeat_interleave(s).numpy(),
                         "source_pos": torch.arange(s).repeat(t).numpy(), "weight": m.flatten().numpy()})


def run_probes(module: Seq2SeqModule, split: EncodedSplit, *, free_running: list[list[int]] | None,
               strategy: str, max_tokens: int = 4000, references: list | None = None) -> dict[str, pd.DataFrame]:
    """All probes of one run, as long-format frames keyed by curve name; `strategy` labels the
    free-running outputs (the run's first strategy). position_accuracy has a `count` column: the
    sentences each position's accuracy rests on. `references`: every reference stream (ids; default the
    split's own): free-running outputs are scored against the reference closest to each, as the metrics are
    (a task of several correct variants would otherwise count a right output of another variant as wrong)."""
    oracle, corr = [], {k: [] for k in CORRUPTED}
    is_at = "step" in module.decoder.capabilities
    for batch in make_loader(split, max_tokens, shuffle=False):
        batch = batch.to(module.device)
        pred = oracle_predictions(module, batch)
        if pred is not None:
            oracle += list(zip(batch.ids.cpu().tolist(), pred))
        if is_at:
            for k in CORRUPTED:
                corr[k].append(prefix_corruption(module, batch, k))
    out = {}
    frames = []
    if oracle:
        oracle.sort()
        frames.append(accuracy_by_position([p for _, p in oracle], split.tgt).assign(mode="teacher_forced"))
    if free_running is not None:
        closest = closest_references(free_running, references or [split.tgt])
        frames.append(accuracy_by_position(free_running, closest).assign(mode="free_running"))
    if frames:
        out["position_accuracy"] = pd.concat(frames, ignore_index=True).assign(strategy=strategy)
    if is_at:
        rows = []
        for k, parts in corr.items():
            clean, noisy, valid = (np.concatenate([p[i] for p in parts]) for i in range(3))
            rel = corruption_effect(clean, noisy, valid)
            rows += [{"corrupted": k, "distance": d, "relative_accuracy": float(r)} for d, r in enumerate(rel)]
        out["prefix_corruption"] = pd.DataFrame(rows)
    attn = attention_map(module, split)
    if attn is not None:
        out["attention"] = attn
    return out


# ---- error propagation, causal: one injected error, the drop it causes downstream ------------------

INJECTED_SENTENCES = 100  # test sentences the injected-error probe decodes (twice each, at batch 1)


class _Injected:
    """A model seen through a corruption: the decoding strategy drives it as usual, but after the
    first decoder pass one token of the context the next passes read is wrong (an AT's input at
    output position `at`; a refining NAT's kept token at `at`). Everything else is delegated."""

    def __init__(self, model, at: int, special, vocab: int, seed: int = 0):
        self._model, self._at, self._calls, self._mask = model, at, 0, special.mask
        self._low, self._vocab = special.first_ordinary, vocab
        self._gen = torch.Generator().manual_seed(seed)
        self._offset = int(torch.randint(1, max(vocab - self._low, 2), (1,), generator=self._gen))
        self._chosen = False  # a NAT's position is chosen at its first refining pass

    def __getattr__(self, name):
        return getattr(self._model, name)

    def _wrong(self, token: int) -> int:
        """Another ordinary token, the same one for a given token at every pass (a fixed shift)."""
        span = self._vocab - self._low
        return self._low + (max(token - self._low, 0) + self._offset) % span

    def step(self, prev_tokens, state):  # AT: the token chosen at position `at` is read back wrong
        self._calls += 1
        if self._calls == self._at + 2:
            prev_tokens = prev_tokens.clone()
            for row in range(prev_tokens.numel()):
                prev_tokens[row] = self._wrong(int(prev_tokens[row]))
        return self._model.step(prev_tokens, state)

    def forward_parallel(self, tokens, memory, padding_mask):  # NAT: a kept token is read back wrong
        self._calls += 1
        if self._calls >= 2:
            kept = (tokens != self._mask) & ~padding_mask  # (R, T) tokens this pass reads as given
            if not self._chosen and bool(kept[0].any()):  # the kept position nearest `at`, once
                positions = kept[0].nonzero().squeeze(1).tolist()
                self._at, self._chosen = min(positions, key=lambda j: (abs(j - self._at), j)), True
            if self._chosen and self._at < tokens.size(1):
                tokens = tokens.clone()
                wrong = torch.tensor([self._wrong(int(t)) for t in tokens[:, self._at].tolist()], device=tokens.device)
                tokens[:, self._at] = torch.where(kept[:, self._at], wrong, tokens[:, self._at])
        return self._model.forward_parallel(tokens, memory, padding_mask)

    @property
    def position(self) -> int:
        """The output position whose token was read back wrong."""
        return self._at


def _accuracy(hyp: list[int], ref: list[int], positions) -> float | None:
    """Share of the given output positions whose token equals the reference's at that position."""
    checked = [i for i in positions if i < len(hyp)]
    if not checked:
        return None
    return sum(i < len(ref) and hyp[i] == ref[i] for i in checked) / len(checked)


@torch.inference_mode()
def injected_error_drop(module: Seq2SeqModule, split: EncodedSplit, strategy, *, teacher=None,
                        n: int = INJECTED_SENTENCES, bootstrap: int = 1000, seed: int = 0,
                        references: list | None = None) -> dict:
    """Error propagation measured causally: each of the first `n` test sentences is decoded twice
    with `strategy`, clean and with one error injected after the first decoder pass (an AT reads a
    wrong token back at output position p = a third of its clean output; an iterative NAT reads a
    wrong token at kept position p in every later pass). The drop in token accuracy against the
    reference (the one closest to the clean output, where there are several), over the positions after p
    (AT) or all but p (NAT), is the error's downstream effect:
    one-pass NAT and CTC read nothing back, so theirs is 0 by construction (still measured here).
    -> {"error_propagation": mean drop, "_ci_low"/"_ci_high": 95% bootstrap interval, "_n": sentences}."""
    dec, special = module.decoder, module.special
    drops = []
    for i in range(min(n, len(split))):
        batch = collate([split[i]]).to(module.device)
        memory = module.encode(batch.src)
        kwargs = dict(src_lengths=batch.src_lengths, special=special, **needs_teacher(strategy, teacher, batch.src))
        clean = strategy.search(dec, memory, **kwargs).sequences(special)[0]
        if len(clean) < 2:
            continue
        p = max(0, len(clean) // 3)
        wrapped = _Injected(dec, p, special, dec.vocab_size, seed + i)
        hurt = strategy.search(wrapped, memory, **kwargs).sequences(special)[0]
        p = wrapped.position
        downstream = range(p + 1, max(len(clean), len(hurt))) if "step" in dec.capabilities else \
            [j for j in range(max(len(clean), len(hurt))) if j != p]
        ref = closest_references([clean], [[stream[i]] for stream in references or [split.tgt]])[0]  # as the metrics
        a, b = _accuracy(clean, ref, downstream), _accuracy(hurt, ref, downstream)
        if a is not None and b is not None:
            drops.append(a - b)
    if not drops:
        return {"error_propagation": float("nan"), "error_propagation_ci_low": float("nan"),
                "error_propagation_ci_high": float("nan"), "error_propagation_n": 0}
    values = np.array(drops)
    rng = np.random.default_rng(seed)
    boots = values[rng.integers(0, len(values), size=(max(bootstrap, 1), len(values)))].mean(axis=1)
    return {"error_propagation": float(values.mean()), "error_propagation_ci_low": float(np.percentile(boots, 2.5)),
            "error_propagation_ci_high": float(np.percentile(boots, 97.5)), "error_propagation_n": len(values)}
