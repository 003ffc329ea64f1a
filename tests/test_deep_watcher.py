"""results/multi30k-deep/watch.py, the deep grid's watcher: what it times when it starts."""
from tests.deep_scripts import load_deep_script


def load_watcher():
    return load_deep_script("watch")


def test_a_student_found_finished_but_untimed_at_start_is_timed_at_the_first_look(tmp_path, monkeypatch):
    """2026-11-26: the watcher's timing of en-de-cmlm-kd-s3 was cut short at the end of a session; the watcher
    started next session counted the cell among those finished before it and never timed it. Now a finished
    cell without rows in timing.csv counts as new; a finished, timed one does not."""
    watch = load_watcher()
    group = ("en-de", 3)
    finished = {"en-de-at-s3": (True, group), "en-de-cmlm-kd-s3": (False, group)}
    calls, alive = [], iter([True, False])  # one look, then the grid's process group is gone
    monkeypatch.setattr(watch, "finished_cells", lambda results, grid: finished)
    monkeypatch.setattr(watch, "grid_groups", lambda results, grid: {group: ["en-de-at-s3", "en-de-cmlm-kd-s3", "en-de-cmlm-s3"]})
    monkeypatch.setattr(watch, "signal_group", lambda pgid, sig: next(alive) if sig == 0 else True)
    monkeypatch.setattr(watch, "timing_phase_running", lambda results, grid: False)
    monkeypatch.setattr(watch, "atnat", lambda *args, timeout=None: calls.append(args[0]) or 0)
    monkeypatch.setattr(watch.time, "sleep", lambda s: None)
    pgid = tmp_path / "pgid"
    pgid.write_text("999999\n")
    monkeypatch.setattr(watch, "timed_cells", lambda results, grid: {"en-de-at-s3"}, raising=False)
    assert watch.main(["--pgid-file", str(pgid), "--to", str(tmp_path / "kept")]) == 0
    assert calls == ["collect", "time", "collect", "collect"]  # collected, timed at the first look, collected
    # again (its timing.csv), a last collect

    calls.clear()
    alive = iter([True, False])
    monkeypatch.setattr(watch, "timed_cells", lambda results, grid: {"en-de-at-s3", "en-de-cmlm-kd-s3"}, raising=False)
    assert watch.main(["--pgid-file", str(pgid), "--to", str(tmp_path / "kept")]) == 0
    assert calls == ["collect"]  # nothing new: only the last collect


def test_a_seed_is_timed_whole_when_its_last_cell_finishes_and_a_twin_starts_no_timing():
    """2026-11-26 plan: each student timed beside its baseline (--partial), then every seed timed again
    whole by hand, and each fp32 twin timed beside its baseline on its own (~20 minutes of a paused grid
    for a speed the grid does not ask about; its seed then timed whole again, an hour). Now the cell that
    completes a seed starts that seed's whole timing (--anew, one session), and a twin neither starts a
    timing nor holds back its seed's."""
    watch = load_watcher()
    de2, fr1 = ("en-de", 2), ("en-fr", 1)
    groups = {de2: ["en-de-at-s2", "en-de-ctc-s2", "en-de-at-fp32-s2"],
              fr1: ["en-fr-at-s1", "en-fr-ctc-s1", "en-fr-cmlm-s1"]}
    done = {"en-de-at-s2": (True, de2), "en-fr-at-s1": (True, fr1), "en-fr-ctc-s1": (False, fr1)}
    # a first student of en-fr: beside its baseline, only its own group named
    assert watch.timings(["en-fr-ctc-s1"], done, groups, whole_only=()) == [
        ("--partial", "--only", "en-fr-at-s1", "--only", "en-fr-ctc-s1", "--only", "en-fr-cmlm-s1")]
    # the last student of en-fr: that seed anew and whole
    done["en-fr-cmlm-s1"] = (False, fr1)
    assert watch.timings(["en-fr-cmlm-s1"], done, groups, whole_only=()) == [
        ("--anew", "--partial", "--only", "en-fr-at-s1", "--only", "en-fr-ctc-s1", "--only", "en-fr-cmlm-s1")]
    # the last student of en-de seed 2, its twin still training: the seed anew and whole all the same
    done["en-de-ctc-s2"] = (False, de2)
    assert watch.timings(["en-de-ctc-s2"], done, groups, whole_only=()) == [
        ("--anew", "--partial", "--only", "en-de-at-s2", "--only", "en-de-ctc-s2", "--only", "en-de-at-fp32-s2")]
    # the twin finishing afterwards, or while a student still trains: nothing timed (collected only)
    done["en-de-at-fp32-s2"] = (False, de2)
    assert watch.timings(["en-de-at-fp32-s2"], done, groups, whole_only=()) == []
    del done["en-de-ctc-s2"]
    assert watch.timings(["en-de-at-fp32-s2"], done, groups, whole_only=()) == []
    # a baseline finishing beside a finished twin only: nothing to time beside it
    assert watch.timings(["en-de-at-s2"], {"en-de-at-s2": (True, de2), "en-de-at-fp32-s2": (False, de2)},
                         groups, whole_only=()) == []


