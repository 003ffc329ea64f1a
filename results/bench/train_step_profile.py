"""Where one eager training step's time goes on this CPU (the bench's model and batch, 1 thread, dropout
0.1, fused Adam): self time per operator over two steps after two warm-up steps, by torch.profiler.

    .venv/bin/python results/bench/train_step_profile.py results/bench/train_step_profile_COMMIT.csv [DECODER [OPTIONS]]

OPTIONS: the decoder's options as JSON, e.g. '{"upsample": 4}' for the families grid's DA-Transformer.
"""
import json
import sys

import pandas as pd
import torch
from torch.profiler import profile

from atnat.experiments.bench.spec import FIRST_ORDINARY, OUT_LEN, make_spec
from atnat.models.batch import Batch
from atnat.models.losses import total_loss
from atnat.models.optim import OptimConfig
from atnat.models.seq2seq import Seq2SeqModule
from atnat.models.step_forms import make_optimizer

torch.set_num_threads(1)
spec, decoder = make_spec(), (sys.argv[2] if len(sys.argv) > 2 else "at")
options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
b = 4096 // OUT_LEN
gen = torch.Generator().manual_seed(1)
src, tgt = (torch.randint(FIRST_ORDINARY, spec.vocab, (b, n), generator=gen) for n in (spec.src_len, OUT_LEN))
batch = Batch(src, tgt, torch.full((b,), spec.src_len), torch.full((b,), OUT_LEN), torch.arange(b))
torch.manual_seed(0)
module = Seq2SeqModule(vocab_size=spec.vocab, decoder=decoder, model={**spec.model, "dropout": 0.1},
                       decoder_options=options).train()
optimizer = make_optimizer(module.parameters(), OptimConfig(), "fused")


def step():
    loss = total_loss(module.loss_parts(batch))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
    optimizer.step()


step(), step()
with profile() as prof:
    step(), step()
rows = [dict(op=e.key, self_s=e.self_cpu_time_total / 1e6 / 2, calls=e.count / 2) for e in prof.key_averages()]
df = pd.DataFrame(rows).sort_values("self_s", ascending=False)
df["share"] = df.self_s / df.self_s.sum()
df.to_csv(sys.argv[1], index=False)
print(df.head(12).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
