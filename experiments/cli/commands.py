"""The `atnat` command line: train, evaluate, translate, export, distill, run (grids), cell, status, collect, report,
bench, data, list.

Each command imports what it uses when it runs (imports marked `# lazy: start-up`), so that
`atnat status` or `atnat list` does not load the benchmark peers, submitit or the report's plotting."""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager, suppress
from pathlib import Path

from atnat.core.arguments import positive_int
from atnat.core.errors import AtnatError
from atnat.experiments.files import (
    UnwritableError,
    check_output_file,
    write_lines_atomic,
    write_strict_json_atomic,
)

USER_HELP = """Train and compare autoregressive and non-autoregressive translation models.

  atnat run GRID.yaml --workers 2      train, evaluate and time a grid; writes results/<grid>/report.html
  atnat train RUN.yaml                 one model from a run config
  atnat translate --checkpoint RUN     translate stdin to stdout
  atnat evaluate --checkpoint RUN --src F --ref F     BLEU, chrF and speed on any files
  atnat list                           every decoder, strategy, task, metric and engine, with its options

`atnat COMMAND -h` says more about each command. Guides: README.md, and the README beside each folder's code."""


def cmd_train(args) -> None:
    from contextlib import nullcontext

    from atnat.experiments.config.devices import helper_rank  # lazy: start-up
    from atnat.experiments.config.run import load_run_config, parse_override  # lazy: start-up
    from atnat.experiments.files import path_part  # lazy: start-up
    from atnat.experiments.locks import cell_lock, held  # lazy: start-up
    from atnat.experiments.running.cell import run_cell  # lazy: start-up

    overrides: dict = {}
    for item in args.set or []:
        from atnat.experiments.config.run import deep_update  # lazy: start-up
        overrides = deep_update(overrides, parse_override(item))
    cfg = load_run_config(args.config, overrides)
    run_dir = Path(args.output_dir or cfg.output_dir or Path("runs") / path_part(cfg.name, f"{args.config}: name"))
    if run_dir.exists() and not run_dir.is_dir():
        raise AtnatError(f"--output-dir {run_dir} is a file; give a folder for the run (new, or a run to resume)")
    refuse_foreign_folder(run_dir)
    new_folder = not run_dir.exists()
    lock = nullcontext() if helper_rank() else held(cell_lock(run_dir), f"run folder {run_dir}")
    with removed_if_left_empty(run_dir if new_folder else None), lock:  # a second train into the folder is refused
        try:  # (DDP's helper ranks run under rank 0's lock)
            result = run_cell(cfg, run_dir, allow_changes=args.allow_settings_change)
        except KeyboardInterrupt:
            from atnat.experiments.modelfiles.checkpoints import checkpoint_step  # lazy: start-up
            from atnat.experiments.training.resume import resume_point  # lazy: start-up

            saved = resume_point(run_dir / "checkpoints", set_aside=False)
            print(f"atnat: {run_dir} " + (f"resumes from step {checkpoint_step(saved)}" if saved else
                                          "starts again from step 0 (no checkpoint saved yet)"), file=sys.stderr)
            raise
    if result is not None:  # None: a helper rank of a multi-device run
        print_rows(result.rows)


@contextmanager
def removed_if_left_empty(run_dir: Path | None):
    """A run folder made for a run refused before it wrote anything (only its lock there) is removed when the
    lock is released: a refusal leaves nothing behind."""
    try:
        yield
    finally:
        if run_dir is not None and run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= {"cell.lock"}:
            (run_dir / "cell.lock").unlink(missing_ok=True)
            with suppress(OSError):
                run_dir.rmdir()


# what a run writes into its folder (training/, evaluation/, running/): a folder of these names only is a run's
RUN_ENTRIES = {"config.json", "attempts.json", "checkpoints", "logs", "progress.json", "cell.lock", "cell.lock.json",
               "distill.json", "distill", "train.json", "metrics.json", "error.log", "curves", "hyps", "samples.csv",
               "worker.log", "job.json", "settings_changes.json", "exported"}


def refuse_foreign_folder(run_dir: Path) -> None:
    """A run writes config.json, metrics.json and more into its folder, replacing files of those names: a
    folder that holds anything else (a project, an export) is refused, unless it is a run to resume."""
    import json

    if not run_dir.is_dir():
        return
    config = run_dir / "config.json"
    try:
        recorded = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else None
    except (OSError, ValueError):
        recorded = {}
    a_run = isinstance(recorded, dict) and {"decoder", "train", "model"} <= set(recorded)
    if config.exists() and not a_run:
        raise AtnatError(f"--output-dir {run_dir}: its config.json is not a run's (an export, or a file of yours), and "
                         "a run would replace it; give a new folder, or a run's folder to resume")
    others = sorted(p.name for p in run_dir.iterdir() if p.name not in RUN_ENTRIES and not p.name.startswith("references")
                    and not p.name.startswith("."))
    if others and not a_run:
        raise AtnatError(f"--output-dir {run_dir} holds other things than a run ({', '.join(others[:4])}"
                         f"{', ...' if len(others) > 4 else ''}); give a new folder, or a run's folder to resume")


def print_rows(rows: list[dict], extra: tuple[str, ...] = ()) -> None:
    """A run's rows on stdout, each column printed with its format from evaluation/schema.py."""
    import pandas as pd

    from atnat.experiments.evaluation.columns import by_name  # lazy: start-up
    from atnat.experiments.evaluation.metrics.row import METRICS  # lazy: start-up

    declared = by_name()
    plugin_columns = [c.name for name in METRICS.in_order() if not METRICS.get(name).__module__.startswith("atnat.")
                      for c in METRICS.get(name).columns if c.shown]  # a user's metric: its own columns shown too
    cols = ["strategy", "bleu", *extra, "chrf", "exact_match", "latency_ms_b1", "throughput_sents_s", "decoder_passes",
            *plugin_columns]
    df = pd.DataFrame(rows)
    shown = df[[c for c in cols if c in df]].copy()
    for col in shown.columns:
        if col in declared and declared[col].fmt:
            shown[col] = shown[col].map(declared[col].format)
    print(shown.to_string(index=False))


def refuse_without_teacher(strategy, label: str, teacher, flag: str) -> None:
    """A strategy that runs an AT teacher (npd, speculative) without --teacher: refused before any input is read
    (a model's own record of its teacher is not read back: the teacher is named on the command line)."""
    if strategy.uses_teacher and teacher is None:
        raise AtnatError(f"{flag}: strategy {label} runs an AT teacher: give --teacher RUN")


