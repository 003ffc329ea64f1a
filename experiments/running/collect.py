"""`atnat collect GRID --to DEST`: copy each finished cell's results, and nothing else, out of the
grid's run folders while the grid still runs.

A grid that trains for days keeps everything in its results folder; a machine lost on the way
takes the finished cells with it. Collecting after each cell finishes (e.g. into the repository,
to be committed) keeps what they measured: metrics.json (every score and interval, every test
split, and the code that evaluated it), config.json, train.json, attempts.json (the code of each
training attempt), distill.json, the hypotheses, the curves and the training log, and the cell's rows
of the grid's timing.csv once its seed has been timed (`atnat time`; with timing.json, its settings).
Left behind on purpose: checkpoints and distilled targets (large; the weights are the run's, not
its results), the copies of the test references and the sample table (the data set's own text,
which stays where the data set lives), locks and progress files. DEST/<cell>/ mirrors
runs/<cell>/ for the files kept.

Only regular files under an allow-list of names are copied: a symlink or any other file planted in
a run folder is skipped and named, so that collecting into a repository never pulls in a file from
elsewhere on the machine. A cell whose files changed since the last collect (evaluated again) is
updated, files it no longer has are removed from its copy; cells not finished are not touched.

Each copy also gets weights.json: the identity (sha256) of the weights the cell was evaluated with.
A student records its teacher's (distill.json, train.json initialised_from), so that a teacher
trained again with other weights (on another machine: bf16 kernels differ between CPU models) is
never filed beside students of its earlier weights: collect then leaves that teacher's copy as it
is and says why, and a report from the copies refuses a student whose teacher's copy is not the one
it learnt from.

Each copy's last file is collected.json, the sha256 of every file of the copy: a report from the copies
refuses one that changed since (a file edited, lost or added) or lacks metrics.json, config.json or
train.json, and names those collected before collect wrote it, whose files it cannot check.

The copies are enough for a report after the machine that trained them is gone: `stage_collected`
lays them out as run folders again, with the test references read from the data set where it lives and
the sample table made again from them (`atnat report --interim GRID --collected DEST`).
"""
from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from atnat.core.errors import AtnatError
from atnat.experiments.config.run import extra_test_split, load_task
from atnat.experiments.evaluation.columns import read_timing
from atnat.experiments.evaluation.evaluate import sample_rows
from atnat.experiments.evaluation.references import write_references
from atnat.experiments.files import (
    atomic_write_bytes,
    path_part,
    read_utf8,
    sha256,
    write_csv,
    write_json_atomic,
    write_text_atomic,
)
from atnat.experiments.modelfiles.checkpoints import CheckpointDamaged
from atnat.experiments.modelfiles.loading import checkpoint_stamp, checkpoint_stamps, evaluation_checkpoint
from atnat.experiments.reporting.records import MAX_BYTES, cell_status, teacher_stamps
from atnat.experiments.running.grid import load_grid_into

# what a finished cell's results are, relative to its run folder
KEPT = ("metrics.json", "config.json", "train.json", "attempts.json", "distill.json", "hyps/*.txt", "curves/*.csv",
        "logs/metrics.csv", "logs/hparams.yaml", "exported/*.json")  # exported/: the CTranslate2 twin's scores
TIMING_CSV, TIMING_JSON = "timing.csv", "timing.json"  # the grid's timing (evaluation/timing.py), per cell in DEST
WEIGHTS_JSON = "weights.json"  # written by collect into DEST/<cell>/: {"checkpoint": the evaluated weights' stamp}


@dataclass
class Collected:
    copied: dict[str, int] = field(default_factory=dict)  # cell -> files written (new or changed)
    unchanged: list[str] = field(default_factory=list)  # finished cells whose copy was already current
    removed: dict[str, int] = field(default_factory=dict)  # cell -> files dropped from its copy
    skipped: list[str] = field(default_factory=list)  # files refused, with the reason
    not_finished: list[str] = field(default_factory=list)  # cells with no "ok" result (yet)
    kept_back: list[str] = field(default_factory=list)  # cells whose copy was left as it was, with the reason
    untimed: list[str] = field(default_factory=list)  # collected cells the grid times whose copy holds no timing


