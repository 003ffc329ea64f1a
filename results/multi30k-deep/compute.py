"""What the deep grid's training cost, from the collected cells and the pause logs, for the README's
compute line: each cell's train_time_s (every attempt, Lightning's timer: it runs on through a pause
of the grid) and the CPU model it trained on, summed per machine; beside it the grid's pauses as logged
(pauses.log: START END SECONDS what, by hand, time_seed.sh and side.sh --pause; watch.log: watch.py's
timing pauses). A pause while two cells trained counts in both their train_time_s, so the sum
overstates the training by at most twice the pauses that fell inside it; the two are stated side by
side, never subtracted as if exact.

    python3 results/multi30k-deep/compute.py [--watch-log /work/deep-results/watch.log]
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


def cells(folder: Path) -> list[dict]:
    """One row per collected cell: its train_time_s, attempts and the CPU model of its attempts."""
    rows = []
    for train in sorted(folder.glob("*/train.json")):
        record = json.loads(train.read_text(encoding="utf-8"))
        attempts = record.get("attempts") or []
        models = sorted({(a.get("machine") or {}).get("cpu_model", "") for a in attempts} - {""})
        rows.append({"cell": train.parent.name, "train_time_s": float(record.get("train_time_s") or 0.0),
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
                            "what": parts[5] if len(parts) > 5 else ""})
    if watch_log is not None and watch_log.is_file():
        for line in watch_log.read_text(encoding="utf-8").splitlines():
            m = WATCH_PAUSE.match(line)
            if m:
                out.append({"end": m.group(1), "seconds": int(m.group(2)), "source": "watch.log", "what": "atnat time"})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=Path, default=HERE / "finished-cells")
    ap.add_argument("--pauses", type=Path, default=HERE / "pauses.log")
    ap.add_argument("--watch-log", type=Path, default=Path("/work/deep-results/watch.log"))
    ap.add_argument("--out", type=Path, default=HERE / "compute.csv")
    args = ap.parse_args(argv)
    rows = cells(args.cells)
    if not rows:
        print(f"compute.py: no train.json under {args.cells}", file=sys.stderr)
        return 2
    with args.out.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    by_model: dict[str, list[float]] = {}
    for r in rows:
        by_model.setdefault(r["cpu_model"], []).append(r["train_time_s"])
    print(f"{len(rows)} collected cells, train_time_s summed: {sum(r['train_time_s'] for r in rows) / 3600:.1f} h")
    for model, times in by_model.items():
        print(f"  {model}: {len(times)} cells, {sum(times) / 3600:.1f} h")
    logged = pauses(args.pauses, args.watch_log)
    if logged:
        first = min(p["end"] for p in logged)
        total = sum(p["seconds"] for p in logged)
        print(f"grid pauses logged (from {first} UTC on; {len(logged)} pauses): {total / 3600:.1f} h; a pause while "
              f"two cells trained counts in both, so the sum above overstates training by at most {2 * total / 3600:.1f} h")
    print(f"written {args.out} ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