def refuse_unused_teacher(strategies: dict[str, object], teacher: str | None) -> None:
    """--teacher given where no strategy runs one (greedy, beam, parallel...): refused, not loaded and ignored
    without a word (the user meant npd or speculative, or a teacher that does nothing here)."""
    if teacher and not any(s.uses_teacher for s in strategies.values()):
        raise AtnatError(f"--teacher {teacher}: no strategy asked for runs a teacher ({', '.join(strategies)}); "
                         "a teacher serves npd and speculative: name one of those, or drop --teacher")


def load_teacher(path: str | None, tokenizer, device, strategies):
    """The --teacher model (npd's scorer, speculative's verifier), refused unless it reads and writes the same
    tokens as the model: its ids index another vocabulary (an IndexError mid-way, or silently other words); and,
    where one of `strategies` verifies with it, unless its block pass computes its own step's arithmetic."""
    from atnat.experiments.evaluation.assemble import check_teacher  # lazy: start-up
    from atnat.experiments.modelfiles.loading import load_module  # lazy: start-up

    if not path:
        return None
    teacher, teacher_tokenizer = load_module(path, map_location=device)
    check_teacher(teacher, teacher_tokenizer, tokenizer, f"--teacher {path}",
                  verifies=any(s.needs_verifier for s in strategies))
    return teacher


def cmd_translate(args) -> int:
    from atnat.experiments.config.devices import decode_device  # lazy: start-up
    from atnat.experiments.config.run import build_strategy  # lazy: start-up
    from atnat.experiments.evaluation.translate import translate_stream  # lazy: start-up
    from atnat.experiments.modelfiles.loading import load_module  # lazy: start-up
    from atnat.experiments.modelfiles.quantize import maybe_quantize  # lazy: start-up

    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)):  # closed by the caller (`<&-`, `>&-`)
        if stream is None:
            raise AtnatError(f"{name} is closed: translate reads lines from standard input and writes their "
                             "translations to standard output")
    engine = checked_engine(args)
    device = decode_device(args.device, args.quantize, note=lambda text: print(text, file=sys.stderr))
    module, tokenizer = load_module(args.checkpoint, map_location=device)
    module = maybe_quantize(module, args.quantize)
    spec = strategy_spec(args, module)
    label, strategy = build_strategy(spec)
    refuse_incompatible(module, strategy, "--strategy")  # before reading any input
    refuse_without_teacher(strategy, label, args.teacher, "--strategy")
    refuse_unused_teacher({label: strategy}, args.teacher)  # before the teacher is loaded
    teacher = load_teacher(args.teacher, tokenizer, device, [strategy])
    if teacher is not None:
        use_engine(teacher, engine, single_sentences=args.batch_size == 1)
    if args.compile:
        module.decoder.use_static_cache(True, args.compile)
    use_engine(module, engine, single_sentences=args.batch_size == 1)
    lines = utf8_lines(getattr(sys.stdin, "buffer", sys.stdin), "stdin")  # bytes, decoded strictly: a bad line is named
    report = translate_stream(module, tokenizer, strategy, lines, sys.stdout, sys.stderr,
                              batch_size=args.batch_size, long_lines=args.long_lines, teacher=teacher)
    if report.refused:
        print(f"atnat translate: {report.refused} of {report.lines} lines were too long for the model and left "
              "empty", file=sys.stderr)
        return 1
    return 0


def utf8_lines(stream, name: str):
    """The lines of a byte stream as text; one AtnatError naming the line that is not UTF-8 (the lines before
    it are translated and written already)."""
    for number, raw in enumerate(stream, 1):
        if isinstance(raw, str):  # a text stream (already decoded)
            yield raw
            continue
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise AtnatError(f"{name} line {number} is not valid UTF-8 ({err.reason} at byte {err.start}); "
                             "give UTF-8 text") from None


def refuse_overwriting_inputs(outputs: dict[str, str | None], inputs: dict[str, str | None]) -> None:
    """An output path that is one of the inputs would replace it: one error naming both (an input is named by
    its flag, or by what it is)."""
    for out_flag, out in outputs.items():
        for in_flag, given in inputs.items():
            if out and given and Path(out).exists() and Path(given).exists() and Path(out).samefile(given):
                what = f"the file given to {in_flag}" if in_flag.startswith("-") else in_flag  # a flag, or a file's role
                raise AtnatError(f"{out_flag} {out} is {what}: writing it would replace it; give another path")


def refuse_writing_into_models(outputs: dict[str, str | None], models: dict[str, str | None]) -> None:
    """An output path among a model's own files (a run's config.json, metrics.json, checkpoints and logs; a
    checkpoint file itself) would replace them, and any path inside an export would be a file planted there
    (the export then refuses to load): one error naming both. A new file beside a run's own is allowed."""
    from atnat.experiments.modelfiles.checkpoints import checksum_path  # lazy: start-up
    from atnat.experiments.modelfiles.export import is_ct2_export_dir, is_export_dir  # lazy: start-up

    for out_flag, out in outputs.items():
        if not out:
            continue
        target = Path(out).resolve()
        for model_flag, given in models.items():
            if not given or not Path(given).exists():
                continue
            model = Path(given).resolve()
            if model.is_file() and model.parent.name == "checkpoints":
                model = model.parent.parent  # a run's checkpoint: the run is the model's folder
            if model.is_file():  # the checkpoint, or the sha256 beside it (which then refuses the checkpoint)
                own = target in (model, checksum_path(model))
            else:
                try:
                    first = target.relative_to(model).parts[0]
                except (ValueError, IndexError):
                    continue
                if is_export_dir(model) or is_ct2_export_dir(model):
                    raise AtnatError(f"{out_flag} {out} is inside the export given to {model_flag} ({given}), which "
                                     "holds its own files only: give a path outside it")
                own = first in RUN_ENTRIES or first.startswith("references")
            if own:
                raise AtnatError(f"{out_flag} {out} is a file of the model given to {model_flag} ({given}): writing "
                                 "it would replace it; give a path outside the model's files")


def checked_engine(args):
    """--engine read and checked (one error naming the valid engines and options), before any model loads."""
    from atnat.core.engine_names import parse_engine  # lazy: start-up

    if args.engine is None:  # not given: the default, or eager beside --compile (the compiled step is its own engine)
        return parse_engine("eager" if getattr(args, "compile", None) else None, "--engine")
    engine = parse_engine(args.engine, "--engine")
    if getattr(args, "compile", None) and not engine.is_eager:
        raise AtnatError(f"--compile and --engine {engine.label}: give one (--engine inductor is the compiled "
                         "static step on the CPU)")
    return engine