UNDER_WAY = ".collecting"  # in a cell's copy while collect writes it: a copy cut short is never read as whole
MANIFEST = "collected.json"  # in a cell's copy, written last: {"files": {path: sha256}} of every file of the copy
UNVERIFIED = "unverified"  # verify_copy of a copy from before manifests: its files are read unchecked
REQUIRED = ("metrics.json", "config.json", "train.json")  # a finished cell's copy without one is no whole copy


def copy_files(target: Path) -> dict[str, Path]:
    """Every file of a cell's copy by relative path, but its manifest and the collect-under-way mark."""
    return {p.relative_to(target).as_posix(): p for p in sorted(target.rglob("*"))
            if (p.is_file() or p.is_symlink()) and p.name not in (MANIFEST, UNDER_WAY)}


def write_manifest(target: Path) -> None:
    content = (json.dumps({"files": {rel: sha256(path) for rel, path in copy_files(target).items()}}, indent=1,
                          sort_keys=True) + "\n").encode()
    manifest = target / MANIFEST
    if not (manifest.is_file() and not manifest.is_symlink() and manifest.read_bytes() == content):
        atomic_write_bytes(manifest, content)


def verify_copy(copy: Path) -> str | None:
    """Why a cell's copy is not what collect wrote (a file changed, missing or added since; a required file
    absent), or None; UNVERIFIED for a copy from before manifests, which has none."""
    missing = [name for name in REQUIRED if not (copy / name).is_file()]
    if missing:
        return f"it lacks {', '.join(missing)}"
    manifest = copy / MANIFEST
    if not manifest.is_file():
        return UNVERIFIED
    try:
        listed = json.loads(read_utf8(manifest, str(manifest)))["files"]
        if not isinstance(listed, dict) or not all(isinstance(v, str) for v in listed.values()):
            raise TypeError("files is no mapping of paths to sha256")
    except (ValueError, KeyError, TypeError, AtnatError) as err:
        return f"its {MANIFEST} is unreadable ({err})"
    present = copy_files(copy)
    changed = sorted(rel for rel, path in present.items() if rel in listed and (path.is_symlink()
                                                                             or sha256(path) != listed[rel]))
    added, gone = sorted(set(present) - set(listed)), sorted(set(listed) - set(present))
    problems = [f"{what}: {', '.join(rels[:3])}{' ...' if len(rels) > 3 else ''}"
                for what, rels in (("changed since it was collected", changed), ("added", added), ("missing", gone))
                if rels]
    return "; ".join(problems) or None


def kept(rel: str) -> bool:
    return any(fnmatch.fnmatchcase(rel, pattern) and rel.count("/") == pattern.count("/") for pattern in KEPT)


def result_files(run_dir: Path, skipped: list[str]) -> dict[str, Path]:
    """The run folder's result files by relative path; anything refused is added to `skipped`."""
    files: dict[str, Path] = {}
    home = run_dir.resolve()
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if not kept(rel):
            continue
        if path.is_symlink() or not path.is_file() or not path.resolve().is_relative_to(home):
            skipped.append(f"{path}: not a regular file inside the run folder (a link, or under one); not copied")
        elif path.stat().st_size > MAX_BYTES:
            skipped.append(f"{path}: {path.stat().st_size} bytes, over the {MAX_BYTES}-byte limit of a results file; "
                           "not copied")
        else:
            files[rel] = path
    return files


