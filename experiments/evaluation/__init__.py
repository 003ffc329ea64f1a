"""Evaluation: decoding and measuring a trained model. `assemble.py` (where a model meets a search
strategy), `decode.py` (a whole split with one strategy), `evaluate.py` (a run's test split with its
strategies: hypotheses, scores, curves), `metrics/` (the metrics of a results row; a new metric is
one class there or in a plugin), `schema.py` and `columns.py` (every column of results.csv, declared
once), `baseline.py` (which systems are AT and which one comparisons are against), `probes.py`
(error propagation), `timing.py` (speed, side by side), `translate.py` (streaming translation).
May import: config/, modelfiles/, data/, files.py."""
