"""Does training on this CPU reproduce? The deep grid's two runs side by side, cell by cell.

Run 1 (`run1/finished-cells/`) and run 2 (`finished-cells/`) trained the same cells with the same
seeds, settings and training code (STATUS.md), 1 thread per cell, and decoded them with the same
code (no file under models/ or decoding/ differs between 3eb4ed6 and 2df9753). Two things changed
names in between, and RUN1_LABELS maps run 1's labels to run 2's: a label now shows every option set
away from its default (run 1's `beam5` is the same search as run 2's `beam5-alpha=0.6`), and run 1's
distilled CMLMs, evaluated under 17f3ce4, stopped mask-predict early by default (run 1's
`mask-predict-4-lb3` is run 2's `mask-predict-4-lb3-early_stop=true`; run1/interim/notes.md). For each cell both runs finished,
per strategy: test2016 BLEU in each run and their difference, the share of test sentences whose
hypothesis is the same string in both (blank for the whole-schedule mask-predict rows, whose run-1
scores come from run1/mask_predict_sweep/sweep.csv, which kept no hypotheses), and over the validations both logged, the largest
difference in validation BLEU and the first step where it differs. Run 2's cells are
read from finished-cells/ and from run2-amd/: run 2's copies of cells trained on the AMD EPYC machines
that were later trained again on another CPU model (the en-de teachers of seeds 2 and 3, from 2026-11-26 on an
Intel Xeon with AMX, and en-fr's teacher, moved there on 2026-11-26 at 16:16 UTC before its training on that machine) and replaced in finished-cells/ by those. Training reproduces only on the same CPU
model (cpu-model-check/), so each row names where run 2's copy trained (`run2_cpu`: attempts.json's
machine record, or "AMD EPYC (not recorded)" for copies from before the record existed, all of which
trained on the AMD machines, and "not recorded" for the two teachers started on the Intel machine under
older code, which the collect after their training files in finished-cells/). Written to
reproducibility.csv beside this file and printed.

    python3 results/multi30k-deep/reproduce.py
"""
import csv
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUN1_LABELS = {  # (cell prefix, run 1's label) -> run 2's label for the same decoding
    ("en-de-at", "beam5"): "beam5-alpha=0.6", ("en-fr-at", "beam5"): "beam5-alpha=0.6",
    **{(cell, f"mask-predict-{t}-lb3"): f"mask-predict-{t}-lb3-early_stop=true"
       for cell in ("en-de-cmlm-kd", "en-fr-cmlm-kd") for t in (4, 10)},
}
COLUMNS = ("cell", "run2_copy", "run2_cpu", "strategy", "steps_run1", "steps_run2", "bleu_run1", "bleu_run2",
           "bleu_diff", "identical_hyps", "sentences", "val_points", "val_bleu_max_abs_diff", "val_first_diff_step")
INTEL_RETRAINED = {"en-de-at-s2", "en-de-at-s3"}  # started 2026-11-26 on the Intel machine before attempts recorded it


def scores(cell: Path, run1: bool = False) -> dict[str, float]:
    """strategy label (run 2's names) -> test2016 BLEU."""
    data = json.loads((cell / "metrics.json").read_text())
    family = cell.name.rsplit("-s", 1)[0]
    rename = (lambda label: RUN1_LABELS.get((family, label), label)) if run1 else (lambda label: label)
    return {rename(row["strategy"]): float(row["bleu"]) for row in data.get("rows", [])}


def run1_label(cell: Path, label: str) -> str:
    family = cell.name.rsplit("-s", 1)[0]
    return next((old for (f, old), new in RUN1_LABELS.items() if f == family and new == label), label)


def validations(cell: Path) -> dict[int, float]:
    with open(cell / "logs" / "metrics.csv", newline="") as f:
        return {int(r["step"]): float(r["val/bleu"]) for r in csv.DictReader(f) if r.get("val/bleu")}


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1] if path.is_file() else []


def sweep_scores(cell: str) -> dict[str, float]:
    """Run 1's distilled CMLMs decoded again with the whole mask-predict schedule
    (run1/mask_predict_sweep/sweep.csv, test2016), under run 2's labels: scores only, no hypotheses."""
    path = HERE / "run1" / "mask_predict_sweep" / "sweep.csv"
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        return {r["strategy"]: float(r["bleu"]) for r in csv.DictReader(f)
                if r["cell"] == cell and r["test_set"] == "test2016" and r["early_stop"] == "False"}


