"""`atnat bench`: decoding and training speed of our AT and NAT models, side by side with a
Hugging Face peer of identical dimensions (hf.py) and CTranslate2 running our own AT weights in
float32 and int8 (ct2_peer.py); `--quantize int8` adds our AT and NAT models with dynamic int8 linear
layers (`ours-int8`, modelfiles/quantize.py).

decode (decode_run.py, systems.py): every system decodes the same random sources (B x S ids) with
random weights and emits exactly L tokens per sentence (AT: min = max length; NAT: the predicted
length forced to L; DAG: links that allow one path of L tokens, the pass over all lambda S + 2
vertices still run; CTC: what its slots give; spec.py, systems.py), so throughputs compare equal
work. A timed call is the whole decode, encoder included. Warm-up, CUDA sync, median of repeats,
decoder passes counted (design.md, "Measuring speed honestly"); per row also the peak memory of its
timed calls, and the growth of memory in use over repeated calls (the leak check, OUT_memory.csv:
delta_mb > 0 is a leak). A system that raises keeps its error in its row (column `error`, no time);
the others are still measured and written, and the command then fails, naming it.
`--sweep` adds a figure (plots.py).
train (train_step.py): target tokens/s of forward + backward + clip + Adam step per decoder; on CUDA
bf16 autocast and MFU (the step's FLOPs, encoder and CTC slots and GLAT's pass included: flops.py,
against the card's exact bf16 peak).
profile (profile.py): torch.profiler's top operators of one of our strategies.
The command line (cli.py) hangs these under `atnat bench` of the main parser. May import:
evaluation/, config/, modelfiles/, data/, files.py.
"""
from atnat.experiments.bench.cli import main
from atnat.experiments.bench.decode_run import COLUMNS, LEAK_BATCH, LEAK_STRATEGY, add_ratios, run_decode
from atnat.experiments.bench.plots import plot_sweep
from atnat.experiments.bench.profile import run_profile
from atnat.experiments.bench.spec import FULL, OUT_LEN, SRC_LEN, STRATEGIES, TINY, Spec, check_spec, make_spec, our_strategy
from atnat.experiments.bench.systems import Models, System, check_ours, our_fn, our_system, time_round_robin
from atnat.experiments.bench.train_step import run_train

__all__ = ["COLUMNS", "FULL", "LEAK_BATCH", "LEAK_STRATEGY", "Models", "OUT_LEN", "SRC_LEN", "STRATEGIES", "Spec",
           "System", "TINY", "add_ratios", "check_ours", "check_spec", "main", "make_spec", "our_fn", "our_strategy",
           "our_system", "plot_sweep", "run_decode", "run_profile", "run_train", "time_round_robin"]
