"""What the deep grid's training cost, from the collected cells and the pause logs, for the README's
compute line: each cell's train_time_s (every attempt, Lightning's timer: it runs on through a pause
of the grid) and the CPU model it trained on, summed per machine; beside it the grid's pauses as logged
(pauses.log: START END SECONDS what, by hand, time_seed.sh and side.sh --pause; watch.log: watch.py's
timing pauses), and each cell's training time net of the logged pauses that fell inside its training.

A cell's training windows in wall-clock time, as far as train.json tells them: the last attempt from
its start for `train_time_this_attempt_s` (exact). Lightning's timer is restored from the checkpoint an
attempt resumes from, so an attempt cut short counts up to its last checkpoint only: with one such
earlier attempt, it counted train_time_s minus the last attempt's time from its start (exact again);
with several, only their sum is known, and each lies somewhere between its start and the next
attempt's. So a cell's logged pauses are a range: `paused_min_s` (the exact windows only) to
`paused_max_s` (each uncertain attempt taken to run until the next began), and its training time net
of them the matching range. A pause counts in every cell it overlapped (two cells training at once were
both stopped), each paused second once. Pauses before 2026-11-26 11:39 UTC (the AMD machines) were not
logged: those cells' net time is their train_time_s, an overstatement the summary names.

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


def windows(record: dict) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The wall-clock spans in which a cell's timer ran: (exact spans, spans that hold an uncertain
    attempt's counted time somewhere inside them) (module docstring)."""
    starts = sorted(_epoch(a["time"]) for a in record.get("attempts") or [] if a.get("time"))
    last = record.get("train_time_this_attempt_s")
    if not starts or last is None:
        return [], []
    exact = [(starts[-1], starts[-1] + float(last))]
    earlier = list(zip(starts, starts[1:]))
    if len(earlier) == 1:  # its counted time is the rest of train_time_s
        counted = max(0.0, float(record.get("train_time_s") or 0.0) - float(last))
        return exact + [(earlier[0][0], min(earlier[0][1], earlier[0][0] + counted))], []
    return exact, earlier


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


def overlap(spans: list[tuple[float, float]], logged: list[dict]) -> float:
    """Seconds of the logged pauses inside the spans, each paused second counted once."""
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in spans for c, d in paused_spans(logged))


def cells(folder: Path, logged: list[dict] = ()) -> list[dict]:
    """One row per collected cell: its train_time_s, the logged pauses inside its training, the time net
    of them, its attempts and the CPU model of its attempts."""
    rows = []
    for train in sorted(folder.glob("*/train.json")):
        record = json.loads(train.read_text(encoding="utf-8"))
        attempts = record.get("attempts") or []
        models = sorted({(a.get("machine") or {}).get("cpu_model", "") for a in attempts} - {""})
        total, (exact, uncertain) = float(record.get("train_time_s") or 0.0), windows(record)
        least = overlap(exact, list(logged))
        most = least + overlap(uncertain, list(logged))
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
    """Every logged pause: (end, seconds, source, what)."""
    out = []
    if pauses_log.is_file():
        for line in pauses_log.read_text(encoding="utf-8").splitlines():
            parts = line.split(" ", 5)
            if len(parts) >= 5 and parts[4].isdigit():
                out.append({"end": f"{parts[2]} {parts[3]}", "seconds": int(parts[4]), "source": "pauses.log",
                            "what": parts[5] if len(parts) > 5 else "", "end_s": _epoch(f"{parts[2]} {parts[3]}")})
    if watch_log is not None and watch_log.is_file():
        for line in watch_log.read_text(encoding="utf-8").splitlines():
            m = WATCH_PAUSE.match(line)
            if m:
                out.append({"end": m.group(1), "seconds": int(m.group(2)), "source": "watch.log", "what": "atnat time",
                            "end_s": _epoch(m.group(1))})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=Path, default=HERE / "finished-cells")
    ap.add_argument("--pauses", type=Path, default=HERE / "pauses.log")
    ap.add_argument("--watch-log", type=Path, default=HERE / "watch.log")  # a copy of /work/deep-results/watch.log
    ap.add_argument("--out", type=Path, default=HERE / "compute.csv")
    args = ap.parse_args(argv)
    logged = pauses(args.pauses, args.watch_log)
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
    if logged:
        first = min(p["end"] for p in logged)
        total = sum(b - a for a, b in paused_spans(logged))
        print(f"grid pauses logged (from {first} UTC on; {len(logged)} pauses): {total / 3600:.1f} h; cells that trained "
              f"before the first were paused too (unlogged): their net time is an overstatement")
    print(f"written {args.out} ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
