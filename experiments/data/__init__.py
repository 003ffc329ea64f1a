"""Data and tasks: what a run learns from. `tasks.py` (built-in synthetic tasks and parallel text
files, registered by name; plugins through the entry-point group `atnat.tasks`), `tokenize.py`
(symbols and sentencepiece, cached and checked), `batching.py` (token-budget batches that resume
mid-epoch). May import: files.py."""
