"""The auto engine on a GPU against eager, the way the grid's timing phase decodes: sentences one at a
time (batch 1) whose lengths all differ, on the Multi30k grid's model size (D=512, 8 heads, FFN 2048,
5+5 layers, vocabulary 8000; random weights, the same in both systems, so both do equal work): AT
greedy and beam 5 (CUDA graphs of the AT step and the encoder), and every NAT family's strategy
(CUDA graphs of the encoder and the NAT passes): one parallel pass, mask-predict with 10 iterations,
CTC, DA-Transformer's lookahead. Interleaved: each round decodes every sentence with both, in
alternating order; the first round (compiling and capturing graphs) is reported apart. Checks equal tokens.

    python results/bench/auto_gpu_latency.py OUT.csv [SENTENCES] [ROUNDS]
"""
import statistics
import sys
import time

import pandas as pd
import torch

from atnat.decoding.beam import Beam
from atnat.decoding.ctc_search import CTC
from atnat.decoding.dag_walk import DAGLookahead
from atnat.decoding.greedy import Greedy
from atnat.decoding.mask_predict import MaskPredict
from atnat.decoding.parallel import Parallel
from atnat.experiments.modelfiles.engines import apply_engine
from atnat.models.seq2seq import Seq2SeqModule

MODEL = dict(d_model=512, n_heads=8, ffn_dim=2048, encoder_layers=5, decoder_layers=5, dropout=0.0)
CASES = [  # (decoder, its options, strategy name, strategy)
    ("at", None, "greedy", Greedy(max_len_a=1.2, max_len_b=5)),
    ("at", None, "beam5", Beam(beam_size=5, max_len_a=1.2, max_len_b=5)),
    ("nat", None, "parallel", Parallel()),
    ("cmlm", None, "mask-predict-10", MaskPredict(iterations=10)),
    ("ctc", {"upsample": 2}, "ctc", CTC()),
    ("dag", {"upsample": 4}, "dag-lookahead", DAGLookahead()),
]


def main(out: str, n: int = 50, rounds: int = 4) -> None:
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(5, 26, (n,), generator=g).tolist()
    sources = [torch.randint(6, 8000, (1, s), generator=g).cuda() for s in lengths]
    rows = []
    for decoder, options, name, strategy in CASES:
        torch.manual_seed(0)
        eager = Seq2SeqModule(vocab_size=8000, decoder=decoder, model=MODEL, decoder_options=options).eval().cuda()
        auto = Seq2SeqModule(vocab_size=8000, decoder=decoder, model=MODEL, decoder_options=options).eval().cuda()
        auto.load_state_dict(eager.state_dict())
        label = apply_engine(auto, "auto").label
        totals = {"eager": [], label: []}
        for r in range(rounds):
            pair = [("eager", eager), (label, auto)]
            for system, model in (pair if r % 2 == 0 else pair[::-1]):
                torch.cuda.synchronize()
                start = time.perf_counter()
                outs = [model.decode(src, src.ne(0).sum(1), strategy).tokens for src in sources]
                torch.cuda.synchronize()
                totals[system].append(time.perf_counter() - start)
                if system == "eager":
                    reference = outs
                elif r > 0:
                    assert all(torch.equal(a, b) for a, b in zip(reference, outs)), f"{name}: tokens differ"
        for system, times in totals.items():
            rows.append(dict(decoder=decoder, strategy=name, system=system, sentences=n, first_round_s=times[0],
                             median_s=statistics.median(times[1:]), rounds=rounds - 1,
                             ms_per_sentence=1000 * statistics.median(times[1:]) / n))
        del eager, auto
        torch.cuda.empty_cache()
    df = pd.DataFrame(rows)
    df["speedup_vs_eager"] = df.groupby("strategy").median_s.transform(lambda t: t.iloc[0]) / df.median_s
    df["device"] = torch.cuda.get_device_name()
    df.to_csv(out, index=False)
    print(df.to_string())


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
