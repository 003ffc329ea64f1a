"""Seq2SeqModule: the shared encoder + any registered decoder, trained with Lightning."""
from __future__ import annotations

from typing import Any, Callable

import pytorch_lightning as pl
import sacrebleu
import torch
from torch import Tensor

from atnat.core.errors import AtnatError
from atnat.core.options import build_config, require_between
from atnat.core.special import SpecialTokens
from atnat.models.batch import Batch
from atnat.models.decoders.base import DECODERS, Decoder, LossConfig
from atnat.models.encoder import EncoderOut, TransformerEncoder
from atnat.models.layers import TokenEmbedding
from atnat.models.losses import loss_parts_problem, total_loss
from atnat.models.optim import OptimConfig, lr_factor
from atnat.models.sizes import MAX_VOCAB, ModelConfig
from atnat.models.step_forms import (
    STEP_FORMS,
    apply_to_optimizer,
    compiled,
    make_optimizer,
    uses_fused_optimizer,
)

VALIDATION_SEED = 0  # validation batch i draws from a generator seeded VALIDATION_SEED + i (Seq2SeqModule.validation_step)


class Seq2SeqModule(pl.LightningModule):
    """Encoder + decoder + losses + optimisation + validation BLEU. Hyper-parameters are plain
    dicts so a checkpoint rebuilds the model on its own (`load_from_checkpoint`)."""

    def __init__(self, *, vocab_size: int, decoder: str, model: dict | None = None,
                 decoder_options: dict | None = None, loss: dict | None = None, optim: dict | None = None,
                 special: dict | None = None):
        super().__init__()
        self.save_hyperparameters()
        require_between(vocab_size, 1, MAX_VOCAB, "model", "vocab_size")
        self.model_cfg = build_config(ModelConfig, model)
        self.loss_cfg = build_config(LossConfig, loss)
        self.optim_cfg = build_config(OptimConfig, optim)
        self.special = SpecialTokens(**(special or {}))
        cfg = self.model_cfg
        embed = TokenEmbedding(vocab_size, cfg.d_model, max_positions=cfg.max_positions,
                               learned_pos=cfg.learned_positions, dropout=cfg.dropout, pad=self.special.pad)
        tgt_embed = embed if cfg.tie_embeddings else TokenEmbedding(
            vocab_size, cfg.d_model, max_positions=cfg.max_positions, learned_pos=cfg.learned_positions,
            dropout=cfg.dropout, pad=self.special.pad)
        self.encoder = TransformerEncoder(cfg, embed)
        decoder_cls = DECODERS.get(decoder)
        options = build_config(decoder_cls.Options, decoder_options)
        self.decoder: Decoder = decoder_cls(cfg, options, embed=tgt_embed, vocab_size=vocab_size,
                                            special=self.special, loss_cfg=self.loss_cfg)
        self.tokenizer_state: dict | None = None  # set by the trainer; saved in checkpoints
        self.plugins: list[str] = []  # plugin modules named when it was trained (saved in checkpoints and exports)
        self.validation_search: Any = None  # the strategy validation decodes with (set by experiments/training/train.py)
        self.detokenize: Callable[[list[int]], str] | None = None
        self.bleu_tokenize = "13a"
        self.target_lang = "en"  # target language (Moses tokenisation of the paper-comparable BLEU)
        self._val_outputs: list[tuple[list[int], list[int]]] = []
        # the training loss in the progress bar: Lightning reads progress-bar values on the host after
        # every step (a device sync per step), so only when a bar shows them (set by the trainer's owner)
        self.train_loss_in_progress_bar = False
        self._step_form = "eager"  # train.step (models/step_forms.py), set by the trainer before fit

    @property
    def step_form(self) -> str:
        return self._step_form

    @step_form.setter
    def step_form(self, form: str) -> None:
        if form not in STEP_FORMS:
            raise AtnatError(f"train.step: {form!r} is not one of {', '.join(STEP_FORMS)}")
        self._step_form = form

    # ---- forward pieces ----------------------------------------------------------------------
    def encode(self, src: Tensor, src_lengths: Tensor | None = None) -> EncoderOut:
        return self.encoder(src, src.eq(self.special.pad))

    def loss_parts(self, batch: Batch) -> dict:
        if self._step_form == "compiled" and self.training:
            return compiled(Seq2SeqModule._loss_parts, self.device.type == "cpu")(self, batch, self.global_step)
        return self._loss_parts(batch, self.global_step)

    def _loss_parts(self, batch: Batch, step: int) -> dict:
        return self.decoder.loss(batch, self.encode(batch.src), step=step)

    def _common_step(self, batch: Batch, stage: str) -> Tensor:
        parts = self.loss_parts(batch)
        problem = loss_parts_problem(parts)
        if problem:
            raise AtnatError(f"decoder {self.decoder.registered_name!r} ({type(self.decoder).__module__}."
                             f"{type(self.decoder).__qualname__}): {problem}")
        loss = total_loss(parts)
        bs = len(batch)
        bar = stage != "train" or self.train_loss_in_progress_bar
        self.log(f"{stage}/loss", loss, prog_bar=bar, batch_size=bs, sync_dist=stage != "train")
        for name, part in parts.items():
            self.log(f"{stage}/{name}", part.value.detach(), batch_size=bs, sync_dist=stage != "train")
        return loss

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        return self._common_step(batch, "train")

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        """The validation loss (a CMLM's hides random slots) and the validation decode draw from a generator of
        their own, seeded by the batch: training's random state is left as it was (how often a run validates
        changes nothing it trains), and each validation of the same weights gives the same loss."""
        cuda, seed = self.device.type == "cuda", VALIDATION_SEED + batch_idx
        gpu = (torch.cuda.current_device() if self.device.index is None else self.device.index) if cuda else None
        with torch.random.fork_rng(devices=[gpu] if cuda else []):
            torch.default_generator.manual_seed(seed)
            if cuda:
                torch.cuda.default_generators[gpu].manual_seed(seed)
            self._common_step(batch, "val")
            if self.validation_search is None:  # no strategy given (experiments/training/train.py gives one)
                return
            hyps = self.decode(batch.src, batch.src_lengths, self.validation_search)
        refs = [t[:n] for t, n in zip(batch.tgt.tolist(), batch.tgt_lengths.tolist())]
        self._val_outputs.extend(zip(hyps.sequences(self.special), refs))

    def on_validation_epoch_end(self) -> None:
        outs, self._val_outputs = self._val_outputs, []
        if not outs:
            return
        exact = sum(h == r for h, r in outs) / len(outs)
        # every DDP rank validates on the whole split, so syncing averages equal values
        self.log("val/exact_match", exact, prog_bar=True, sync_dist=True)
        if self.detokenize is not None:
            hyps = [self.detokenize(h) for h, _ in outs]
            refs = [self.detokenize(r) for _, r in outs]
            bleu = sacrebleu.corpus_bleu(hyps, [refs], tokenize=self.bleu_tokenize).score
            self.log("val/bleu", bleu, prog_bar=True, sync_dist=True)

    # ---- inference ---------------------------------------------------------------------------
    @torch.no_grad()
    def decode(self, src: Tensor, src_lengths: Tensor, strategy: Any, **kwargs: Any) -> Any:
        """Decode a batch with any strategy the decoder supports: src (B, S) -> Hypotheses.
        Every strategy is `search(decoder, memory, ...)`; an AT search builds its own state."""
        problem = strategy.problem_with(self.decoder)
        if problem:
            raise AtnatError(problem)
        return strategy.checked_search(self.decoder, self.encode(src), src_lengths=src_lengths, special=self.special,
                                       **kwargs)

    # ---- optimisation ------------------------------------------------------------------------
    def configure_optimizers(self):
        o = self.optim_cfg
        opt = make_optimizer(self.parameters(), o, self._step_form)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: lr_factor(step + 1, o.schedule, o.warmup_steps))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if uses_fused_optimizer(self._step_form) and gradient_clip_val:
            # Lightning's mixed-precision plugin refuses to clip for an optimizer that unscales by itself (a
            # fused one), even in bf16, where nothing is scaled (16-mixed with a fused form is refused)
            torch.nn.utils.clip_grad_norm_(self.parameters(), float(gradient_clip_val))
        else:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_train_start(self) -> None:
        for optimizer in self.trainer.optimizers:  # a resumed optimizer state keeps the form that saved it
            apply_to_optimizer(optimizer, self._step_form)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["atnat_tokenizer"] = self.tokenizer_state
        checkpoint["atnat_bleu_tokenize"] = self.bleu_tokenize
        checkpoint["atnat_target_lang"] = self.target_lang
        checkpoint["atnat_plugins"] = list(self.plugins)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.tokenizer_state = checkpoint.get("atnat_tokenizer")
        self.bleu_tokenize = checkpoint.get("atnat_bleu_tokenize", "13a")
        self.target_lang = checkpoint.get("atnat_target_lang", "en")
        self.plugins = [str(p) for p in checkpoint.get("atnat_plugins") or []]