def collect(grid_path, *, results_root: Path, dest: Path, smoke: bool = False) -> Collected:
    grid, out = load_grid_into(grid_path, results_root, smoke)
    if not (out / "runs").is_dir():
        raise AtnatError(f"atnat collect: {out / 'runs'} does not exist: no cell of {grid_path} has run under "
                         f"--results {results_root}")
    if dest.exists() and not dest.is_dir():
        raise AtnatError(f"atnat collect: --to {dest} is a file; give a folder")
    if dest.resolve().is_relative_to(out.resolve()):  # its copies would land in run folders, or be tabulated as runs
        raise AtnatError(f"atnat collect: --to {dest} is inside the results folder {out}; give a folder outside it")
    done = Collected()
    timing = read_grid_timing(out, done.skipped)  # once for every cell
    never_timed = {c.name for c in grid.never_timed()}
    learnt = students_learnt_from(grid, dest)
    teachers = {c.teacher for c in grid.cells if c.teacher}
    filed: dict[str, set[str]] = {}  # teacher -> the weights its copy in dest names after this pass
    for cell in sorted(grid.cells, key=lambda c: c.name not in teachers):  # teachers first: students follow them
        run_dir = Path(cell.config.output_dir)
        target = dest / cell.name
        if cell_status(run_dir) != "ok":
            done.not_finished.append(cell.name)
            filed[cell.name] = recorded_weights(target)
            continue
        try:
            stamps = checkpoint_stamps(run_dir) if evaluation_checkpoint(run_dir).is_file() else set()
            stamp = checkpoint_stamp(run_dir) if stamps else None
        except CheckpointDamaged as err:  # this cell's weights cannot be named: the others are still collected
            done.kept_back.append(f"{cell.name}: {err}; its copy in {dest} is left as it was")
            filed[cell.name] = recorded_weights(target)  # its students are held to the weights filed there
            continue
        others = sorted(student for student, recorded in learnt.get(cell.name, {}).items() if not stamps & recorded)
        if stamps and others:
            done.kept_back.append(
                f"{cell.name}: its weights are now {stamp}, but the collected {', '.join(others)} learnt from "
                f"other weights of it ({', '.join(sorted(set().union(*(learnt[cell.name][o] for o in others))))}; "
                f"trained again, e.g. on another CPU): its copy in {dest} is left as it was. Collect into another "
                f"folder, or remove those students' copies first to file the new weights")
            filed[cell.name] = recorded_weights(target)
            continue
        if cell.teacher:
            present = filed.get(cell.teacher, set())
            recorded = teacher_stamps(run_dir)
            if present and recorded and not present & recorded:
                done.kept_back.append(
                    f"{cell.name}: it learnt from {', '.join(sorted(recorded))}, not from the weights of "
                    f"{cell.teacher} filed in {dest} ({', '.join(sorted(present))}; its teacher was trained again, "
                    "or its copy was kept back): not collected")
                continue
        filed[cell.name] = stamps or recorded_weights(target)
        files = result_files(run_dir, done.skipped)
        written = 0
        no_link_on_the_way(dest, target / UNDER_WAY)
        target.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target / UNDER_WAY, b"a collect of this cell began and has not ended\n")
        for rel, src in files.items():
            data = src.read_bytes()
            copy = target / rel
            if copy.is_file() and not copy.is_symlink() and copy.read_bytes() == data:
                continue
            no_link_on_the_way(target, copy)
            copy.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(copy, data)
            written += 1
        timing_written, timing_removed = collect_timing(timing, cell, target) if timing is not None else (0, 0)
        written += timing_written
        if cell.name not in never_timed and not (target / TIMING_CSV).is_file():
            done.untimed.append(cell.name)
        copy = target / WEIGHTS_JSON
        if stamp is not None:
            content = (json.dumps({"checkpoint": stamp}, indent=2) + "\n").encode()
            if not (copy.is_file() and not copy.is_symlink() and copy.read_bytes() == content):
                target.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(copy, content)
                written += 1
        elif written - timing_written and (copy.is_file() or copy.is_symlink()):
            copy.unlink()  # weights gone and results changed: the recorded identity may be another model's
            filed[cell.name] = set()
            written += 1
        gone = [p for p in sorted(target.rglob("*")) if p.is_file() and kept(p.relative_to(target).as_posix())
                and p.relative_to(target).as_posix() not in files] if target.is_dir() else []
        for path in gone:
            path.unlink()
        if gone or timing_removed:
            done.removed[cell.name] = len(gone) + timing_removed
        write_manifest(target)
        (target / UNDER_WAY).unlink()  # the copy is whole again
        if written:
            done.copied[cell.name] = written
        elif not gone and not timing_removed:
            done.unchanged.append(cell.name)
    return done


def recorded_weights(copy: Path) -> set[str]:
    """The weights a collected copy names (weights.json; empty when it has none or an unreadable one)."""
    record = copy / WEIGHTS_JSON
    if record.is_symlink() or not record.is_file():
        return set()
    try:
        stamp = json.loads(record.read_text(encoding="utf-8")).get("checkpoint")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return set()
    return {stamp} if isinstance(stamp, str) and stamp else set()


