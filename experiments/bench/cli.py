"""The `atnat bench` commands (decode, train, profile), declared on the main `atnat` parser."""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

from atnat.core.arguments import positive_float, positive_int, positive_ints
from atnat.core.engine_names import ENGINES, OPTIONS
from atnat.core.errors import AtnatError
from atnat.experiments.bench.spec import OUT_LEN, SIZES, STRATEGIES, SWEEP_BATCHES, SWEEP_LENGTHS, check_spec, make_spec
from atnat.models.decoders.autoregressive import COMPILE_MODES
from atnat.models.step_forms import STEP_FORMS

COMMANDS = {
    "decode": "decoding speed of every strategy of ours beside the Hugging Face and CTranslate2 peers",
    "train": "training throughput (target tokens/s; MFU on CUDA) of every decoder family",
    "profile": "self time per operator of one of our strategies at one shape (torch.profiler)",
    "count": "instructions per decode call of each system, by kind of code (valgrind's callgrind; valid on a "
             "loaded machine)",
}


def add_commands(bench: argparse.ArgumentParser) -> None:
    """Give the `atnat bench` parser its three subcommands and their options."""
    sub = bench.add_subparsers(dest="what", required=True)
    for name, text in COMMANDS.items():
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        p.add_argument("--out", help="CSV to write" + (" (with --sweep also a PNG next to it)" if name == "decode" else ""))
        count, profile = name == "count", name == "profile"
        p.add_argument("--threads", type=positive_int, help="count: 1 only (each system's process runs one thread)" if count
                       else "torch threads for every system (default 2)")
        p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="count: cpu only" if count else None)
        p.add_argument("--tiny", action="store_true", help="tiny model, 1 repeat (tests)")
        p.add_argument("--warmup", type=int, help="refused: each system runs one checked call first" if count or profile
                       else "untimed calls first (default 2; tiny 1)")
    data = sub.add_parser("data", help=DATA_HELP, description=DATA_HELP[0].upper() + DATA_HELP[1:] + ".")
    data.add_argument("--pairs", type=positive_ints, default="300000", help="comma-separated corpus sizes (default 300000)")
    data.add_argument("--folder", help="where the corpora, caches and runs go (default: bench-data in atnat's "
                                       "cache, ~/.cache/atnat or $ATNAT_CACHE; a corpus already there is kept)")
    data.add_argument("--threads", type=positive_int, default=2, help="encoding threads of the prepare phase (default 2)")
    data.add_argument("--baseline-python", help="also run the train phase with this Python's atnat (an older "
                                                "installation), on a cache of its own")
    data.add_argument("--baseline-max-pairs", type=positive_int, default=1_000_000,
                      help="run the baseline only on corpora up to this size (default 1000000: older code holds "
                           "the whole corpus in memory)")
    data.add_argument("--out", help="CSV to write (rewritten after each row)")
    dec, tr, prof, cnt = (sub.choices[name] for name in ("decode", "train", "profile", "count"))
    cnt.add_argument("--systems", default="ours", help="comma-separated rows as decode names them: ours, "
                     "ours-int8, ours-ENGINE, ours-int8-ENGINE (default ours); ct2-f32 and ct2-int8 give a row "
                     "saying why they cannot be counted, and the command fails")
    cnt.add_argument("--strategies", default="greedy", help="comma-separated (default greedy)")
    cnt.add_argument("--batches", type=positive_ints, default="1", help="comma-separated batch sizes (default 1)")
    cnt.add_argument("--calls", type=positive_int, default=2, help="decode calls counted per system (default 2)")
    cnt.add_argument("--out-len", type=positive_int, default=OUT_LEN)
    cnt.set_defaults(sweep=False, repeats=None, no_hf=True, no_ct2=True, quantize="none", compile=None, engine=None,
                     int8_engine=None)
    prof.add_argument("--strategy", choices=STRATEGIES, default="greedy")
    prof.add_argument("--batch", type=positive_int, default=1)
    prof.add_argument("--out-len", type=positive_int, default=OUT_LEN)
    prof.add_argument("--calls", type=positive_int, default=5, help="profiled calls (after one warm-up)")
    prof.add_argument("--compile", choices=COMPILE_MODES)
    prof.add_argument("--engine", help="profile with this decoding engine (see --engine of decode)")
    prof.set_defaults(sweep=False, repeats=None, no_hf=True, no_ct2=True, quantize="none", int8_engine=None)
    dec.add_argument("--sweep", action="store_true", help=f"lengths {SWEEP_LENGTHS}, batches {SWEEP_BATCHES}")
    dec.add_argument("--repeats", type=positive_int, help="timed calls per row (default 5; tiny 1)")
    dec.add_argument("--strategies", help="comma-separated strategies of ours to time, each with its peers (default "
                                          "all: " + ",".join(STRATEGIES) + ")")
    dec.add_argument("--no-hf", action="store_true", help="skip the Hugging Face peer")
    dec.add_argument("--no-ct2", action="store_true", help="skip the CTranslate2 rows (ct2-f32, ct2-int8)")
    dec.add_argument("--quantize", choices=["none", "int8"], default="none",
                     help="int8: add ours-int8 rows (our models with dynamic int8 linear layers; CPU)")
    dec.add_argument("--compile", choices=COMPILE_MODES,
                     help="add ours-compiled rows: the AT step with a static cache under torch.compile "
                          "(reduce-overhead = CUDA graphs on a GPU)")
    dec.add_argument("--engine", help="comma-separated decoding engines, each adding rows ours-ENGINE beside the "
                                      "eager ones: " + ", ".join(ENGINES) + " with options +" + ", +".join(OPTIONS)
                                      + " (e.g. static,aoti,aoti+autotune,packed+bf16; modelfiles/engines.py)")
    dec.add_argument("--int8-engine", help="with --quantize int8: engines for the int8 models (rows ours-int8-ENGINE)")
    tr.add_argument("--steps", type=positive_int, default=5, help="timed training steps (default 5)")
    tr.add_argument("--tokens", type=positive_int, help="target tokens per batch (default by --size: bench 4096, grid 12000, "
                                             "base 25000; tiny 256)")
    tr.add_argument("--size", choices=list(SIZES), default="bench",
                    help="model size: bench (D=256, 3+3), grid (the GPU grid's D=512, 5+5), base (Transformer-base, "
                         "D=512, 6+6)")
    tr.add_argument("--forms", default="eager", help="comma-separated step forms timed side by side: "
                                                     + ", ".join(STEP_FORMS) + " (default eager)")
    tr.add_argument("--decoders", default="at,nat,cmlm,ctc", help="comma-separated (default at,nat,cmlm,ctc)")
    tr.add_argument("--peer", action="store_true", help="add hf-marian rows: Hugging Face's MarianMTModel at the "
                                                        "same size, trained on the same batch (needs transformers)")
    tr.add_argument("--peak-tflops", type=positive_float, help="device peak for MFU (default: by GPU name)")
    tr.add_argument("--precision", help="comma-separated: fp32,bf16 (default: fp32, and bf16 where the device "
                                        "does it natively: a GPU, a CPU with avx512_bf16/AMX)")
    tr.set_defaults(sweep=False, repeats=None, no_hf=False, compile=None, no_ct2=True, quantize="none", engine=None,
                    int8_engine=None)


