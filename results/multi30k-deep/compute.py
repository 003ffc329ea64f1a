"""What the deep grid's training cost, from the collected cells and the pause logs, for the README's
compute line: each cell's train_time_s (every attempt, Lightning's timer: it runs on through a pause
of the grid) and the CPU model it trained on, summed per machine; beside it the grid's pauses as logged
(pauses.log: START END SECONDS what, by hand, time_seed.sh and side.sh --pause; watch.log: watch.py's
timing pauses), and each cell's training time net of the logged pauses that fell inside its training.

A cell's training windows in wall-clock time, as far as train.json tells them. Lightning's timer is
restored from the checkpoint an attempt resumes from (an attempt that resumed from none, `resumed_from`
null, starts it at zero: the attempts before it count nothing), so an attempt cut short counts from its
start up to its last checkpoint, and the last attempt for `train_time_this_attempt_s`. The earlier
attempts' counted time is train_time_s minus the last attempt's; with one earlier attempt its span is
then exact; with several only their sum is known, each lying between its start and the next attempt's,
so their pauses are bounded: at least those in the part each attempt must have counted (its window
less the others' slack), at most those in the whole windows (and never more than the time they
counted). So a cell's logged pauses are a range, `paused_min_s` to `paused_max_s`, and its training
time net of them the matching range. A pause counts in every cell it overlapped (two cells training at
once were both stopped), each paused second once. The logs do not cover every pause: watch.py's
timings are in watch.log from its first one (2026-11-26 10:56 UTC), the others in pauses.log from
2026-11-26 16:09 UTC; pauses on the AMD machines and by hand before then were not logged, so a
cell's net time overstates its training by those (the summary prints each log's coverage).

    python3 results/multi30k-deep/compute.py [--watch-log results/multi30k-deep/watch.log]  (copy both logs here first)
    -> compute.csv beside this file (one row per cell), a summary on stdout
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
INTEL_FROM = "2026-11-26T07:00"  # the Intel machine's first cells (STATUS.md); earlier cells trained on AMD EPYC
WATCH_PAUSE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC atnat time .*pause of (\d+) s")


def _epoch(stamp: str) -> float:
    """'2026-11-26T19:25:11+00:00' or '2026-11-26 19:25:11' (UTC) -> seconds since the epoch."""
    when = datetime.fromisoformat(stamp.replace(" ", "T"))
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def paused_range(record: dict, spans: list[tuple[float, float]]) -> tuple[float, float]:
    """(least, most) seconds of the paused spans that a cell's timer counted (module docstring)."""
    attempts = sorted((_epoch(a["time"]), a.get("resumed_from")) for a in record.get("attempts") or [] if a.get("time"))
    fresh = [i for i, (_, resumed) in enumerate(attempts) if resumed is None]
    starts = [t for t, _ in attempts[fresh[-1] if fresh else 0:]]  # the timer restarted at the last fresh start
    last = record.get("train_time_this_attempt_s")
    if not starts or last is None:
        return 0.0, 0.0
    inside = lambda a, b: sum(max(0.0, min(b, d) - max(a, c)) for c, d in spans)  # noqa: E731
    sure = inside(starts[-1], starts[-1] + float(last))
    earlier = list(zip(starts, starts[1:]))
    counted = max(0.0, float(record.get("train_time_s") or 0.0) - float(last))  # by the earlier attempts, together
    slack = sum(b - a for a, b in earlier) - counted  # how much of their windows they did not count
    least = sum(inside(a, a + min(b - a, max(0.0, (b - a) - slack))) for a, b in earlier)
    most = min(counted, sum(inside(a, a + min(b - a, counted)) for a, b in earlier))
    return sure + least, sure + max(least, most)


