"""results/multi30k-deep/watch.py, the deep grid's watcher: what it times when it starts."""
import importlib.util
from pathlib import Path

WATCH = Path(__file__).resolve().parents[1] / "results" / "multi30k-deep" / "watch.py"


def load_watcher():
    spec = importlib.util.spec_from_file_location("deep_watch", WATCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_student_found_finished_but_untimed_at_start_is_timed_at_the_first_look(tmp_path, monkeypatch):
    """2026-11-26: the watcher's timing of en-de-cmlm-kd-s3 was cut short at the end of a session; the watcher
    started next session counted the cell among those finished before it and never timed it. Now a finished
    cell without rows in timing.csv counts as new; a finished, timed one does not."""
    watch = load_watcher()
    group = ("en-de", 3)
    finished = {"en-de-at-s3": (True, group), "en-de-cmlm-kd-s3": (False, group)}
    calls, alive = [], iter([True, False])  # one look, then the grid's process group is gone
    monkeypatch.setattr(watch, "finished_cells", lambda results, grid: finished)
    monkeypatch.setattr(watch, "signal_group", lambda pgid, sig: next(alive) if sig == 0 else True)
    monkeypatch.setattr(watch, "timing_phase_running", lambda results, grid: False)
    monkeypatch.setattr(watch, "atnat", lambda *args, timeout=None: calls.append(args[0]) or 0)
    monkeypatch.setattr(watch.time, "sleep", lambda s: None)
    pgid = tmp_path / "pgid"
    pgid.write_text("999999\n")
    monkeypatch.setattr(watch, "timed_cells", lambda results, grid: {"en-de-at-s3"}, raising=False)
    assert watch.main(["--pgid-file", str(pgid), "--to", str(tmp_path / "kept")]) == 0
    assert calls == ["time", "collect", "collect"]  # timed at the first look, collected, a last collect

    calls.clear()
    alive = iter([True, False])
    monkeypatch.setattr(watch, "timed_cells", lambda results, grid: {"en-de-at-s3", "en-de-cmlm-kd-s3"}, raising=False)
    assert watch.main(["--pgid-file", str(pgid), "--to", str(tmp_path / "kept")]) == 0
    assert calls == ["collect"]  # nothing new: only the last collect