def students_learnt_from(grid, dest: Path) -> dict[str, dict[str, set[str]]]:
    """{teacher cell: {student collected in dest: the teacher weights it records}}"""
    learnt: dict[str, dict[str, set[str]]] = {}
    for cell in grid.cells:
        copy = dest / cell.name
        if cell.teacher and not copy.is_symlink() and (copy / "metrics.json").is_file():
            stamps = teacher_stamps(copy)
            if stamps:
                learnt.setdefault(cell.teacher, {})[cell.name] = stamps
    return learnt


def check_lineage(grid, source: Path, staged: list[str]) -> None:
    """A collected student beside a collected teacher whose weights (weights.json) are not the ones it
    learnt from is refused: their comparison would pair a student with another model than its teacher.
    Copies made before weights.json existed are not checked."""
    problems = []
    for teacher, students in students_learnt_from(grid, source).items():
        present = recorded_weights(source / teacher)
        if teacher not in staged or not present:
            continue
        problems += [f"{student} learnt from {', '.join(sorted(stamps))}, but {source / teacher / WEIGHTS_JSON} is "
                     f"{', '.join(sorted(present))}"
                     for student, stamps in sorted(students.items()) if student in staged and not stamps & present]
    if problems:
        raise AtnatError(f"--collected {source}: students beside another model than their teacher (trained again "
                         "with other weights, e.g. on another CPU): " + "; ".join(problems))


def read_grid_timing(out: Path, skipped: list[str]) -> tuple[pd.DataFrame | None, bytes] | None:
    """The grid's timing.csv and its settings (timing.json, parsed and serialised anew), read like any
    result: no link, size-capped. -> (table, settings), (None, b"") when there is no readable timing,
    None when a file was refused (named in `skipped`: the copies are then left as they are)."""
    for name in (TIMING_CSV, TIMING_JSON):
        path = out / name
        if path.is_symlink() or (path.exists() and not path.is_file()):
            skipped.append(f"{path}: not a regular file (a link?); the timing was not collected")
            return None
        if path.is_file() and path.stat().st_size > MAX_BYTES:
            skipped.append(f"{path}: over the {MAX_BYTES}-byte limit of a results file; the timing was not collected")
            return None
    try:
        table = read_timing(out / TIMING_CSV)
        settings = json.loads((out / TIMING_JSON).read_text(encoding="utf-8"))
        if not {"cell", "fingerprint"} <= set(table.columns):
            return None, b""
    except (OSError, ValueError, UnicodeDecodeError):
        return None, b""  # no timing yet (or none readable)
    return table, (json.dumps(settings, indent=2, sort_keys=True) + "\n").encode()


def collect_timing(timing: tuple[pd.DataFrame | None, bytes], cell, target: Path) -> tuple[int, int]:
    """The cell's rows of the grid's timing (read_grid_timing: its systems, their CTranslate2 and A/A
    twins) timed on its present weights, with the timing's settings, into target/timing.csv and
    timing.json: a seed timed by `atnat time` keeps its speed when the machine goes. Rows of other
    weights (the cell was trained again since) are not copied, and an earlier copy of other weights is then
    removed; an earlier copy of the present weights stays where the grid's timing has no rows for the cell
    (timing.csv moved away, or another seed timed alone since). -> (files written, files removed)."""
    table, settings = timing
    rows = None
    run_dir = Path(cell.config.output_dir)
    weights = checkpoint_stamp(run_dir) if evaluation_checkpoint(run_dir).is_file() else None
    if table is not None:
        rows = table[table["cell"].astype(str) == cell.name]
        if weights is not None:  # weights gone: their earlier timing is all there is
            rows = rows[rows["fingerprint"].astype(str) == weights]
    if rows is None or rows.empty:
        if _timed_weights(target / TIMING_CSV) in ({weights}, set()) or weights is None:
            return 0, 0  # the copy's timing is of these weights (or none can be told): kept
        removed = 0
        for name in (TIMING_CSV, TIMING_JSON):
            if (target / name).is_file() or (target / name).is_symlink():
                (target / name).unlink()
                removed += 1
        return 0, removed
    written = 0
    for name, content in ((TIMING_CSV, rows.to_csv(index=False).encode()), (TIMING_JSON, settings)):
        copy = target / name
        if not (copy.is_file() and not copy.is_symlink() and copy.read_bytes() == content):
            target.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(copy, content)
            written += 1
    return written, 0


