"""The speed-up that lossless speculative decoding can reach at batch 1, whatever the drafter learns:
the grid's model sizes (D = 256, 3+3 layers, 8,000-piece vocabulary) on random weights, the AT verifying
for a CMLM drafter, timed end to end beside AT greedy (the same sources, interleaved, median of repeats).

Two drafters bound every trained one: `oracle` proposes exactly the verifier's greedy tokens (every draft
is kept: block + 1 tokens a round), `wrong` proposes tokens the verifier never picks (1 token a round, as
greedy). Both run the real drafter pass first, so its cost stays in the timing; only its answer is
replaced, and its predicted length is the output's (as a trained drafter's would be, about). The output
equals greedy's in every row (checked). Blocks of 4, 8 and 16; the oracle also as a one-layer drafter (its
decoder 1 layer deep, its encoder as the verifier's), the shallow drafter a CPU would want. Beside each
system's time: the mean time a round spends in the drafter's pass and in the verifier's block pass (the rest
of a round is the strategy's own tensor bookkeeping), and greedy's time per token.

    python results/multi30k-families/speculative_bounds.py OUT.csv [ENGINE] [REPEATS] [DEVICE] [SYSTEMS]

ENGINE: eager (default) or auto, applied to both models (modelfiles/engines.py); DEVICE: cpu (default, 1
thread) or cuda; SYSTEMS: all (default) or bounds (blocks of 4 and 8 at full depth only: the GPU checks' size).
"""
from __future__ import annotations

import statistics
import sys
import time

import pandas as pd
import torch

from atnat.decoding.greedy import Greedy
from atnat.decoding.speculative import Speculative
from atnat.experiments.bench.spec import FIRST_ORDINARY, FULL
from atnat.experiments.bench.systems import ForcedLength
from atnat.experiments.evaluation.assemble import needs_teacher
from atnat.experiments.modelfiles.engines import apply_engine
from atnat.experiments.modelfiles.packed import packing_summary
from atnat.models.decoders.block_verifier import BlockVerifier
from atnat.models.seq2seq import Seq2SeqModule

VOCAB, SRC_LEN, OUT_LEN, SOURCES = 8000, 20, 30, 8
PASS_S = {"drafter": 0.0, "verifier": 0.0}  # seconds spent in each pass since the last reset


def timed_block(step_block):
    """BlockVerifier.step_block, its time added to PASS_S["verifier"]."""
    def timed(self, tokens, start):
        began = time.perf_counter()
        out = step_block(self, tokens, start)
        PASS_S["verifier"] += time.perf_counter() - began
        return out
    return timed


class Drafter(ForcedLength):
    """The CMLM decoder, its pass run as is, its answer replaced by `target`'s tokens (oracle) or by a token
    the verifier's output never has at that place (wrong); its predicted length is the output's (the bench's
    ForcedLength: the real predictor still runs)."""

    def __init__(self, decoder, target: torch.Tensor, oracle: bool):
        super().__init__(decoder, target.size(1))
        self.target, self.oracle = target, oracle  # target (R, T) the greedy output

    def forward_parallel(self, tokens, memory, padding_mask):
        began = time.perf_counter()
        real = self.model.forward_parallel(tokens, memory, padding_mask)  # (R, W, V): its cost is kept
        PASS_S["drafter"] += time.perf_counter() - began
        R, W, V = real.shape
        want = torch.full((R, W), FIRST_ORDINARY, dtype=torch.long, device=real.device)
        n = min(W, self.target.size(1))
        want[:, :n] = self.target[:, :n]
        if not self.oracle:  # a token that differs from the verifier's at every place
            want = torch.where(want == FIRST_ORDINARY, FIRST_ORDINARY + 1, FIRST_ORDINARY)
        return torch.full_like(real, -30.0).scatter(-1, want[..., None], 0.0)

    def reorder_memory(self, memory, order):
        self.target = self.target[order]
        return self.model.reorder_memory(memory, order)


