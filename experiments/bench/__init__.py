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
from importlib import import_module

# The package's names, each imported from its module on first use: `atnat --help` declares the bench
# commands (cli.py) without importing the runners, Lightning or the peers.
_EXPORTS = {
    "cli": ["main"],
    "decode_run": ["COLUMNS", "LEAK_BATCH", "LEAK_STRATEGY", "add_ratios", "run_decode"],
    "plots": ["plot_sweep"],
    "profile": ["run_profile"],
    "spec": ["FULL", "OUT_LEN", "SRC_LEN", "STRATEGIES", "TINY", "Spec", "check_spec", "make_spec", "our_strategy"],
    "systems": ["Models", "System", "check_ours", "our_fn", "our_system", "time_round_robin"],
    "train_step": ["run_train"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