def _timed_weights(path: Path) -> set[str] | None:
    """The weights (fingerprints) a copy's timing.csv was timed on; set() when there is no copy; None when it
    cannot be read (a link, garbled): then it is removed, as one of other weights."""
    if not path.exists() and not path.is_symlink():
        return set()
    try:
        if path.is_symlink() or path.stat().st_size > MAX_BYTES:
            return None
        return set(read_timing(path)["fingerprint"].astype(str))
    except (OSError, ValueError, KeyError, UnicodeDecodeError):
        return None


def summary(done: Collected, dest: Path) -> str:
    lines = []
    if done.copied:
        lines.append(f"collected into {dest}: " + ", ".join(f"{c} ({n} file{'s' * (n != 1)})" for c, n in done.copied.items()))
    if done.removed:
        lines.append("removed from the copies (no longer in the run folder): "
                     + ", ".join(f"{c} ({n})" for c, n in done.removed.items()))
    if done.unchanged:
        lines.append(f"already current: {len(done.unchanged)} cell{'s' * (len(done.unchanged) != 1)}")
    if done.not_finished:
        lines.append(f"not finished (not collected): {', '.join(done.not_finished)}")
    lines.extend(f"not updated: {line}" for line in done.kept_back)
    if done.untimed:
        lines.append(f"without a timing of their present weights (time their seed while the weights are here: atnat "
                     f"time): {', '.join(done.untimed)}")
    if not (done.copied or done.unchanged or done.removed or done.kept_back):
        lines.append("no cell has finished yet: nothing collected")
    lines.extend(f"skipped {line}" for line in done.skipped)
    return "\n".join(lines)


def stage_collected(grid, source: Path, runs: Path, unverified: list[str] | None = None) -> list[str]:
    """Lay the cells collected in `source` (DEST of `collect`) out as the run folders of `grid` under
    `runs`, for the report: the collected files (the same allow-list, read as untrusted: links and
    oversized files refused) and the references that collect leaves with the data set, read from it
    again (the cell's test split and eval.extra_tests), with the sample table made again from them.
    Cells of the grid with no collected metrics.json are left out (the report lists them as not run). Each
    copy is checked against the manifest collect wrote last; one without (collected before manifests) is
    added to `unverified`. -> the cells staged."""
    if not source.is_dir():
        raise AtnatError(f"--collected {source}: no such folder (give the DEST of an earlier `atnat collect`)")
    staged, skipped, tasks = [], [], {}
    for cell in grid.cells:
        copy = source / cell.name
        if copy.is_symlink() or not (copy / "metrics.json").is_file():
            continue
        if (copy / UNDER_WAY).exists():
            skipped.append(f"{copy}: its collect was cut short (old and new files mixed): collect again")
            continue
        problem = verify_copy(copy)
        if problem == UNVERIFIED:
            if unverified is not None:
                unverified.append(cell.name)
        elif problem:
            skipped.append(f"{copy}: not as collected ({problem}): collect again")
            continue
        files = result_files(copy, skipped)
        if "metrics.json" not in files:
            continue
        target = runs / cell.name
        for rel, src in files.items():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(target / rel, src.read_bytes())
        cfg = cell.config
        key = json.dumps(cfg.task, sort_keys=True, default=str)
        if key not in tasks:  # one load per task (a sentencepiece model may be trained and cached once)
            tasks[key] = load_task(cfg)
        write_references(target, tasks[key].references(cfg.eval.split))
        stage_samples(target, cfg, tasks[key], copy)
        for name in cfg.eval.extra_tests:
            write_text_atomic(target / f"references@{name}.txt", "\n".join(extra_test_split(cfg, name)[1]) + "\n")
        staged.append(cell.name)
    if skipped:
        raise AtnatError("--collected " + str(source) + ": refused " + "; ".join(skipped))
    check_lineage(grid, source, staged)
    stage_timing(source, staged, runs.parent)
    return staged


def no_link_on_the_way(root: Path, path: Path) -> None:
    """Refuse to write `path` where a folder between `root` and it is a symbolic link: the copy would land
    wherever the link points, outside the collected folder."""
    for folder in reversed(path.relative_to(root).parents):
        if folder != Path(".") and (root / folder).is_symlink():
            raise AtnatError(f"{root / folder} is a symbolic link: collect writes only inside {root}; replace the "
                             "link by a folder (or remove it) and collect again")


