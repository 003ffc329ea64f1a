"""The table in STATUS.md: each finished cell's test scores, from its metrics.json and train.json.

    .venv/bin/python results/multi30k-deep/finished_cells_table.py
"""
import glob
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
print("| cell | strategy | test2016 sacreBLEU | 95% CI | chrF | train steps | precision |")
print("|---|---|---|---|---|---|---|")
for cell in sorted(glob.glob(os.path.join(here, "finished-cells", "*"))):
    metrics = json.load(open(os.path.join(cell, "metrics.json")))
    train = json.load(open(os.path.join(cell, "train.json")))
    for r in metrics["rows"]:
        print(f"| {os.path.basename(cell)} | {r['strategy']} | {r['bleu']:.2f} | {r['bleu_ci_low']:.2f}-{r['bleu_ci_high']:.2f} "
              f"| {r['chrf']:.2f} | {r['train_steps']} | {train['precision']} |")