def main(out: str, engine: str = "eager", repeats: int = 5, device: str = "cpu", which: str = "all") -> None:
    if which not in ("all", "bounds"):
        raise SystemExit(f"SYSTEMS {which!r}: all or bounds")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    BlockVerifier.step_block = timed_block(BlockVerifier.step_block)
    at = Seq2SeqModule(vocab_size=VOCAB, decoder="at", model=FULL).eval().to(device)
    drafters = {layers: Seq2SeqModule(vocab_size=VOCAB, decoder="cmlm", model={**FULL, "decoder_layers": layers})
                .eval().to(device) for layers in (FULL["decoder_layers"], 1)}
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None
    if engine != "eager":
        for module in (at, *drafters.values()):
            apply_engine(module, engine)
    lengths = dict(max_len_a=0.0, max_len_b=OUT_LEN)
    greedy = Greedy(**lengths)
    gen = torch.Generator().manual_seed(1)
    rows = []
    with torch.inference_mode():
        sources = [torch.randint(FIRST_ORDINARY, VOCAB, (1, SRC_LEN), generator=gen).to(device) for _ in range(SOURCES)]
        expected = [at.decode(src, torch.tensor([SRC_LEN], device=device), greedy) for src in sources]
        systems = {"greedy": None}
        for block in (4, 8, 16) if which == "all" else (4, 8):
            for layers, oracle in ((FULL["decoder_layers"], True), (1, True), (FULL["decoder_layers"], False)):
                if (oracle or block < 16) and (which == "all" or layers == FULL["decoder_layers"]):
                    # (a wrong drafter keeps 1 token a round whatever its block)
                    depth = "" if layers == FULL["decoder_layers"] else f"-{layers}layer"
                    systems[f"speculative-k{block}-{'oracle' if oracle else 'wrong'}{depth}"] = (block, oracle, layers)

        def call(name, i):
            src, lengths_ = sources[i], torch.tensor([SRC_LEN], device=device)
            if systems[name] is None:
                return at.decode(src, lengths_, greedy)
            block, oracle, layers = systems[name]
            target = expected[i].tokens[:, 0]
            cmlm = drafters[layers]
            drafter = Drafter(cmlm.decoder, target.clone(), oracle)
            return Speculative(block=block, **lengths).search(drafter, cmlm.encode(src), src_lengths=lengths_,
                                                             special=cmlm.special, **needs_teacher(Speculative(), at, src))

        times = {name: [[] for _ in sources] for name in systems}
        pass_s = {name: {"drafter": 0.0, "verifier": 0.0} for name in systems}
        for name in systems:  # untimed first calls (an engine compiles there), outputs checked
            for i in range(SOURCES):
                hyps = call(name, i)
                if hyps.sequences(at.special) != expected[i].sequences(at.special):
                    raise SystemExit(f"{name} on source {i}: the output differs from AT greedy's")
                if systems[name] is not None:
                    rows.append(dict(system=name, source=i, passes=hyps.n_steps, drafter=hyps.passes["drafter"],
                                     tokens=int(hyps.lengths[0, 0]), kept_per_round=hyps.accepted[0] / hyps.passes["drafter"]))
        for _ in range(repeats):  # interleaved: every system on every source, in turn
            for i in range(SOURCES):
                for name in systems:
                    sync()
                    PASS_S.update(drafter=0.0, verifier=0.0)
                    began = time.perf_counter()
                    call(name, i)
                    sync()
                    times[name][i].append(time.perf_counter() - began)
                    for part in PASS_S:
                        pass_s[name][part] += PASS_S[part]
    per_call = {name: sum(statistics.median(t) for t in times[name]) / SOURCES for name in systems}
    counts = pd.DataFrame(rows).groupby("system")[["passes", "drafter", "tokens", "kept_per_round"]].mean()
    table = pd.DataFrame([dict(system=name, engine=engine, device=device, threads=1, repeats=repeats, sources=SOURCES,
                               torch=torch.__version__,
                               drafter_layers=systems[name][2] if systems[name] else None,
                               median_s_per_sentence=per_call[name],
                               speedup_vs_greedy=per_call["greedy"] / per_call[name]) for name in systems])
    table = table.merge(counts, left_on="system", right_index=True, how="left")
    rounds = table["drafter"] * SOURCES * repeats  # the timed calls' rounds (passes are the same every call)
    for part in ("drafter", "verifier"):  # mean time a round spends in the pass; CPU only (a GPU runs them async)
        spent = [1e3 * pass_s[name][part] for name in systems] / rounds.to_numpy()
        table[f"{part}_ms_per_round"] = spent if device == "cpu" else float("nan")
    table["ms_per_round"] = 1e3 * table["median_s_per_sentence"] / table["drafter"]
    greedy_tokens = sum(int(h.lengths[0, 0]) for h in expected) / SOURCES
    table["greedy_ms_per_token"] = 1e3 * per_call["greedy"] / greedy_tokens
    table["verifier_packed"] = packing_summary(at)  # auto: the verifier's weight shapes on packed products
    table.to_csv(out, index=False)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main(sys.argv[1], *(sys.argv[2:3] or ["eager"]), *(int(x) for x in sys.argv[3:4] or [5]), *sys.argv[4:6])
