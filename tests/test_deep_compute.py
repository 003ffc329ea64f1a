"""results/multi30k-deep/compute.py: the deep grid's training time net of the grid's logged pauses
(the README's compute line)."""
import csv
import json

from tests.deep_scripts import load_deep_script


def load_compute():
    return load_deep_script("compute")


def attempt(time: str, resumed: bool = True) -> dict:
    return {"time": time, "resumed_from": "last.ckpt" if resumed else None,
            "machine": {"cpu_model": "Intel(R) Xeon(R) Processor"}}


def test_pauses_inside_a_cells_training_are_taken_off_once_and_an_uncertain_attempt_gives_a_range(tmp_path):
    """Lightning's timer runs on through a pause of the grid (SIGSTOP), so train_time_s counted 7.0 h of pauses
    as training; summed naively the logged pauses also counted twice where watch.py's timing is in both logs."""
    compute = load_compute()
    cells = tmp_path / "cells"
    # one earlier attempt (10:00, counted 1,800 s up to its last checkpoint), then the last (12:00, 3,600 s)
    one = {"train_time_s": 5400.0, "train_time_this_attempt_s": 3600.0, "global_step": 100,
           "attempts": [attempt("2026-11-26T10:00:00+00:00", False), attempt("2026-11-26T12:00:00+00:00")]}
    # two earlier attempts: only their sum (4,000 s of their 7,200 s of windows) is known
    two = {"train_time_s": 5000.0, "train_time_this_attempt_s": 1000.0, "global_step": 100,
           "attempts": [attempt("2026-11-26T10:00:00+00:00", False), attempt("2026-11-26T11:00:00+00:00"),
                        attempt("2026-11-26T12:00:00+00:00")]}
    # started afresh at 11:00 (no checkpoint to resume from): the 10:00 attempt counts nothing
    fresh = {"train_time_s": 5400.0, "train_time_this_attempt_s": 3600.0, "global_step": 100,
             "attempts": [attempt("2026-11-26T10:00:00+00:00", False), attempt("2026-11-26T11:00:00+00:00", False),
                          attempt("2026-11-26T12:00:00+00:00")]}
    for name, record in (("one", one), ("two", two), ("fresh", fresh)):
        (cells / name).mkdir(parents=True)
        (cells / name / "train.json").write_text(json.dumps(record))
    pauses = tmp_path / "pauses.log"
    pauses.write_text(
        "2026-11-26 10:10:00 2026-11-26 10:15:00 300 side.sh --pause pytest\n"  # inside one's counted first half hour
        "2026-11-26 10:40:00 2026-11-26 10:50:00 600 after one's last checkpoint: not in its timer\n"
        "2026-11-26 12:10:00 2026-11-26 12:20:00 600 watch.py: atnat time (also in watch.log)\n")
    watch = tmp_path / "watch.log"
    watch.write_text("2026-11-26 12:20:00 UTC atnat time --partial exited 0; the grid goes on after a pause of 600 s\n"
                     "2026-11-26 12:18:00 UTC atnat time --partial exited 0; the grid goes on after a pause of 60 s\n")
    out = tmp_path / "compute.csv"
    assert compute.main(["--cells", str(cells), "--pauses", str(pauses), "--watch-log", str(watch),
                         "--out", str(out)]) == 0
    rows = {r["cell"]: r for r in csv.DictReader(out.open())}
    # one: 300 s in its first attempt's counted span, 600 s (once, not 660 or 1,200) in its last
    assert float(rows["one"]["paused_min_s"]) == float(rows["one"]["paused_max_s"]) == 900
    assert float(rows["one"]["net_train_time_min_s"]) == float(rows["one"]["net_train_time_max_s"]) == 4500
    # two: 400 s inside its last attempt (12:00 for 1,000 s) for sure; its earlier attempts (10:00-11:00 and
    # 11:00-12:00, 4,000 s counted: each at least its first 400 s, at most all of it) add 0 to 900 s
    assert float(rows["two"]["paused_min_s"]) == 400 and float(rows["two"]["paused_max_s"]) == 1300
    assert float(rows["two"]["net_train_time_min_s"]) == 3700 and float(rows["two"]["net_train_time_max_s"]) == 4600
    # fresh: its timer restarted at 11:00 and counted 1,800 s then (11:00-11:30: no pause), so the pause at
    # 10:10 is not in it; 600 s in its last attempt
    assert float(rows["fresh"]["paused_min_s"]) == float(rows["fresh"]["paused_max_s"]) == 600