def paused_spans(logged: list[dict]) -> list[tuple[float, float]]:
    """The logged pauses as disjoint wall-clock spans: one pause is often in both logs (watch.py's timing
    in watch.log and, by hand, in pauses.log), and a side command may run inside a longer pause."""
    merged: list[list[float]] = []
    for a, b in sorted((p["end_s"] - p["seconds"], p["end_s"]) for p in logged):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def cells(folder: Path, logged: list[dict] | None = None) -> list[dict]:
    """One row per collected cell: its train_time_s, the logged pauses inside its training, the time net
    of them, its attempts and the CPU model of its attempts."""
    rows, spans = [], paused_spans(logged or [])
    for train in sorted(folder.glob("*/train.json")):
        record = json.loads(train.read_text(encoding="utf-8"))
        attempts = record.get("attempts") or []
        models = sorted({(a.get("machine") or {}).get("cpu_model", "") for a in attempts} - {""})
        total = float(record.get("train_time_s") or 0.0)
        least, most = paused_range(record, spans)
        rows.append({"cell": train.parent.name, "train_time_s": total, "paused_min_s": round(least, 1),
                     "paused_max_s": round(most, 1), "net_train_time_min_s": round(max(0.0, total - most), 1),
                     "net_train_time_max_s": round(total - least, 1),
                     "attempts": len(attempts), "global_step": record.get("global_step"),
                     "cpu_model": " + ".join(models) or _inferred(attempts),
                     "first_start": min((a["time"] for a in attempts if a.get("time")), default="")})
    return rows


def _inferred(attempts: list[dict]) -> str:
    """A cell that trained before attempts recorded the machine: its model from when it started."""
    start = min((a["time"] for a in attempts if a.get("time")), default="")
    if not start:
        return "not recorded"
    return "AMD EPYC (inferred from the date)" if start < INTEL_FROM else "Intel(R) Xeon(R) Processor (inferred from the date)"


def pauses(pauses_log: Path, watch_log: Path | None) -> list[dict]:
    """Every logged pause: {end_s (epoch seconds), seconds, source (the log)}; a log that is not there
    gives none (main says so)."""
    out = []
    if pauses_log.is_file():
        for line in pauses_log.read_text(encoding="utf-8").splitlines():
            parts = line.split(" ", 5)
            if len(parts) >= 5 and parts[4].isdigit():
                out.append({"end_s": _epoch(f"{parts[2]} {parts[3]}"), "seconds": int(parts[4]), "source": "pauses.log"})
    if watch_log is not None and watch_log.is_file():
        for line in watch_log.read_text(encoding="utf-8").splitlines():
            m = WATCH_PAUSE.match(line)
            if m:
                out.append({"end_s": _epoch(m.group(1)), "seconds": int(m.group(2)), "source": "watch.log"})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=Path, default=HERE / "finished-cells")
    ap.add_argument("--pauses", type=Path, default=HERE / "pauses.log")
    ap.add_argument("--watch-log", type=Path, default=HERE / "watch.log")  # a copy of /work/deep-results/watch.log
    ap.add_argument("--out", type=Path, default=HERE / "compute.csv")
    args = ap.parse_args(argv)
    logged = pauses(args.pauses, args.watch_log)
    for log in (args.pauses, args.watch_log):
        if not log.is_file():
            print(f"compute.py: {log} is not there: none of its pauses are taken off", file=sys.stderr)
    rows = cells(args.cells, logged)
    if not rows:
        print(f"compute.py: no train.json under {args.cells}", file=sys.stderr)
        return 2
    with args.out.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    by_model: dict[str, list[dict]] = {}
    for r in rows:
        by_model.setdefault(r["cpu_model"], []).append(r)
    hours = lambda part, key: sum(r[key] for r in part) / 3600  # noqa: E731
    print(f"{len(rows)} collected cells: train_time_s summed {hours(rows, 'train_time_s'):.1f} h, of which the logged "
          f"grid pauses {hours(rows, 'paused_min_s'):.1f}-{hours(rows, 'paused_max_s'):.1f} h: "
          f"{hours(rows, 'net_train_time_min_s'):.1f}-{hours(rows, 'net_train_time_max_s'):.1f} h of training")
    for model, part in by_model.items():
        print(f"  {model}: {len(part)} cells, {hours(part, 'net_train_time_min_s'):.1f}-"
              f"{hours(part, 'net_train_time_max_s'):.1f} h net ({hours(part, 'train_time_s'):.1f} h with the pauses)")
    spans = paused_spans(logged)
    if spans:
        print(f"grid pauses logged: {sum(b - a for a, b in spans) / 3600:.1f} h in {len(spans)} spans (pauses in both "
              "logs, or inside another, counted once)")
    for source in ("watch.log", "pauses.log"):
        starts = [p["end_s"] - p["seconds"] for p in logged if p["source"] == source]
        if starts:
            print(f"  {source}: its first pause began {datetime.fromtimestamp(min(starts), timezone.utc):%Y-%m-%d %H:%M} UTC; "
              "pauses of its kind before then were not logged, and the net times of cells that trained then overstate "
              "by them")
    print(f"written {args.out} ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
