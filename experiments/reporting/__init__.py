"""Results and reports: from the runs of a grid to results.csv and report.md/html. `records.py`
(a cell's metrics.json), `table.py` (results.csv, the timing joined, paired tests against the
baseline), `environment.py`, `aggregate.py` (mean and spread over seeds; the claims it allows),
`goals.py` (a grid's goals judged), `results.py` (a results folder read back and checked),
`integrity.py`, `judging.py` (the summary's sentences), `report.py` (the document's sections),
`markdown.py` / `html.py` / `blocks.py` (rendering), `figures.py`. May import: evaluation/,
config/, modelfiles/, data/, files.py."""