def use_engine(module, engine, single_sentences: bool) -> None:
    """Decode with `engine` (modelfiles/engines.py); an engine whose tokens may differ from eager's
    says so. `single_sentences`: the command decodes sentences one at a time (the auto engine then
    compiles the AT step for them; for batches it would not pay)."""
    from atnat.core.engine_names import AUTO_STEP_ROWS  # lazy: start-up
    from atnat.experiments.modelfiles.engines import apply_engine  # lazy: start-up

    info = apply_engine(module, engine, step_rows=AUTO_STEP_ROWS if single_sentences else 0)
    if not info.exact:
        print(f"atnat: engine {info.label}: {info.inexact_reason}", file=sys.stderr)
    if info.eager_step:
        print(f"atnat: engine {info.engine.label}: the AT step stays the model's own, eager ({info.eager_step})",
              file=sys.stderr)


def refuse_incompatible(module, strategy, flag: str) -> None:
    """A strategy the model cannot drive: one error naming the flag and the strategies that can."""
    problem = strategy.problem_with(module.decoder)
    if problem:
        raise AtnatError(f"{flag}: {problem}")


def strategy_spec(args, module) -> dict:
    """The strategy the command decodes with: --strategy and its options, or the model's own (the strategy
    its validation decodes with: greedy for an AT, parallel for a NAT, ctc for CTC, dag-lookahead for a DAG),
    named on stderr so that the user knows what ran."""
    if args.strategy is None:
        own = module.decoder.validation_strategy(module.decoder.options)
        args.strategy = own["name"]
        print(f"atnat: decoding with strategy {args.strategy!r}, this {module.decoder.registered_name} model's own "
              "(--strategy NAME for another; `atnat list` shows which drive it)", file=sys.stderr)
        return {**own, **strategy_options(args)}
    return {"name": args.strategy, **strategy_options(args)}


def strategy_options(args) -> dict:
    import dataclasses

    from atnat.decoding.base import STRATEGIES  # lazy: start-up

    fields = {f.name for f in dataclasses.fields(STRATEGIES.get(args.strategy))}
    opts = {}
    if args.beam is not None:
        key = next((k for k in ("beam_size", "length_beam") if k in fields), None)
        if key is None:
            raise AtnatError(f"--beam does not apply to strategy {args.strategy!r} (it has no beam_size or length_beam)")
        opts[key] = args.beam
    if args.iterations is not None:
        opts["iterations"] = args.iterations
    given = parse_assignments(args.option or [], "--option")
    if "name" in given:  # it replaced the strategy while the messages named the one asked for
        raise AtnatError(f"--option name={given['name']}: a strategy is chosen with --strategy NAME; --option sets "
                         "its options")
    for key in sorted(set(opts) & set(given)):  # one value, said once: not the later flag winning silently
        flag = "--iterations" if key == "iterations" else "--beam"
        raise AtnatError(f"{flag} {opts[key]} and --option {key}={given[key]} both set {key}: give one of them")
    return opts | given


def parse_assignments(items: list[str], what: str) -> dict:
    """["k=v", ...] -> {k: v} with values parsed as YAML; one error naming the bad item."""
    from atnat.experiments.config.run import yaml_value  # lazy: start-up

    out = {}
    for item in items:
        if "=" not in item:
            raise AtnatError(f"{what} {item!r}: expected NAME=VALUE")
        k, v = item.split("=", 1)
        if k in out:
            raise AtnatError(f"{what} {item!r}: {k} is set twice; give it once")
        out[k] = yaml_value(v, f"{what} {item!r}")
    return out


def cmd_distill(args) -> None:
    import json

    from atnat.experiments.data.tasks import read_lines  # lazy: start-up
    from atnat.experiments.training.distill import distill_sources, distilled_targets  # lazy: start-up

    refuse_overwriting_inputs({"--output": args.output}, {"--input": args.input})
    refuse_writing_into_models({"--output": args.output}, {"--teacher": args.teacher})
    check_output_file(Path(args.output), "--output")  # before the teacher decodes for hours
    args.strategy = args.strategy or "beam"  # a teacher is an AT: beam 5, as the grids distil
    if args.strategy == "beam" and args.beam is None and "beam_size" not in parse_assignments(args.option or [], "--option"):
        args.beam = 5
    spec = {"name": args.strategy, **strategy_options(args)}
    from atnat.experiments.config.devices import decode_device  # lazy: start-up
    from atnat.experiments.config.run import build_strategy  # lazy: start-up

    if build_strategy(spec)[1].uses_teacher:  # before the teacher is read
        raise AtnatError(f"--strategy {args.strategy}: it runs a second model beside the decoder (npd re-ranks with an "
                         "AT teacher, speculative drafts for one), but distillation decodes with the teacher alone: "
                         "give the teacher's own search (beam, the default, or greedy)")
    device = decode_device(args.device)
    if args.input:
        from atnat.experiments.modelfiles.loading import load_module  # lazy: start-up

        module, tokenizer = load_module(args.teacher, map_location=device)
        sources = read_lines(Path(args.input), "distillation input")
        lines = distill_sources(module, tokenizer, sources, spec)
        meta = {"teacher": args.teacher, "lines": len(lines)}
    else:  # the teacher run's own training split
        from atnat.experiments.config.run import (
            load_task,  # lazy: start-up
            run_config_from_dict,  # lazy: start-up
        )
        from atnat.experiments.modelfiles.export import is_export_dir  # lazy: start-up
        from atnat.experiments.training.distill import teacher_run_dir  # lazy: start-up

        if is_export_dir(Path(args.teacher)):
            raise AtnatError(f"{args.teacher} is an export directory (no training data): give --input SOURCE_FILE")
        run = teacher_run_dir(args.teacher)
        cfg_path = None if run is None else run / "config.json"
        if cfg_path is None or not cfg_path.is_file():
            raise AtnatError(f"{args.teacher} is not a run directory or a checkpoint in one (no config.json beside "
                             "its checkpoints/): give --input SOURCE_FILE or a teacher run directory")
        cfg = run_config_from_dict(json.loads(cfg_path.read_text()), str(cfg_path), recorded=True)
        task = load_task(cfg)
        read = {f"the teacher's training {side.what}": str(side.path) for side in task.side_texts("train")
                if side.path is not None}
        read |= {f"the teacher's {p.relative_to(run)}": str(p) for p in [cfg_path, *run.glob("checkpoints/*")]}
        refuse_overwriting_inputs({"--output": args.output}, read)  # before the teacher decodes for hours
        src, tgt = task.splits["train"]
        lines, meta = distilled_targets(args.teacher, src, tgt, spec, device=device)
    write_lines_atomic(Path(args.output), lines)
    print(f"wrote {len(lines)} lines to {args.output} ({json.dumps(meta)})", file=sys.stderr)


