"""Fast training for tests: a plain optimisation loop over a Seq2SeqModule (no Lightning),
so learning tests take seconds. The Lightning path itself is tested end to end elsewhere."""
from __future__ import annotations

import torch

import atnat.decoding  # noqa: F401  (registers strategies)
import atnat.models.decoders  # noqa: F401  (registers decoders)
from atnat.core.options import build_config
from atnat.experiments.data.batching import encode_split, make_loader
from atnat.experiments.data.tasks import TASKS
from atnat.models.seq2seq import Seq2SeqModule

TINY_MODEL = dict(d_model=64, n_heads=4, ffn_dim=256, encoder_layers=2, decoder_layers=2, dropout=0.0)


def make_task(name: str, **options):
    cls = TASKS.get(name)
    return cls(build_config(cls.Options, options), cache_dir=None).load()


def fit(decoder: str, task_name: str, *, steps: int, task=None, decoder_options=None, model=None,
        loss=None, lr: float = 2e-3, warmup: int = 100, max_tokens: int = 2048, seed: int = 0,
        train_targets=None, **task_options):
    """Train `decoder` on a synthetic task for `steps` Adam steps; returns (module in eval mode, task)."""
    torch.manual_seed(seed)
    task = task or make_task(task_name, **task_options)
    src, tgt = task.splits["train"]
    split = encode_split(task.tokenizer, src, train_targets or tgt, name="train")
    module = Seq2SeqModule(vocab_size=task.tokenizer.vocab_size, decoder=decoder, model=model or TINY_MODEL,
                           decoder_options=decoder_options, loss=loss,
                           optim=dict(lr=lr, warmup_steps=warmup))
    opt = module.configure_optimizers()
    optimizer, sched = opt["optimizer"], opt["lr_scheduler"]["scheduler"]
    module.train()
    step = 0
    while step < steps:
        for batch in make_loader(split, max_tokens, shuffle=True, seed=seed + step):
            loss_value = torch.stack([p.weight * p.value for p in module.decoder.loss(
                batch, module.encode(batch.src), step=step).values() if p.weight]).sum()
            optimizer.zero_grad(set_to_none=True)
            loss_value.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
            optimizer.step()
            sched.step()
            step += 1
            if step >= steps:
                break
    module.eval()
    module.detokenize = task.tokenizer.decode
    return module, task


def decode_split(module, task, strategy, split: str = "test", max_tokens: int = 4000, **kwargs):
    """Decode a split; returns (hypothesis id lists, reference id lists, total decoder passes)."""
    src, tgt = task.splits[split]
    enc = encode_split(task.tokenizer, src, tgt, name=split)
    hyps, refs, passes = [None] * len(enc), [None] * len(enc), 0
    for batch in make_loader(enc, max_tokens, shuffle=False):
        out = module.decode(batch.src, batch.src_lengths, strategy, **kwargs)
        passes += out.n_steps
        for i, h in zip(batch.ids.tolist(), out.sequences(module.special)):
            hyps[i], refs[i] = h, enc.tgt[i]
    return hyps, refs, passes


def exact_match(hyps, refs) -> float:
    return sum(h == r for h, r in zip(hyps, refs)) / len(refs)