def stage_samples(target: Path, cfg, task, copy: Path) -> None:
    """target/samples.csv again, as the cell wrote it (collect leaves it with the data set's text): for each
    strategy the cell scored (its collected metrics.json), its first hypotheses (its collected hyps/) beside
    the sources and references read from the data set. A scored strategy without its hypotheses file, a
    file that is not UTF-8, or one that does not hold one line per test sentence is refused, named as
    collected (under `copy`)."""
    sources, references = task.splits[cfg.eval.split][0], task.references(cfg.eval.split)[0]
    try:
        scored = [r["strategy"] for r in json.loads(read_utf8(target / "metrics.json", "collected "))["rows"]]
    except (ValueError, KeyError, TypeError) as err:
        raise AtnatError(f"{copy / 'metrics.json'}: not a cell's scores (no rows with a strategy: {err})") from None
    rows = []
    for label in dict.fromkeys(map(str, scored)):
        path_part(label, f"{copy / 'metrics.json'}: a scored strategy's label")  # it names a file of hyps/
        path, shown = target / "hyps" / f"{label}.txt", copy / "hyps" / f"{label}.txt"
        if not path.is_file():
            raise AtnatError(f"{shown}: missing; {copy / 'metrics.json'} scored the strategy {label!r}")
        # exactly as evaluate wrote it ("\n".join + "\n"; a CRLF checkout's line ends read as "\n")
        hyps = read_utf8(path, "collected hypotheses ").replace("\r\n", "\n").split("\n")
        if hyps[-1] == "":
            hyps.pop()
        if len(hyps) != len(sources):
            raise AtnatError(f"{shown}: {len(hyps)} hypotheses for the {len(sources)} sentences of {cfg.eval.split} "
                             "(cut short, or another cell's)")
        rows += sample_rows(label, sources, references, hyps)
    if rows:
        write_csv(pd.DataFrame(rows), target / "samples.csv")


def stage_timing(source: Path, cells: list[str], out: Path) -> None:
    """The staged cells' collected timing rows, joined into out/timing.csv with their common settings
    (out/timing.json); rows timed under other speed settings or devices than the others are refused."""
    frames, settings = [], {}
    for cell in cells:
        rows, record = source / cell / TIMING_CSV, source / cell / TIMING_JSON
        if rows.is_symlink() or record.is_symlink() or (rows.exists() and not rows.is_file()):
            raise AtnatError(f"{rows} or {record}: a link or not a regular file; refused")
        if not rows.is_file() and not record.is_file():
            continue
        if not (rows.is_file() and record.is_file()):
            raise AtnatError(f"{source / cell}: {TIMING_CSV} and {TIMING_JSON} go together; one of them is missing")
        if rows.stat().st_size > MAX_BYTES or record.stat().st_size > MAX_BYTES:
            raise AtnatError(f"{rows}: over the {MAX_BYTES}-byte limit of a results file")
        try:
            table, recorded = read_timing(rows), json.loads(record.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise AtnatError(f"{rows} or {record}: not a timing table and its settings ({err})") from err
        missing = {"cell", "strategy", "fingerprint"} - set(table.columns)
        if missing or not isinstance(recorded, dict):
            raise AtnatError(f"{rows}: not a timing table (no {', '.join(sorted(missing)) or 'settings record'})")
        if set(table["cell"].astype(str)) != {cell}:
            raise AtnatError(f"{rows}: holds rows of other cells than {cell}")
        frames.append(table)
        settings[cell] = recorded
    if not frames:
        return
    from atnat.experiments.evaluation.timing import timing_settings_key  # lazy: start-up

    if len({timing_settings_key(v) for v in settings.values()}) > 1:
        by_record: dict[str, list[str]] = {}
        for c, v in sorted(settings.items()):
            by_record.setdefault(timing_settings_key(v), []).append(c)
        raise AtnatError(f"--collected {source}: the cells were timed with different speed settings or on different "
                         "devices, and their speed-ups cannot share one table (" + "; ".join(
                             f"{', '.join(cs)}: {record}" for record, cs in by_record.items()) + ")")
    write_csv(pd.concat(frames, ignore_index=True), out / TIMING_CSV)
    write_json_atomic(out / TIMING_JSON, next(iter(settings.values())))