def cmd_evaluate(args) -> None:
    """Score a checkpoint (or run, or export) on any source/reference files, without a grid."""
    import torch

    from atnat.experiments.config.devices import decode_device  # lazy: start-up
    from atnat.experiments.config.speed import SpeedSettings  # lazy: start-up
    from atnat.experiments.data.tasks import read_lines  # lazy: start-up
    from atnat.experiments.evaluation.evaluate import evaluate_files  # lazy: start-up
    from atnat.experiments.modelfiles.loading import load_module  # lazy: start-up
    from atnat.experiments.modelfiles.quantize import maybe_quantize  # lazy: start-up

    refuse_overwriting_inputs({"--hyps": args.hyps, "--json": args.json},
                              {"--src": args.src, **{f"--ref {r}": r for r in args.ref}})
    refuse_writing_into_models({"--hyps": args.hyps, "--json": args.json},
                               {"--checkpoint": args.checkpoint, "--teacher": args.teacher})
    engine = checked_engine(args)
    if args.threads < 1:
        raise AtnatError(f"--threads {args.threads}: expected a positive number of CPU threads")
    torch.set_num_threads(args.threads)  # decoding and timing alike; recorded with every row
    device = decode_device(args.device, args.quantize, note=lambda text: print(text, file=sys.stderr))
    sources = read_lines(Path(args.src), "--src")  # before the model loads: a file's mistake named at once
    references = [read_lines(Path(r), f"--ref {r}") for r in args.ref]
    for given, stream in zip(args.ref, references):
        if len(stream) != len(sources):
            raise AtnatError(f"--ref {given} has {len(stream)} lines but --src {args.src} has {len(sources)}: a "
                             "reference file holds one line for each source line")
    module, tokenizer = load_module(args.checkpoint, map_location=device)
    module = maybe_quantize(module, args.quantize)
    use_engine(module, engine, single_sentences=not args.no_speed)  # the latency timing decodes one at a time
    specs = [strategy_spec(args, module)] + [_spec(s) for s in args.also or []]
    outputs = {flag: given for flag, given in (("--hyps", args.hyps), ("--json", args.json)) if given}
    for flag, given in outputs.items():  # before hours of decoding: a path no file can be written to
        check_output_file(Path(given), flag)
    if len(outputs) == 2 and Path(args.hyps).resolve() == Path(args.json).resolve():
        raise AtnatError(f"--hyps and --json are both {args.hyps}: the second would replace the first")
    from atnat.experiments.config.run import build_strategy  # lazy: start-up

    labels: dict[str, str] = {}
    built = {}
    for spec, flag in zip(specs, ["--strategy", *(f"--also {s}" for s in args.also or [])]):
        label, strategy = build_strategy(spec)
        built[label] = strategy
        refuse_incompatible(module, strategy, flag)  # before hours of decoding
        refuse_without_teacher(strategy, label, args.teacher, flag)
        if label in labels:  # one row per label: the second would be decoded, then lost or crash the timing
            raise AtnatError(f"{flag}: strategy {label} is asked for twice (also by {labels[label]})")
        labels[label] = flag
    refuse_unused_teacher(built, args.teacher)  # before the teacher is loaded
    teacher = load_teacher(args.teacher, tokenizer, device, built.values())
    if teacher is not None:
        use_engine(teacher, engine, single_sentences=not args.no_speed)
    speed = None if args.no_speed else SpeedSettings(latency_sentences=args.latency_sentences,
                                                     throughput_sentences=len(sources), repeats=args.repeats,
                                                     threads=args.threads)
    rows = evaluate_files(module, tokenizer, sources, references, specs, teacher=teacher,
                          n_bootstrap=args.n_bootstrap, compound_split=args.compound_split, lang=args.lang,
                          speed=speed, say=lambda text: print(f"atnat evaluate: {text}", file=sys.stderr, flush=True),
                          source_name=f"--src {args.src}")
    ran = getattr(module, "engine_info", None)  # what ran: `auto=cudagraphs`, `auto (AT step eager: ...)`
    for row in rows:  # an int8 model's rows say so (its tokens may differ from the float model's)
        row["engine"], row["threads"], row["quantize"] = ran.label if ran is not None else engine.label, \
            args.threads, args.quantize
    clean = [{k: v for k, v in r.items() if k != "hypotheses"} for r in rows]
    failed = []  # each file written on its own, before the table (a closed pipe must not lose them)
    for given, write in ((args.hyps, lambda: write_lines_atomic(Path(args.hyps), rows[0]["hypotheses"])),
                         (args.json, lambda: write_strict_json_atomic(Path(args.json), {
                             "checkpoint": str(args.checkpoint), "teacher": args.teacher and str(args.teacher),
                             "src": args.src, "ref": args.ref,
                             "engine": clean[0]["engine"], "threads": args.threads, "quantize": args.quantize,
                             "rows": clean}))):
        if given:
            try:
                write()
            except (AtnatError, OSError) as err:
                failed.append(err)
    print_rows(rows, extra=("bleu_tok", "bleu_ci_low", "bleu_ci_high"))
    if failed:
        raise failed[0]


def _spec(text: str) -> dict:
    """`--also beam:beam_size=5` -> {"name": "beam", "beam_size": 5} (values parsed as YAML)."""
    name, _, opts = text.partition(":")
    return {"name": name} | parse_assignments([o for o in opts.split(",") if o], f"--also {text!r}:")


def cmd_export(args) -> None:
    from atnat.experiments.modelfiles.export import refuse_export_inside_export  # lazy: start-up
    from atnat.experiments.modelfiles.loading import load_module  # lazy: start-up

    refuse_export_inside_export(Path(args.out_dir))  # either format: the outer export would hold a planted folder
    module, tokenizer = load_module(args.run)
    if args.format == "ctranslate2":
        from atnat.experiments.modelfiles.ct2 import export_ctranslate2  # lazy: start-up

        out = export_ctranslate2(module, tokenizer, args.out_dir)
    else:
        from atnat.experiments.modelfiles.export import export_safetensors  # lazy: start-up

        out = export_safetensors(module, args.out_dir)
    print(f"wrote {args.format} model to {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")