DATA_HELP = ("what a corpus of N pairs costs: preparation time and memory, time to the first training step, "
             "loader throughput (a synthetic corpus it writes)")


def run(args: argparse.Namespace) -> None:
    """Run the parsed `atnat bench` command: print its table, write --out (and the sweep figure)."""
    # the runners import Lightning, plotting and the peers: here, so that declaring the commands stays light
    from atnat.experiments.bench.decode_run import print_decode, run_decode
    from atnat.experiments.bench.plots import plot_sweep
    from atnat.experiments.bench.profile import run_profile
    from atnat.experiments.bench.train_step import run_train, sized

    if args.out and (Path(args.out).is_dir() or Path(args.out).parent.is_file()):  # said now, not after the measuring
        raise AtnatError(f"--out {args.out}: {'a folder' if Path(args.out).is_dir() else 'inside a file'}; give the "
                         "path of a CSV file to write")
    if args.what == "data":
        from atnat.experiments.bench.data_bench import bench_data  # lazy: start-up
        from atnat.experiments.data.tokenize import CACHE_DIR  # lazy: start-up

        df = bench_data(args.pairs, Path(args.folder) if args.folder else CACHE_DIR / "bench-data",
                        baseline_python=args.baseline_python, baseline_max_pairs=args.baseline_max_pairs,
                        threads=args.threads, out=Path(args.out) if args.out else None)
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        return
    ignored = {"count": [("--device", args.device != "cpu"), ("--warmup", args.warmup is not None),
                         ("--threads", args.threads not in (None, 1))],
               "profile": [("--warmup", args.warmup is not None),
                           ("--engine with more than one engine", len(_names(getattr(args, "engine", None)) or ()) > 1)]}
    given = [flag for flag, set_ in ignored.get(args.what, []) if set_]
    if given:
        raise AtnatError(f"atnat bench {args.what}: {', '.join(given)} would be ignored (count: one CPU thread and its own "
                         "checked and warm call per system; profile: one engine, one checked call before the profiled ones)")
    spec = make_spec(tiny=args.tiny, sweep=args.sweep, threads=args.threads, device=args.device,
                     warmup=args.warmup, repeats=args.repeats, hf=not args.no_hf, compile=args.compile,
                     ct2=not args.no_ct2, quantize=None if args.quantize == "none" else args.quantize,
                     engines=_names(args.engine), int8_engines=_names(args.int8_engine),
                     strategies=_names(args.strategies) if args.what == "decode" else None)
    check_spec(spec)
    shown = sized(spec, args.size) if args.what == "train" else spec  # the model the rows are of
    threads = 1 if args.what == "count" else spec.threads  # count's processes run on one thread
    print(f"atnat bench {args.what}: d_model {shown.model['d_model']}, vocab {shown.vocab}, "
          f"{spec.device}, {threads} thread{'s' * (threads != 1)}, torch {torch.__version__}")
    if args.what == "count":
        from atnat.experiments.bench.count import count  # lazy: needs valgrind

        split = lambda text: [x.strip() for x in text.split(",") if x.strip()]
        df = count(split(args.systems), split(args.strategies), args.batches,
                   calls=args.calls, tiny=args.tiny, out_len=args.out_len)
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    elif args.what == "profile":
        df = run_profile(spec, args.strategy, args.batch, args.out_len, calls=args.calls)
        print(f"ours/{args.strategy}, batch {args.batch}, {args.out_len} tokens: self time per call by op")
        print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    elif args.what == "decode":
        df = run_decode(spec)
        print_decode(df)
    else:
        split = lambda text: tuple(x.strip() for x in text.split(",") if x.strip())
        df = run_train(spec, steps=args.steps, tokens=args.tokens or (256 if args.tiny else None),
                       peak_tflops=args.peak_tflops, size=args.size, forms=split(args.forms),
                       decoders=split(args.decoders), peer=args.peer,
                       precisions=split(args.precision) if args.precision else None)
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.out:
        write_csv(df, args.out)
        if args.sweep:
            print(f"wrote {plot_sweep(args.out)}")
    failed = df[df.error.fillna("").astype(str).str.len() > 0] if "error" in df else df.iloc[:0]
    if len(failed):  # the measured rows are printed and written first; the run still fails
        raise AtnatError(f"{len(failed)} of {len(df)} rows failed (column error{' of ' + args.out if args.out else ''}): "
                         + "; ".join(f"{r.system}/{r.strategy} at batch {r.batch}: {r.error}"
                                     for r in failed.itertuples()))


def _names(text: str | None) -> tuple[str, ...] | None:
    return tuple(e.strip() for e in text.split(",") if e.strip()) if text else None


def write_csv(df, out: str) -> None:
    """The frame as CSV at `out`, and its leak-check rows (decode) as OUT_memory.csv beside it."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    if df.attrs.get("memory"):
        pd.DataFrame(df.attrs["memory"]).to_csv(path.with_name(path.stem + "_memory.csv"), index=False)
    print(f"wrote {out}")


def main(argv: list[str]) -> None:
    """`atnat bench ARGV...` without the top-level error handling (an AtnatError propagates)."""
    bench = argparse.ArgumentParser(prog="atnat bench")
    add_commands(bench)
    run(bench.parse_args(argv))
