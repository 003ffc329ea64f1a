"""A cell's records. Its results record, `runs/<cell>/metrics.json`: {"status": "ok" | "failed", "rows":
[...], "error": ...}, written last by a finished (or failed) cell, so its presence marks the cell done;
read back with its shape checked, since anything on disk may have been cut short or hand-edited. And
what its other records say: its whole training time, the teacher weights a student learnt from."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from atnat.core.errors import AtnatError
from atnat.experiments.files import path_part, write_json_atomic
from atnat.experiments.provenance import stamp

MAX_BYTES = 64 * 1024 * 1024  # a results file larger than this is not a result (a misplaced checkpoint, say)


def write_record(run_dir: Path, status: str, rows: list[dict], error: str = "",
                 extra_tests: list[dict] | None = None) -> None:
    """The cell's record: written last, atomically (its presence marks the cell finished or failed);
    `extra_tests`: the scores on eval.extra_tests, one dict per (strategy, test set)."""
    record = {"status": status, "rows": rows, "written_by": stamp()}  # the code that evaluated the cell
    if extra_tests:
        record["extra_tests"] = extra_tests
    if error:
        record["error"] = error
    write_json_atomic(run_dir / "metrics.json", record)


def read_metrics(run_dir: Path) -> dict | None:
    """A cell's metrics.json ({"status": "ok" | "failed", "rows": [...]}, "error" when failed), or None
    when there is none; one of another shape (hand-edited, cut short) is an AtnatError naming it."""
    path = run_dir / "metrics.json"
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise AtnatError(f"{path}: not a readable results record ({err})") from None
    problem = None
    if not isinstance(meta, dict):
        problem = f"expected a JSON object with status and rows, got a {type(meta).__name__}"
    elif meta.get("status") not in ("ok", "failed"):
        problem = f"status is {meta.get('status')!r}, expected 'ok' or 'failed'"
    elif not isinstance(meta.setdefault("rows", []) if meta["status"] == "failed" else meta.get("rows"), list) \
            or not all(isinstance(r, dict) for r in meta["rows"]):
        problem = "rows is not a list of result rows"
    elif meta["status"] == "ok" and not meta["rows"]:
        problem = "status ok but no result rows"
    else:
        problem = next(filter(None, (row_problem(i, r) for i, r in enumerate(meta["rows"]))), None)
    if problem:
        raise AtnatError(f"{path}: not a results record of atnat: {problem}")
    return meta


def row_problem(index: int, row: dict) -> str | None:
    """What makes result row `index` unfit for the tables: a missing or empty strategy (its system's
    name), or a value of a results.csv column that is not of the column's kind (a number as text, say);
    None when it fits. Keys of no known column (a plugin metric not loaded here) are left as they are."""
    strategy = row.get("strategy")
    if not isinstance(strategy, str) or not strategy:
        return f"row {index} has no strategy name (got {strategy!r})"
    try:  # it names the run's hypothesis files (hyps/<strategy>.txt): one file in that folder, never a path
        path_part(strategy, f"row {index} strategy")
    except AtnatError as err:
        return str(err)
    from atnat.experiments.evaluation.columns import by_name  # here: it loads the metric registry

    known = by_name()
    wrong = [f"{name}={value!r}" for name, value in row.items() if name in known and not known[name].accepts(value)]
    if wrong:
        return f"row {index} ({strategy}) has values of the wrong kind: {', '.join(wrong)}"
    return None


def whole_train_time(run_dir: Path, trained: dict, fallback: float = float("nan")) -> float:
    """The cell's whole training time from train.json: counted over every attempt since train.json
    has `train_time_this_attempt_s` beside it; an older train.json holds the last attempt's only,
    which is the whole only when the run trained in one attempt (logs/attempts) - else NaN, so no
    report sums part of a resumed run's time as if it were all of it."""
    if "train_time_s" not in trained:
        return fallback
    seconds = trained["train_time_s"]  # read back: a number of seconds, or no time at all
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 <= seconds < math.inf:
        return float("nan")
    attempts = run_dir / "logs" / "attempts"
    try:
        single = attempts.is_file() and attempts.read_text().strip() in ("", "1")
    except (OSError, UnicodeDecodeError):
        single = False
    return float(seconds) if "train_time_this_attempt_s" in trained or single else float("nan")


def training_throughput(trained: dict) -> float:
    """Target tokens a second of the last training attempt's loop after its first steps, validation left out
    (train.json's throughput.steady, experiments/training/throughput.py); NaN where it was not recorded (runs
    before it was, runs of 10 steps or fewer) or is not a positive number."""
    steady = (trained.get("throughput") or {}).get("steady") if isinstance(trained.get("throughput"), dict) else None
    value = steady.get("target_tokens_per_s") if isinstance(steady, dict) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return float("nan")
    try:
        value = float(value)  # an integer too large for a float is no speed either
    except OverflowError:
        return float("nan")
    return value if math.isfinite(value) and value > 0 else float("nan")


def cell_status(run_dir: Path) -> str | None:
    """"ok" / "failed" from the cell's metrics.json; None when it has none, or one of the wrong shape
    (named on stderr: the cell then runs again, which re-evaluates a finished training)."""
    try:
        meta = read_metrics(run_dir)
    except AtnatError as err:
        print(f"atnat: {err}; the cell counts as unfinished", file=sys.stderr)
        return None
    return None if meta is None else meta["status"]


def teacher_stamps(folder: Path) -> set[str]:
    """The teacher weights a student's run or copy records having learnt from: the distilled targets'
    teacher (distill.json) and the weights it started from (init.json, and train.json initialised_from, when those
    were its teacher's). Files that are links or unreadable record nothing; copies made before these
    records existed (an undistilled student of an older atnat) record nothing and go unchecked."""
    def read(name: str) -> dict:
        path = folder / name
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_BYTES:
            return {}
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            return {}
        return value if isinstance(value, dict) else {}

    stamps = {read("distill.json").get("checkpoint")}
    teacher = (read("config.json").get("distill") or {}).get("teacher")
    for initialised in (read("init.json"), read("train.json").get("initialised_from")):  # (init.json: from step 0)
        if isinstance(initialised, dict) and teacher and initialised.get("source") == str(teacher):
            stamps.add(initialised.get("checkpoint"))  # started from the teacher's weights, not another model's
    return {s for s in stamps if isinstance(s, str) and s}