def cmd_run(args) -> int:
    """Exit 1 when a cell of this run failed or its timing job left systems untimed, 2 when one ran with other
    settings than the grid file gave as the run started (after the table and report are written)."""
    from atnat.experiments.running.launchers.cluster_settings import (
        refuse_cluster_flags_without_cluster,  # lazy: start-up
        settings_from_args,  # lazy: start-up
    )

    if args.workers is not None and args.workers < 1:
        raise AtnatError(f"--workers {args.workers}: expected a positive number of worker processes")
    refuse_cluster_flags_without_cluster(args)
    cluster = settings_from_args(args) if args.launcher != "local" else None
    devices = None
    if args.devices and cluster is None:  # GPUs of this machine (a cluster's jobs get theirs from the scheduler)
        from atnat.experiments.config.devices import gpu_ids  # lazy: start-up (torch)

        devices = gpu_ids(args.devices)
    elif args.devices:
        devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    if args.dry_run:  # the plan alone: no cell trains
        from atnat.experiments.running.plan import (  # lazy: start-up
            gpu_notes,
            plan,
            refuse_files_in_the_way,
            refuse_missing_inputs,
            refuse_sources_out_of_reach,
            refuse_unequal_parallel_files,
            show_plan,
        )

        planned = plan(args.grid, Path(args.results), args.only, args.smoke)
        refuse_missing_inputs(planned, args.grid)
        refuse_files_in_the_way(planned, args.grid)
        refuse_unequal_parallel_files(planned, args.grid)
        refuse_sources_out_of_reach(planned, args.grid)
        show_plan(planned)
        if cluster is None:
            for note in gpu_notes(planned):
                print(f"atnat: {note}", file=sys.stderr)
        return 0
    from atnat.experiments.running.scheduler import run_grid  # lazy: start-up

    done = run_grid(args.grid, results_root=Path(args.results), only=args.only,
                    smoke=args.smoke, workers=args.workers, devices=devices, cluster=cluster, stale=args.stale)
    return 1 if done.failed or done.timing_failed else 2 if done.stale else 0


def cmd_cell(args) -> int:
    """Exit 1 when the cell failed, 75 when another process trains it now."""
    from atnat.experiments.config.devices import helper_rank  # lazy: start-up
    from atnat.experiments.locks import LockHeld  # lazy: start-up
    from atnat.experiments.running.cell import run_named_cell  # lazy: start-up
    from atnat.experiments.running.launchers.local import ELSEWHERE, die_with_parent  # lazy: start-up
    from atnat.experiments.running.stale import note_if_stale  # lazy: start-up

    die_with_parent()  # a worker of `atnat run`: ends with it
    if not helper_rank():
        note_if_stale(args.grid, args.cell, results_root=Path(args.results), smoke=args.smoke)
    try:
        status = run_named_cell(args.grid, args.cell, results_root=Path(args.results), smoke=args.smoke)
    except LockHeld as err:  # another process trains it now: not this one's to record
        print(f"atnat: cell {args.cell} not run here: {err}", file=sys.stderr)
        return ELSEWHERE
    return 1 if status not in ("ok", None) else 0


def cmd_status(args) -> int:
    from atnat.experiments.running.status import print_status  # lazy: start-up

    print_status(args.grid, results_root=Path(args.results), smoke=args.smoke,
                 collected=Path(args.collected) if args.collected else None)
    return 0


def cmd_collect(args) -> int:
    """Exit 1 when a file was refused or a cell's copy left as it was (named; everything else was still
    collected)."""
    from atnat.experiments.running.collect import collect, summary  # lazy: start-up

    done = collect(args.grid, results_root=Path(args.results), dest=Path(args.to), smoke=args.smoke)
    print(summary(done, Path(args.to)))
    return 1 if done.skipped or done.kept_back else 0


def cmd_time(args) -> int:
    """Exit 1 when a finished task and seed could not be timed (named: a cell without checkpoint)."""
    from atnat.experiments.config.devices import gpu_ids  # lazy: start-up (torch)
    from atnat.experiments.running.timing_phase import time_finished_groups  # lazy: start-up

    ready, waiting = time_finished_groups(args.grid, results_root=Path(args.results), smoke=args.smoke,
                                          devices=gpu_ids(args.devices),
                                          partial=args.partial, anew=args.anew, only=args.only)
    if ready:
        print("timed (or kept, unchanged): " + ", ".join(
            f"{task} seed {seed}" + (f" (its finished cells; not finished: {', '.join(left)})" if left else "")
            for (task, seed), left in ready.items()))
    for (task, seed), why in waiting.items():
        print(f"{'not timed' if why.startswith('no checkpoint') else 'waiting'}: {task} seed {seed} ({why})")
    return 1 if any(why.startswith("no checkpoint") for why in waiting.values()) else 0


def cmd_report(args) -> int | None:
    if args.interim and args.restat:
        raise AtnatError("atnat report: --interim and --restat exclude each other")
    if args.collected and args.restat:
        raise AtnatError("atnat report: --collected and --restat exclude each other")
    if args.collected and not args.interim:
        from atnat.experiments.running.scheduler import write_collected  # lazy: start-up

        folder = write_collected(args.results_dir, results_root=Path(args.results), smoke=args.smoke,
                                 collected=Path(args.collected), figures=not args.no_figures)
        print(f"wrote the report {folder / 'report.md'} and report.html from the cells collected in {args.collected}")
        return
    if args.restat:
        from atnat.experiments.running.scheduler import write_restat  # lazy: start-up

        folder, damaged = write_restat(args.results_dir, results_root=Path(args.results), smoke=args.smoke,
                                       figures=not args.no_figures)
        print(f"recomputed the tables and wrote {folder / 'report.md'} and report.html")
        return name_damaged(damaged)
    if args.interim:
        from atnat.experiments.running.scheduler import write_interim  # lazy: start-up

        folder, damaged = write_interim(args.results_dir, results_root=Path(args.results), smoke=args.smoke,
                                        collected=Path(args.collected) if args.collected else None,
                                        figures=not args.no_figures)
        print(f"wrote the interim report {folder / 'report.md'} and report.html")
        return name_damaged(damaged)
    from atnat.experiments.reporting.report import write_report  # lazy: start-up

    refuse_a_grid_file(Path(args.results_dir))
    md, html = write_report(Path(args.results_dir), figures=not args.no_figures)
    print(f"wrote {md} and {html}")


def name_damaged(damaged: list[str]) -> int:
    """Each damaged results record named on stderr; 1 where there is one (the report was written all the same)."""
    for problem in damaged:
        print(f"atnat: {problem}; the tables show the cell as failed (`atnat run` evaluates it again)", file=sys.stderr)
    return 1 if damaged else 0