def test_a_whole_only_student_waits_for_its_seeds_whole_timing():
    """en->fr seed 1: each of its first two students would have paused the grid for a timing beside the
    teacher (a CMLM's: 20-40 minutes) that its seed's whole timing replaces an hour later, and that a lost
    machine would make useless. A cell named by --whole-only is timed with its whole seed only; others
    still get their partial timing."""
    watch = load_watcher()
    de2, fr1 = ("en-de", 2), ("en-fr", 1)
    groups = {de2: ["en-de-at-s2", "en-de-ctc-s2", "en-de-cmlm-s2"],
              fr1: ["en-fr-at-s1", "en-fr-ctc-s1", "en-fr-cmlm-s1"]}
    done = {"en-de-at-s2": (True, de2), "en-de-ctc-s2": (False, de2),
            "en-fr-at-s1": (True, fr1), "en-fr-ctc-s1": (False, fr1)}
    assert watch.WHOLE_ONLY == ("en-fr-*",)
    assert watch.timings(["en-fr-ctc-s1"], done, groups, whole_only=watch.WHOLE_ONLY) == []
    assert watch.timings(["en-fr-ctc-s1", "en-de-ctc-s2"], done, groups, whole_only=watch.WHOLE_ONLY) == [
        ("--partial", "--only", "en-de-at-s2", "--only", "en-de-ctc-s2", "--only", "en-de-cmlm-s2")]
    done["en-fr-cmlm-s1"] = (False, fr1)
    assert watch.timings(["en-fr-cmlm-s1"], done, groups, whole_only=watch.WHOLE_ONLY) == [
        ("--anew", "--partial", "--only", "en-fr-at-s1", "--only", "en-fr-ctc-s1", "--only", "en-fr-cmlm-s1")]
    # a glob naming part of a group: a sibling's partial run leaves it out, and it alone makes no run worth it
    del done["en-fr-cmlm-s1"]
    done["en-fr-nat-s1"] = (False, fr1)
    groups[fr1].append("en-fr-nat-s1")
    assert watch.timings(["en-fr-ctc-s1", "en-fr-nat-s1"], done, groups, whole_only=("en-fr-ctc-*",)) == [
        ("--partial", "--only", "en-fr-at-s1", "--only", "en-fr-cmlm-s1", "--only", "en-fr-nat-s1")]
    assert watch.timings(["en-fr-at-s1"], {"en-fr-at-s1": (True, fr1), "en-fr-ctc-s1": (False, fr1)}, groups,
                         whole_only=("en-fr-ctc-*",)) == []


