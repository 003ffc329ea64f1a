"""What a benchmark run measures: model sizes, shapes, settings (`Spec`), and our strategies
pinned to emit exactly L tokens, so that every system of a comparison does equal work (CTC emits
what its slots give: its work is set by the source length)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from atnat.core.engine_names import parse_engine
from atnat.core.errors import AtnatError
from atnat.core.special import SpecialTokens
from atnat.decoding import beam, dag_walk, greedy, mask_predict, parallel
from atnat.decoding import ctc_search as ctc

FIRST_ORDINARY = SpecialTokens().first_ordinary  # random sources use ordinary tokens only
FULL = dict(d_model=256, n_heads=4, ffn_dim=1024, encoder_layers=3, decoder_layers=3, dropout=0.0)
TINY = dict(d_model=32, n_heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=1, dropout=0.0)
SRC_LEN, OUT_LEN = 20, 30
SWEEP_LENGTHS, SWEEP_BATCHES = (10, 30, 50, 100), (1, 8, 64, 256)
STRATEGIES = ("greedy", "beam5", "parallel", "mask-predict-4", "mask-predict-10", "ctc", "dag-lookahead", "dag-viterbi")
DAG_UPSAMPLE = 4  # the DAG decoder's vertices per source token (lambda), the families grid's; more for long outputs
HF_BEAMS = {"greedy": 1, "beam5": 5}  # our strategies that have a Hugging Face / CTranslate2 peer


@dataclass(frozen=True)
class Spec:
    """What one benchmark run measures and how."""

    model: dict  # ModelConfig fields
    vocab: int
    shapes: tuple[tuple[int, int], ...]  # (batch, out_len) pairs
    src_len: int = SRC_LEN
    repeats: int = 5
    warmup: int = 2
    device: str = "cpu"
    threads: int = 2
    hf: bool = True  # add the Hugging Face peer rows when transformers is importable
    compile: str | None = None  # torch.compile mode: adds "ours-compiled" rows (static-cache AT step)
    ct2: bool = True  # add the CTranslate2 rows (ct2-f32, ct2-int8) when ctranslate2 is importable
    quantize: str | None = None  # "int8": add "ours-int8" rows (dynamic int8 linear layers, CPU)
    engines: tuple[str, ...] = ()  # decoding engines (modelfiles/engines.py): rows "ours-<engine>"
    int8_engines: tuple[str, ...] = ()  # engines of the int8 models (with quantize int8): "ours-int8-<engine>"
    strategies: tuple[str, ...] = STRATEGIES  # our strategies to time (each with its peers)


def make_spec(*, tiny=False, sweep=False, **kw) -> Spec:
    """The default (or --tiny) model and the default (or --sweep) shapes; kw overrides."""
    shapes = ((1, OUT_LEN), (64, OUT_LEN))
    if sweep:
        shapes = tuple(dict.fromkeys([(1, n) for n in SWEEP_LENGTHS] + [(b, OUT_LEN) for b in SWEEP_BATCHES]))
    base = Spec(model=TINY if tiny else FULL, vocab=64 if tiny else 8000, shapes=shapes,
                repeats=1 if tiny else 5, warmup=1 if tiny else 2)
    return replace(base, **{k: v for k, v in kw.items() if v is not None})


def check_spec(spec: Spec) -> None:
    """Refuse settings that cannot be measured, naming the option."""
    if spec.device != "cpu" and (spec.device != "cuda" or not torch.cuda.is_available()):
        raise AtnatError(f"--device {spec.device}: not available (cpu, or cuda with a CUDA device)")
    if spec.quantize not in (None, "none", "int8") or (spec.quantize == "int8" and spec.device != "cpu"):
        raise AtnatError(f"--quantize {spec.quantize}: int8 rows run on the CPU only (PyTorch's dynamic int8 kernels)")
    unknown = [name for name in spec.strategies if name not in STRATEGIES]
    twice = sorted({name for name in spec.strategies if spec.strategies.count(name) > 1})
    if unknown or twice or not spec.strategies:
        why = ("unknown " + ", ".join(unknown) if unknown else "given twice: " + ", ".join(twice) if twice
               else "none given")
        raise AtnatError(f"--strategies {','.join(spec.strategies) or '(none)'}: {why}; valid: {', '.join(STRATEGIES)}")
    for engine in spec.engines + spec.int8_engines:
        parse_engine(engine)  # an unknown name or option: one message with the valid ones
    if spec.int8_engines and spec.quantize != "int8":
        raise AtnatError("--int8-engine needs --quantize int8 (it adds engines to the int8 rows)")
    if spec.repeats < 1 or spec.warmup < 0 or spec.threads < 1:
        raise AtnatError(f"need --repeats >= 1, warm-up >= 0 and --threads >= 1; got repeats="
                         f"{spec.repeats}, warmup={spec.warmup}, threads={spec.threads}")


def start(spec: Spec) -> None:
    """Check spec and give torch its thread count: the first thing every benchmark run does."""
    check_spec(spec)
    torch.set_num_threads(spec.threads)


def ctc_upsample(out_len: int, src_len: int) -> int:
    """Upsampling factor giving at least 2 slots per output token: k = ceil(2 L / S) (3 at 30/20)."""
    return max(1, math.ceil(2 * out_len / src_len))


def dag_upsample(out_len: int, src_len: int) -> int:
    """Vertices per source token: DAG_UPSAMPLE, or more where the graph (lambda S + 2 vertices) would hold
    fewer than 2 per output token."""
    return max(DAG_UPSAMPLE, ctc_upsample(out_len, src_len))


def our_strategy(name: str, out_len: int):
    """-> (decoder family, strategy object) of a benchmark strategy name, pinned to out_len."""
    pinned = dict(min_len=out_len, max_len_a=0.0, max_len_b=out_len, max_len_cap=out_len)
    if name == "greedy":
        return "at", greedy.Greedy(**pinned)
    if name == "beam5":
        return "at", beam.Beam(beam_size=5, **pinned)
    if name == "parallel":
        return "nat", parallel.Parallel()
    if name.startswith("mask-predict-"):  # early stop off: every iteration really runs
        return "cmlm", mask_predict.MaskPredict(iterations=int(name.rsplit("-", 1)[1]), early_stop=False)
    if name == "dag-lookahead":  # dedup off: the forced path's tokens are all emitted (systems.ForcedPath)
        return "dag", dag_walk.DAGLookahead(dedup=False)
    if name == "dag-viterbi":
        return "dag", dag_walk.DAGViterbi(dedup=False)
    return "ctc", ctc.CTC()


# --size: model dimensions and the default target tokens of a batch (vocabulary: the bench's)
SIZES = {
    "bench": (None, 4096),  # the bench's own model (bench/spec.py FULL: D=256, 3+3)
    "grid": (dict(d_model=512, n_heads=8, ffn_dim=2048, encoder_layers=5, decoder_layers=5, pre_ln=True), 12000),
    "base": (dict(d_model=512, n_heads=8, ffn_dim=2048, encoder_layers=6, decoder_layers=6), 25000),
}  # grid: experiments/grids/multi30k.yaml's model and batch; base: Transformer-base (Vaswani et al. 2017)