def refuse_a_grid_file(path: Path) -> None:
    """`atnat report GRID.yaml`: a report is made from the results folder a run wrote; say which, and how to
    report a grid that has not finished."""
    if not path.is_file():
        return
    import yaml

    try:
        name = yaml.safe_load(path.read_text(encoding="utf-8")).get("name")
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
        name = None
    folder = f"results/{name}" if isinstance(name, str) else "results/<grid name>"
    raise AtnatError(f"{path} is a grid file; `atnat report` takes the results folder its run wrote ({folder}, or "
                     f"DIR/{name or '<grid name>'} for `atnat run --results DIR`): `atnat report {folder}`; for a grid "
                     f"still running: `atnat report --interim {path} --results DIR`")


def cmd_bench(args) -> None:
    from atnat.experiments.bench.cli import run  # lazy: start-up

    run(args)


def cmd_data_prepare(args) -> None:
    from atnat.experiments.running.data_prepare import prepare_configs  # lazy: start-up

    rows = prepare_configs(Path(args.config), threads=args.threads, log=lambda line: print(line, file=sys.stderr))
    print(f"{len(rows)} splits prepared ({sum(r['pairs'] for r in rows):,} pairs); runs of {args.config} map them")


def cmd_data_wmt14(args) -> None:
    from atnat.experiments.data.wmt14 import download_wmt14  # lazy: start-up

    files = download_wmt14(args.out_dir, base_url=args.base_url, sums_file=args.sha256,
                           log=lambda line: print(line, file=sys.stderr))
    print(f"{len(files)} WMT14 en-de files in {args.out_dir} (experiments/grids/wmt14-en-de.yaml reads them)")


def cmd_data(args) -> None:
    from atnat.experiments.data.multi30k import download_multi30k  # lazy: start-up

    langs = tuple(x.strip() for x in args.langs.split(",") if x.strip())
    files = download_multi30k(args.out_dir, base_url=args.base_url, langs=langs,
                              log=lambda line: print(line, file=sys.stderr))
    print(f"{len(files)} Multi30k files in {args.out_dir} (point a grid's task.data_dir there)")


def cmd_list(args) -> None:
    if args.markdown:
        from atnat.experiments.cli.reference import reference_markdown  # lazy: start-up

        sys.stdout.write(reference_markdown())
        return
    from atnat.experiments.cli.catalog import print_catalog  # lazy: start-up

    print_catalog()


def add_strategy_args(p, default: str = "the model's own (greedy for an AT, parallel for a NAT, ctc, dag-lookahead)"
                      ) -> None:
    p.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto",
                   help="where to decode (auto: the GPU when one is visible)")
    p.add_argument("--strategy", default=None, help=f"registered strategy name (see `atnat list`); default: {default}")
    p.add_argument("--beam", type=int, help="beam size (beam, ctc) or length beam (NAT strategies)")
    p.add_argument("--iterations", type=int, help="mask-predict iterations")
    p.add_argument("--option", action="append", metavar="NAME=VALUE", help="any other strategy option")


def add_engine_arg(p) -> None:
    from atnat.core.engine_names import DEFAULT_ENGINE, ENGINES, OPTIONS  # lazy: start-up

    p.add_argument("--engine", default=None, metavar="NAME[+OPTION...]",
                   help=f"how the model decodes (default {DEFAULT_ENGINE}; eager is the reference): "
                        f"{', '.join(ENGINES)}; options {', '.join('+' + o for o in OPTIONS)} (+bf16 may change "
                        "outputs; see experiments/modelfiles/README.md)")


def add_results_args(p, results_help: str, smoke_help: str) -> None:
    """--results DIR and --smoke: where a grid's results are (every command that takes a grid)."""
    p.add_argument("--results", default="results", metavar="DIR", help=results_help)
    p.add_argument("--smoke", action="store_true", help=smoke_help)