def cpu_of(cell: Path) -> str:
    """Where run 2's copy trained: the CPU models its attempts recorded."""
    try:
        attempts = json.loads((cell / "attempts.json").read_text())
    except (OSError, ValueError):
        attempts = []
    attempts = [a for a in attempts if isinstance(a, dict)] if isinstance(attempts, list) else []
    models = sorted({str(a["machine"].get("cpu_model")) for a in attempts if isinstance(a.get("machine"), dict)})
    if models:
        unrecorded = any(not isinstance(a.get("machine"), dict) for a in attempts)
        return " + ".join(models + (["not recorded"] if unrecorded else []))
    if cell.parent.name == "finished-cells" and cell.name in INTEL_RETRAINED:
        return "not recorded (Intel Xeon, 2026-11-26)"
    return "AMD EPYC (not recorded)"


def compare(one: Path, two: Path) -> list[dict]:
    steps = [json.loads((c / "train.json").read_text()).get("global_step") for c in (one, two)]
    a, b = validations(one), validations(two)
    common = sorted(set(a) & set(b))
    diffs = [abs(a[s] - b[s]) for s in common]
    first = next((s for s in common if a[s] != b[s]), "")
    rows = []
    where = {"run2_copy": two.parent.name, "run2_cpu": cpu_of(two)}
    s1, s2 = scores(one, run1=True), scores(two)
    for strategy in [s for s in s1 if s in s2]:
        h1, h2 = lines(one / "hyps" / f"{run1_label(one, strategy)}.txt"), lines(two / "hyps" / f"{strategy}.txt")
        same = sum(x == y for x, y in zip(h1, h2)) if len(h1) == len(h2) else ""
        rows.append({"cell": one.name, **where, "strategy": strategy, "steps_run1": steps[0], "steps_run2": steps[1],
                     "bleu_run1": round(s1[strategy], 2), "bleu_run2": round(s2[strategy], 2),
                     "bleu_diff": round(s2[strategy] - s1[strategy], 2), "identical_hyps": same,
                     "sentences": len(h1), "val_points": len(common),
                     "val_bleu_max_abs_diff": round(max(diffs), 4) if diffs else "", "val_first_diff_step": first})
    swept = sweep_scores(one.name)
    for strategy in [s for s in s2 if s not in s1 and s in swept]:  # decoded in run 1 by the sweep only
        rows.append({"cell": one.name, **where, "strategy": strategy, "steps_run1": steps[0], "steps_run2": steps[1],
                     "bleu_run1": round(swept[strategy], 2), "bleu_run2": round(s2[strategy], 2),
                     "bleu_diff": round(s2[strategy] - swept[strategy], 2), "identical_hyps": "", "sentences": "",
                     "val_points": len(common), "val_bleu_max_abs_diff": round(max(diffs), 4) if diffs else "",
                     "val_first_diff_step": first})
    return rows


def same(row: dict) -> str:
    return f"{row['identical_hyps']}/{row['sentences']}" if row["sentences"] != "" else "- (sweep kept none)"


def main() -> int:
    run1 = HERE / "run1" / "finished-cells"
    copies = [c for folder in (HERE / "run2-amd", HERE / "finished-cells") if folder.is_dir()
              for c in sorted(folder.iterdir()) if (run1 / c.name).is_dir() and (c / "metrics.json").is_file()]
    if not copies:
        print(f"no cell finished in both {run1} and run 2", file=sys.stderr)
        return 1
    rows = [r for two in sorted(copies, key=lambda c: c.name) for r in compare(run1 / two.name, two)]
    with open(HERE / "reproducibility.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    for r in rows:
        print(f"{r['cell']:24} {r['run2_copy']:14} {r['strategy']:28} {r['bleu_run1']:6.2f} {r['bleu_run2']:6.2f} {r['bleu_diff']:+.2f}  "
              f"same hyps {same(r)}  val max|d| {r['val_bleu_max_abs_diff']} "
              f"(first at step {r['val_first_diff_step'] or '-'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