def test_the_watcher_times_no_en_fr_student_until_its_seed_is_whole(tmp_path, monkeypatch):
    """The loop passes --whole-only's default on: a first en->fr student is collected, not timed; the last
    one starts the seed's whole timing."""
    watch = load_watcher()
    fr1 = ("en-fr", 1)
    groups = {fr1: ["en-fr-at-s1", "en-fr-ctc-s1", "en-fr-cmlm-s1"]}
    finished = {"en-fr-at-s1": (True, fr1), "en-fr-ctc-s1": (False, fr1)}
    looks = [dict(finished), dict(finished), {**finished, "en-fr-cmlm-s1": (False, fr1)}]  # start, looks 1 and 2
    calls, alive = [], iter([True, True, False])  # two looks, then the grid's process group is gone
    monkeypatch.setattr(watch, "finished_cells", lambda results, grid: looks.pop(0) if len(looks) > 1 else looks[0])
    monkeypatch.setattr(watch, "grid_groups", lambda results, grid: groups)
    monkeypatch.setattr(watch, "timed_cells", lambda results, grid: {"en-fr-at-s1"})
    monkeypatch.setattr(watch, "signal_group", lambda pgid, sig: next(alive) if sig == 0 else True)
    monkeypatch.setattr(watch, "timing_phase_running", lambda results, grid: False)
    monkeypatch.setattr(watch, "atnat", lambda *args, timeout=None: calls.append(
        args[0] if args[0] == "collect" else f"time {args[4]}") or 0)
    monkeypatch.setattr(watch.time, "sleep", lambda s: None)
    pgid = tmp_path / "pgid"
    pgid.write_text("999999\n")
    assert watch.main(["--pgid-file", str(pgid), "--to", str(tmp_path / "kept")]) == 0
    assert calls == ["collect",  # look 1: en-fr-ctc-s1 finished: collected, not timed
                     "collect", "time --anew", "collect",  # look 2: the last student: its scores, the seed whole
                     "collect"]  # the last collect


def test_a_timing_that_succeeded_is_not_redone_and_a_failing_one_is_tried_twice_then_left(tmp_path, monkeypatch):
    """A look that timed one seed whole (53 minutes) and failed another's --partial marked nothing as seen,
    so the next look timed the whole seed again, and a failure that keeps happening paused the grid at
    every look. Each run's cells now count as timed when it succeeds; a failing run is tried twice."""
    watch = load_watcher()
    a, b = ("en-de", 2), ("en-de", 3)  # (en-fr-* would be --whole-only)
    groups = {a: ["en-de-at-s2", "en-de-ctc-s2"], b: ["en-de-at-s3", "en-de-ctc-s3", "en-de-cmlm-s3"]}
    finished = {"en-de-at-s2": (True, a), "en-de-ctc-s2": (False, a), "en-de-at-s3": (True, b),
                "en-de-ctc-s3": (False, b)}
    calls, alive = [], iter([True] * 4 + [False])  # four looks, then the grid's process group is gone
    monkeypatch.setattr(watch, "finished_cells", lambda results, grid: finished)
    monkeypatch.setattr(watch, "grid_groups", lambda results, grid: groups)
    monkeypatch.setattr(watch, "timed_cells", lambda results, grid: {"en-de-at-s2", "en-de-at-s3"})
    monkeypatch.setattr(watch, "signal_group", lambda pgid, sig: next(alive) if sig == 0 else True)
    monkeypatch.setattr(watch, "timing_phase_running", lambda results, grid: False)

    def atnat(*args, timeout=None):
        calls.append(args[0] if args[0] == "collect" else f"time {args[4]}")  # time GRID --results DIR OPTIONS
        return 1 if args[4] == "--partial" else 0  # the --partial run fails, the --anew one succeeds
    monkeypatch.setattr(watch, "atnat", atnat)
    monkeypatch.setattr(watch.time, "sleep", lambda s: None)
    pgid = tmp_path / "pgid"
    pgid.write_text("999999\n")
    assert watch.main(["--pgid-file", str(pgid), "--to", str(tmp_path / "kept")]) == 0
    assert calls == ["collect", "time --anew", "time --partial", "collect",  # look 1: the seed whole, the student beside its teacher
                     "collect", "time --partial", "collect",  # look 2: only the failed one again; then left to a person
                     "collect"]  # looks 3 and 4: nothing new; the last collect