def parser() -> argparse.ArgumentParser:
    from atnat.models.decoders.autoregressive import COMPILE_MODES  # lazy: start-up

    ap = argparse.ArgumentParser(prog="atnat", description=USER_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--plugins", action="append", metavar="MODULE[,MODULE]",
                        help="import these modules first (they register decoders, strategies, metrics or tasks); "
                             "installed plugins with entry points need no mention")
    p = sub.add_parser("train", parents=[common], help="train and evaluate one run from a YAML config")
    p.add_argument("config", help="a run config (YAML): task, decoder, model, optim, train, eval")
    p.add_argument("--output-dir", help="the run folder (default: the config's output_dir, else runs/<its name>): "
                                        "checkpoints, logs, results")
    p.add_argument("--set", action="append", metavar="KEY.PATH=VALUE", help="override a config value")
    p.add_argument("--allow-settings-change", action="store_true",
                   help="resume a run under other settings than it was trained with (recorded, with the step, "
                        "in settings_changes.json); without it such a resume is refused")
    p.set_defaults(fn=cmd_train)
    p = sub.add_parser("translate", parents=[common], help="translate stdin to stdout with a trained checkpoint")
    p.add_argument("--checkpoint", required=True, help="run directory, checkpoint file or export directory")
    p.add_argument("--teacher", help="AT teacher checkpoint: re-ranks npd's candidates, verifies speculative's drafts")
    p.add_argument("--batch-size", type=positive_int, default=64, help="sentences decoded at once (default 64)")
    p.add_argument("--long-lines", choices=["error", "truncate"], default="error",
                   help="a line longer than the model's limit: error (empty output line, a message, exit 1) "
                        "or truncate (cut to the limit, with a warning)")
    p.add_argument("--compile", choices=COMPILE_MODES,
                   help="AT only: fixed-shape step under torch.compile (pays at small batches; see results/bench); "
                        "the engine is then eager (no other --engine with it)")
    p.add_argument("--quantize", choices=["none", "int8"], default="none",
                   help="int8: dynamic int8 linear layers (on the CPU, also where a GPU is visible; see modelfiles/quantize.py)")
    add_engine_arg(p)
    add_strategy_args(p)
    p.set_defaults(fn=cmd_translate)
    p = sub.add_parser("export", parents=[common], help="write a trained model as portable files (safetensors or CTranslate2)")
    p.add_argument("run", help="run directory, checkpoint file or export directory")
    p.add_argument("out_dir", help="directory to write (new, empty, or a previous export)")
    p.add_argument("--format", choices=["safetensors", "ctranslate2"], default="safetensors",
                   help="safetensors: model.safetensors + config.json + tokenizer (atnat loads it); "
                        "ctranslate2: a CTranslate2 model directory (AT decoders only)")
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser("distill", parents=[common], help="write sequence-level distilled targets with an AT teacher")
    p.add_argument("--teacher", required=True, help="teacher run directory, checkpoint file or export directory")
    p.add_argument("--input", help="source file (default: the teacher run's training sources)")
    p.add_argument("--output", required=True, help="file to write the distilled targets to, one line per source")
    add_strategy_args(p, default="beam (size 5, as the grids distil)")
    p.set_defaults(fn=cmd_distill)
    p = sub.add_parser("evaluate", parents=[common], help="score a trained model on any source/reference files (BLEU, chrF, "
                                        "tokenised BLEU, speed)")
    p.add_argument("--checkpoint", required=True, help="checkpoint file, run directory or export directory")
    p.add_argument("--src", required=True, help="source file, one sentence per line")
    p.add_argument("--ref", required=True, action="append", help="reference file (repeat for several references)")
    p.add_argument("--teacher", help="AT teacher checkpoint: re-ranks npd's candidates, verifies speculative's drafts")
    p.add_argument("--also", action="append", metavar="NAME[:OPT=V,...]", help="another strategy to score, e.g. beam:beam_size=5")
    p.add_argument("--lang", help="target language of the tokenised BLEU (default: the run's)")
    p.add_argument("--compound-split", action="store_true", help="tokenised BLEU splits hyphenated compounds (##AT##)")
    p.add_argument("--n-bootstrap", type=positive_int, default=1000, help="resamples of the BLEU confidence interval")
    p.add_argument("--no-speed", action="store_true", help="skip the timing")
    p.add_argument("--latency-sentences", type=positive_int, default=100, help="sentences timed one at a time")
    p.add_argument("--repeats", type=positive_int, default=3, help="timed repeats of every call")
    p.add_argument("--threads", type=int, default=1, help="CPU threads for decoding and timing (default 1, as a "
                                                         "grid's timing phase; recorded in the JSON)")
    p.add_argument("--hyps", help="write the first strategy's translations here")
    p.add_argument("--json", help="write the scores here as JSON")
    p.add_argument("--quantize", choices=["none", "int8"], default="none",
                   help="int8: dynamic int8 linear layers (on the CPU, also where a GPU is visible; see modelfiles/quantize.py)")
    add_engine_arg(p)
    add_strategy_args(p)
    p.set_defaults(fn=cmd_evaluate)
    p = sub.add_parser("run", parents=[common], help="run an experiment grid and write results/<grid>/")
    p.add_argument("grid", help="a grid file, e.g. experiments/grids/quickstart.yaml")
    add_results_args(p, "results go to DIR/<grid name>/ (default: results/)",
                     "tiny sizes: check a grid end to end in minutes")
    p.add_argument("--dry-run", action="store_true", help="list the cells and exit")
    p.add_argument("--only", action="append", metavar="CELL",
                   help="run only this cell: an exact name or a glob, e.g. '*-at-s1' (repeatable)")
    p.add_argument("--stale", choices=["rerun", "keep"],
                   help="cells run with other settings than the grid gives now: rerun (train again, or only "
                        "evaluate again when just eval, a task's test-split options or an unused distill.strategy "
                        "changed; old folders kept) or keep (numbers kept, the report names them); without it such "
                        "cells stop the run before anything starts")
    p.add_argument("--workers", type=int, help="cells run at once, one process each (GPUs 0..N-1 when present)")
    p.add_argument("--devices", help="comma-separated GPU ids: one worker process per GPU, e.g. 0,1,2,3")
    from atnat.experiments.running.launchers.cluster_settings import add_cluster_args

    add_cluster_args(p)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("cell", parents=[common], help="run one cell of a grid (what `run --workers` starts in each process)")
    p.add_argument("grid", help="a grid file, e.g. experiments/grids/quickstart.yaml")
    p.add_argument("cell", help="cell name (see `atnat run GRID --dry-run`)")
    add_results_args(p, "results go to DIR/<grid name>/ (default: results/)",
                     "the grid's smoke sizes")
    p.set_defaults(fn=cmd_cell)
    p = sub.add_parser("status", parents=[common], help="each cell's state (done, failed, queued, running), job id and last step")
    p.add_argument("grid", help="a grid file, e.g. experiments/grids/quickstart.yaml")
    add_results_args(p, "results are read from DIR/<grid name>/ (default: results/)",
                     "the grid's smoke run (DIR/<grid name>-smoke/)")
    p.add_argument("--collected", metavar="DEST", help="also the finished copies `atnat collect --to DEST` made: a cell "
                                                       "with no run here but a copy there counts as done (collected)")
    p.set_defaults(fn=cmd_status)
    p = sub.add_parser("collect", parents=[common], help="copy the finished cells' results (no checkpoints, no data) "
                                                          "to a folder, e.g. the repository, while the grid runs")
    p.add_argument("grid", help="a grid file, e.g. experiments/grids/quickstart.yaml")
    p.add_argument("--to", required=True, metavar="DEST", help="each finished cell's results go to DEST/<cell>/")
    add_results_args(p, "results are read from DIR/<grid name>/ (default: results/)",
                     "the grid's smoke run (DIR/<grid name>-smoke/)")
    p.set_defaults(fn=cmd_collect)
    p = sub.add_parser("time", parents=[common], help="time now each task and seed of a grid whose cells have all "
                                                       "finished, while the rest still trains (pause it first)")
    p.add_argument("grid", help="a grid file, e.g. experiments/grids/quickstart.yaml")
    add_results_args(p, "the grid's --results folder (timing.csv goes to DIR/<grid name>/)",
                     "the grid's smoke run (DIR/<grid name>-smoke/)")
    p.add_argument("--devices", metavar="IDS", help="GPU ids; the first times (as in atnat run)")
    p.add_argument("--anew", action="store_true",
                   help="time each task and seed chosen again as a whole, in one session, even where its cells were "
                        "timed before with the same weights (the last timing of a grid timed cell by cell: ratios of "
                        "different sessions are not side by side)")
    p.add_argument("--partial", action="store_true",
                   help="also time the finished cells of a task and seed whose baseline has finished while its "
                        "other cells still train (cells that finish later are timed beside the baseline, timed again with "
                        "them; cells timed before keep their rows)")
    p.add_argument("--only", action="append", metavar="CELL",
                   help="time only the task-and-seed groups of these cells (an exact name or a glob, e.g. "
                        "'en-de-*-s2'; repeatable): each group whole, with its baseline and A/A control; "
                        "the other groups are left as they are")
    p.set_defaults(fn=cmd_time)
    p = sub.add_parser("report", parents=[common], help="regenerate report.md/report.html from a results folder; "
                                                         "--interim GRID: a report of a grid still running")
    p.add_argument("results_dir", metavar="RESULTS_DIR | GRID",
                   help="a results folder; with --interim, the grid file")
    p.add_argument("--interim", action="store_true",
                   help="tabulate the finished cells of the grid GRID (results under --results) into "
                        "<results>/<grid>/interim/ with their report (speed of the seeds timed so far by atnat time), "
                        "the runner's folder untouched")
    p.add_argument("--collected", metavar="DEST",
                   help="report the grid GRID from the cells collected in DEST (`atnat collect --to DEST`) instead of "
                        "the run folders, e.g. after the machine that trained them is gone; the test references "
                        "are read from the data set again. With --interim: the cells there so far; without: the "
                        "grid's own report in <results>/<grid>/, which needs every cell collected")
    p.add_argument("--restat", action="store_true",
                   help="recompute the tables of the grid GRID's results folder (results.csv, comparisons.csv, "
                        "ranking.csv) from its run folders with this version's statistics, then its report; "
                        "nothing is trained, decoded or timed again, environment.json keeps the run's record")
    p.add_argument("--no-figures", action="store_true",
                   help="the tables and notes only, no PNG figure (drawing them takes most of a report's time); earlier "
                        "figures in the folder are removed. A grid's `report: {figures: false}` does the same for the "
                        "report its run writes")
    add_results_args(p, "with --interim, --restat or --collected: the grid's --results folder",
                     "with --interim, --restat or --collected: the grid's --smoke run")
    p.set_defaults(fn=cmd_report)
    p = sub.add_parser("bench", parents=[common],
                       help="speed benchmarks: decode, train, profile, count, data (see `atnat bench -h`)",
                       description="Decoding and training speed of our AT and NAT models on random weights, "
                                   "beside Hugging Face and CTranslate2 peers (results/bench/README.md).")
    from atnat.experiments.bench.cli import add_commands  # lazy: start-up

    add_commands(p)
    p.set_defaults(fn=cmd_bench)
    p = sub.add_parser("data", parents=[common],
                       help="fetch a public data set (multi30k, wmt14-en-de), or prepare a config's splits")
    data = p.add_subparsers(dest="dataset", required=True)
    d = data.add_parser("prepare", help="encode every split of a run config's or a grid's tasks once into the cache "
                                        "of memory-mapped splits ($ATNAT_CACHE/prepared), which every run then maps")
    d.add_argument("config", metavar="CONFIG", help="a run config or a grid file")
    d.add_argument("--threads", type=int, help="encoding threads (default: every core)")
    d.add_argument("--plugins", action="append", dest="plugins_after", metavar="MODULE[,MODULE]",
                   help="import these modules first (their tasks); the same as `atnat data --plugins M prepare`")
    d.set_defaults(fn=cmd_data_prepare)
    d = data.add_parser("wmt14-en-de", help="WMT14 English-German (4.5 M training pairs, newstest2013/2014) from the "
                                            "Stanford NLP release, resumable, each file checked by its sha256")
    d.add_argument("out_dir", metavar="DIR", help="folder to write the files to (whole files there are checked and kept)")
    d.add_argument("--base-url", help="where the files are (default: $ATNAT_WMT14_URL, else the release)")
    d.add_argument("--sha256", metavar="FILE", help="sha256sum-style sums to check the files against, one for each "
                                                    "of the six files (default: DIR/SHA256SUMS, recorded by the first "
                                                    "whole download)")
    d.set_defaults(fn=cmd_data_wmt14)
    d = data.add_parser("multi30k", help="Multi30k (WMT16-17 multimodal task 1) from github.com/multi30k/dataset: "
                                         "{train,val,test2016,test2017}.{en,de,fr}, each checked by its sha256")
    d.add_argument("out_dir", metavar="DIR", help="folder to write the files to (files there that check are kept)")
    d.add_argument("--base-url", help="where the release's .gz files are (default: $ATNAT_MULTI30K_URL, else the "
                                      "repository at the pinned commit)")
    d.add_argument("--langs", default="en,de,fr", help="comma-separated languages (default: en,de,fr)")
    d.set_defaults(fn=cmd_data)
    p = sub.add_parser("list", parents=[common],
                       help="registered decoders, strategies, tasks, metrics and engines, with their options")
    p.add_argument("--markdown", action="store_true", help="the whole configuration reference as markdown (every "
                                                          "grid and run config key, the built-in options, the engines)")
    p.set_defaults(fn=cmd_list)
    return ap


def check_results_root(args) -> None:
    """`--results DIR` must be a folder (or not exist yet)."""
    root = Path(getattr(args, "results", "") or ".")
    if root.exists() and not root.is_dir():
        raise AtnatError(f"--results {root}: this is a file; give a folder (results go to DIR/<grid name>/)")


def in_the_cache(filename) -> str:
    """Where a path the OS refused lies in atnat's cache: what the cache must be, and where it is set."""
    from atnat.experiments.data.tokenize import CACHE_DIR  # lazy: start-up

    if not isinstance(filename, str) or not Path(os.path.abspath(filename)).is_relative_to(CACHE_DIR):
        return ""
    return (f" (the cache folder ($ATNAT_CACHE, else ~/.cache/atnat; here {CACHE_DIR}) must be a folder this process "
            "can write)")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import atnat.decoding  # noqa: F401  (register built-ins)
    import atnat.models.decoders  # noqa: F401
    try:
        from atnat.experiments.config.plugins import load_env_plugins, load_plugins  # lazy: start-up

        load_env_plugins()  # a worker of `atnat run`: what its parent named
        load_plugins([*(getattr(args, "plugins", None) or []), *(getattr(args, "plugins_after", None) or [])] or None)
        check_results_root(args)
        code = args.fn(args) or 0
        sys.stdout.flush()  # a closed pipe shows here, not at exit
    except BrokenPipeError:  # `atnat list | head -1`: the reader stopped; exit as a SIGPIPE'd filter does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit-time flush goes nowhere
        return 141
    except UnwritableError as err:  # disk full, read-only folder: not a usage error; finished work is kept
        print(f"atnat: error: {err}", file=sys.stderr)
        return 1
    except AtnatError as err:
        print(f"atnat: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a file the OS refused outside atnat's own writers: one line naming it
        where = f"{err.filename}: " if err.filename else ""
        print(f"atnat: error: {where}{err.strerror or err}{in_the_cache(err.filename)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("atnat: interrupted; finished work is kept (run the same command to resume)", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
